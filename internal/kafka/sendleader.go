package kafka

// A call's records in one produce request per partition leader, rather
// than one per partition: a worker's batch spreads over every partition of
// an output topic, and each request costs a round trip, its encoding and
// the broker's work whatever its size. It is the first try only: a
// partition that this request did not write (its records over one
// request's bounds, an error for it, a request that failed or went to a
// leader that moved) is written partition by partition (send.go), from its
// first record, with that path's retries and errors. A broker that does
// not answer thus costs a call one more WriteTimeout before it fails.

import (
	"bytes"
	"context"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"
	produceAPI "github.com/segmentio/kafka-go/protocol/produce"
	"github.com/segmentio/kafka-go/protocol/rawproduce"
)

// sendByLeader sends, per leader, one request with the records of each of
// its partitions that fit in one (BatchSize records, maxBytes bytes), and
// reports the partitions it wrote.
func (w *Writer) sendByLeader(ctx context.Context, client *kafkago.Client, byPart map[int][]int, msgs []Message, sizes []int64, maxBytes int64) map[int]bool {
	if w.RequiredAcks == kafkago.RequireNone {
		return nil // no answer says which partitions were written
	}
	groups := w.byLeader(byPart, sizes, maxBytes)
	if len(groups) == 0 {
		return nil
	}
	written := make(map[int]bool, len(byPart))
	now := time.Now()
	send := func(parts []int) []int {
		req := &rawproduce.Request{Acks: int16(w.RequiredAcks), Timeout: int32(client.Timeout / time.Millisecond),
			Topics: []rawproduce.RequestTopic{{Topic: w.Topic, Partitions: make([]rawproduce.RequestPartition, len(parts))}}}
		sets := make([][]byte, len(parts))
		for i, p := range parts {
			var err error
			if sets[i], err = encodeBatch(w.setBuffer(), msgs, byPart[p], sizes, w.Compression, now); err != nil {
				return nil // written partition by partition, which reports it
			}
			req.Topics[0].Partitions[i] = rawproduce.RequestPartition{Partition: int32(p), RecordSet: protocol.RawRecordSet{Reader: bytes.NewReader(sets[i])}}
		}
		done, answered := w.produceGroup(ctx, client, req)
		if answered {
			for _, set := range sets {
				w.recycle(set)
			}
		}
		return done
	}
	if len(groups) == 1 {
		for _, p := range send(groups[0]) {
			written[p] = true
		}
		return written
	}
	results := make(chan []int, len(groups))
	for _, parts := range groups {
		go func() { results <- send(parts) }()
	}
	for range groups {
		for _, p := range <-results {
			written[p] = true
		}
	}
	return written
}

// byLeader is the partitions of byPart whose records fit in one request,
// grouped by their leader (groups of two or more: a lone partition goes
// the usual way).
func (w *Writer) byLeader(byPart map[int][]int, sizes []int64, maxBytes int64) [][]int {
	maxRecords := w.maxRecords()
	w.mu.Lock()
	leaders := w.leaders
	w.mu.Unlock()
	by := map[int32][]int{}
	for p, idx := range byPart {
		if p >= len(leaders) || leaders[p] < 0 || len(idx) > maxRecords {
			continue
		}
		size := int64(0)
		for _, i := range idx {
			size += sizes[i]
		}
		if size <= maxBytes {
			by[leaders[p]] = append(by[leaders[p]], p)
		}
	}
	var groups [][]int
	for _, parts := range by {
		if len(parts) > 1 {
			groups = append(groups, parts)
		}
	}
	return groups
}

// produceGroup sends req once and returns the partitions it wrote (none
// when the request failed), and whether the broker answered.
func (w *Writer) produceGroup(ctx context.Context, client *kafkago.Client, req *rawproduce.Request) ([]int, bool) {
	ctx, cancel := context.WithTimeout(ctx, client.Timeout)
	defer cancel()
	rt := w.Transport
	if rt == nil {
		rt = kafkago.DefaultTransport
	}
	m, err := rt.RoundTrip(ctx, w.Addr, req)
	if err != nil {
		return nil, false
	}
	res, ok := m.(*produceAPI.Response)
	if !ok {
		return nil, true
	}
	var done []int
	for _, t := range res.Topics {
		if t.Topic != w.Topic {
			continue
		}
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 {
				done = append(done, int(p.Partition))
			}
		}
	}
	return done, true
}

// noteLeaders keeps the partitions' leaders (w.mu held). A change makes a
// new slice: one a call is grouping by is never written to.
func (w *Writer) noteLeaders(parts []metadataAPI.ResponsePartition) {
	same := len(w.leaders) == len(parts)
	for _, p := range parts {
		same = same && int(p.PartitionIndex) < len(w.leaders) && w.leaders[p.PartitionIndex] == p.LeaderID
	}
	if same {
		return
	}
	leaders := make([]int32, len(parts))
	for i := range leaders {
		leaders[i] = -1 // unknown: not grouped
	}
	for _, p := range parts {
		if int(p.PartitionIndex) < len(leaders) {
			leaders[p.PartitionIndex] = p.LeaderID
		}
	}
	w.leaders = leaders
}
