package kafka

// A writer's call sent at once: one produce request per partition leader
// (sendleader.go), or per partition (more only past BatchSize records or
// BatchBytes bytes; the partitions in parallel), each partition's records
// one record batch (encode.go) sent through kafka-go's client as a raw
// record set. kafka-go's Writer puts a synchronous call's records in
// per-partition batches that a timer (BatchTimeout) and a goroutine per
// batch send, and asks the transport for the topic's metadata once per
// record: every capper writer hands over a whole batch and waits for it,
// so that machinery only cost CPU (3 us a record more than this path in
// calls of 200: docs/benchmarks.md) and the timer's wait.

import (
	"bytes"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/capper-dev/capper/internal/retry"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	metadataAPI "github.com/segmentio/kafka-go/protocol/metadata"
)

// WriteMessages writes msgs to the writer's topic, each to the partition
// its Balancer picks, and returns once every record is acknowledged
// (RequiredAcks) or failed, as kafka-go's Writer does: nil; a
// MessageTooLargeError, before anything is sent, for a record larger than
// BatchBytes; or WriteErrors, one error per record (nil: written). A
// partition's records are written in their order; a request that fails
// for a temporary reason is sent again, up to MaxAttempts times in all.
// msgs is not changed (callers hand it their records without a copy).
func (w *Writer) WriteMessages(ctx context.Context, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	maxBytes := int64(w.BatchBytes)
	if maxBytes <= 0 {
		maxBytes = 1 << 20 // kafka-go's default
	}
	sizes := make([]int64, len(msgs)) // measured once: the check here, the requests' cuts
	for i := range msgs {
		if sizes[i] = recordSize(&msgs[i]); sizes[i] > maxBytes {
			return kafkago.MessageTooLargeError{Message: msgs[i], Remaining: slices.Delete(slices.Clone(msgs), i, i+1)}
		}
	}
	parts, err := w.partitions(ctx)
	if err != nil {
		return err
	}
	balancer := w.Balancer
	if balancer == nil {
		balancer = &kafkago.RoundRobin{}
	}
	byPart := map[int][]int{} // partition: the indexes of its records, in order
	for i := range msgs {
		p := balancer.Balance(msgs[i], parts...)
		byPart[p] = append(byPart[p], i)
	}
	errs := make(kafkago.WriteErrors, len(msgs))
	failed := false
	var mu sync.Mutex
	var wg sync.WaitGroup
	timeout := w.WriteTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	client := &kafkago.Client{Addr: w.Addr, Transport: w.Transport, Timeout: timeout}
	send := func(p int, idx []int) {
		at, ferr := w.sendPartition(ctx, client, p, msgs, sizes, idx, maxBytes)
		if ferr == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		failed = true
		for _, i := range idx[at:] {
			errs[i] = ferr
		}
	}
	// The partitions a request per leader wrote whole are done; the rest
	// (a partition's records over one request, a failed request or
	// partition) go partition by partition, from their first record.
	written := w.sendByLeader(ctx, client, byPart, msgs, sizes, maxBytes)
	for p, idx := range byPart {
		if written[p] {
			continue
		}
		if len(byPart) == 1 {
			send(p, idx)
			break
		}
		wg.Go(func() { send(p, idx) })
	}
	wg.Wait()
	if failed {
		return errs
	}
	return nil
}

// sendPartition writes the records msgs[idx] to partition p in requests
// of at most BatchSize records and maxBytes bytes, one after the other; on
// a failure it returns the error and how many of idx were written before.
func (w *Writer) sendPartition(ctx context.Context, client *kafkago.Client, p int, msgs []Message, sizes []int64, idx []int, maxBytes int64) (int, error) {
	maxRecords := w.maxRecords()
	for done := 0; done < len(idx); {
		n, size := 0, int64(0)
		for done+n < len(idx) && n < maxRecords {
			s := sizes[idx[done+n]]
			if n > 0 && size+s > maxBytes {
				break
			}
			n, size = n+1, size+s
		}
		set, err := encodeBatch(w.setBuffer(), msgs, idx[done:done+n], sizes, w.Compression, time.Now())
		if err != nil {
			return done, err
		}
		first, err := w.produce(ctx, client, p, set)
		if err != nil {
			return done, err
		}
		if first {
			w.recycle(set)
		}
		done += n
	}
	return len(idx), nil
}

// maxRecords is the most records one request carries (BatchSize).
func (w *Writer) maxRecords() int {
	if w.BatchSize <= 0 {
		return 100 // kafka-go's default
	}
	return w.BatchSize
}

// produce sends one request, again after a temporary failure (kafka-go's
// Writer's backoff, 100 ms doubling to 1 s), up to MaxAttempts times;
// first says the first try wrote it.
func (w *Writer) produce(ctx context.Context, client *kafkago.Client, p int, set []byte) (first bool, err error) {
	backoff := retry.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}
	for attempt := 1; ; attempt++ {
		err := w.produceOnce(ctx, client, p, set)
		if err == nil || Permanent(err) || attempt >= max(w.MaxAttempts, 1) || ctx.Err() != nil {
			return err == nil && attempt == 1, err
		}
		if werr := backoff.Wait(ctx); werr != nil {
			return false, err
		}
	}
}

func (w *Writer) produceOnce(ctx context.Context, client *kafkago.Client, p int, set []byte) error {
	ctx, cancel := context.WithTimeout(ctx, client.Timeout)
	defer cancel()
	res, err := client.RawProduce(ctx, &kafkago.RawProduceRequest{Topic: w.Topic, Partition: p, RequiredAcks: w.RequiredAcks,
		RawRecords: protocol.RawRecordSet{Reader: bytes.NewReader(set)}})
	if err != nil {
		return err
	}
	if res != nil && res.Error != nil {
		return res.Error
	}
	return nil
}

// partitions is the topic's partitions, 0 to n-1, from the transport's
// metadata (kept by the transport, refreshed on its own schedule).
func (w *Writer) partitions(ctx context.Context) ([]int, error) {
	rt := w.Transport
	if rt == nil {
		rt = kafkago.DefaultTransport
	}
	r, err := rt.RoundTrip(ctx, w.Addr, &metadataAPI.Request{TopicNames: []string{w.Topic}})
	if err != nil {
		return nil, err
	}
	for _, t := range r.(*metadataAPI.Response).Topics {
		if t.Name != w.Topic {
			continue
		}
		if t.ErrorCode != 0 {
			return nil, kafkago.Error(t.ErrorCode)
		}
		if len(t.Partitions) == 0 {
			return nil, kafkago.UnknownTopicOrPartition
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.parts) != len(t.Partitions) {
			w.parts = make([]int, len(t.Partitions))
			for i := range w.parts {
				w.parts[i] = i
			}
		}
		w.noteLeaders(t.Partitions)
		return w.parts, nil
	}
	return nil, kafkago.UnknownTopicOrPartition
}

// recordSize is a record's size as kafka-go's Writer measures it against
// BatchBytes.
func recordSize(m *Message) int64 {
	n := int64(4 + 1 + 1 + 4 + len(m.Key) + 4 + len(m.Value) + 8)
	n += varintLen(len(m.Headers))
	for _, h := range m.Headers {
		n += varintLen(len(h.Key)) + int64(len(h.Key)) + varintLen(len(h.Value)) + int64(len(h.Value))
	}
	return n
}

// varintLen is the length of n as a zig-zag varint.
func varintLen(n int) int64 {
	u, l := uint64(n)<<1^uint64(n>>63), int64(1)
	for ; u >= 0x80; u >>= 7 {
		l++
	}
	return l
}
