package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestWriteMessages: a call's records land where kafka-go's own Writer
// puts them (the same balancer), each partition's in the call's order,
// across requests cut by BatchSize, with their headers.
func TestWriteMessages(t *testing.T) {
	k := testenv.StartKafka(t, 4, []string{"t", "ref"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o := ToolOptions(k.Addrs)
	o.BatchSize = 7 // several requests per partition
	w, err := NewWriter(o, "t")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var msgs []Message
	for i := range 100 {
		msgs = append(msgs, Message{Key: []byte(strconv.Itoa(i % 13)), Value: []byte(strconv.Itoa(i)),
			Headers: []Header{{Key: "h", Value: []byte("v" + strconv.Itoa(i))}}})
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	// kafka-go's Writer with the same balancer, as the reference.
	ref := &kafkago.Writer{Addr: kafkago.TCP(k.Addrs...), Topic: "ref", Balancer: &kafkago.Murmur2Balancer{},
		RequiredAcks: kafkago.RequireAll, BatchTimeout: time.Millisecond}
	defer ref.Close()
	if err := ref.WriteMessages(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTopic(ctx, k.Addrs, "t")
	if err != nil {
		t.Fatal(err)
	}
	want, err := ReadTopic(ctx, k.Addrs, "ref")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(msgs) || len(want) != len(msgs) {
		t.Fatalf("read %d records, the reference %d, want %d", len(got), len(want), len(msgs))
	}
	place := map[string]int{} // value: partition, by the reference
	for _, m := range want {
		place[string(m.Value)] = m.Partition
	}
	last := map[int]int{} // partition: the last value read
	for _, m := range got {
		v, _ := strconv.Atoi(string(m.Value))
		if p := place[string(m.Value)]; p != m.Partition {
			t.Errorf("record %d in partition %d, kafka-go's Writer put it in %d", v, m.Partition, p)
		}
		if prev, ok := last[m.Partition]; ok && v < prev {
			t.Errorf("partition %d: record %d after %d: out of order", m.Partition, v, prev)
		}
		last[m.Partition] = v
		if len(m.Headers) != 1 || string(m.Headers[0].Value) != "v"+string(m.Value) {
			t.Errorf("record %d: headers %v", v, m.Headers)
		}
	}
	if len(last) < 2 {
		t.Errorf("every record in %d partition(s): the test wants several", len(last))
	}
}

// TestWriteMessagesErrors: a record larger than BatchBytes fails the call
// before anything is sent (kafka-go's MessageTooLargeError); a partition
// that refuses for good fails its own records only (WriteErrors), and one
// that refuses once is written on the next attempt.
func TestWriteMessagesErrors(t *testing.T) {
	k := testenv.StartKafka(t, 2, []string{"t"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := NewTierWriter(ToolOptions(k.Addrs), "t") // Partition is the record's partition
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.BatchBytes = 100
	big := Message{Value: make([]byte, 200), Partition: 0}
	err = w.WriteMessages(ctx, Message{Value: []byte("a"), Partition: 0}, big)
	var tooLarge kafkago.MessageTooLargeError
	if !errors.As(err, &tooLarge) || len(tooLarge.Message.Value) != 200 || len(tooLarge.Remaining) != 1 {
		t.Fatalf("a record above BatchBytes: %v, want a MessageTooLargeError naming it", err)
	}
	w.BatchBytes = 0

	var refuse atomic.Int32 // produce answers to refuse for partition 1 (-1: every one)
	var code atomic.Int32
	var grouped1 atomic.Int32 // requests per leader refused
	k.Cluster.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		grouped := len(req.Topics[0].Partitions) > 1
		if refuse.Load() == 0 || !grouped && req.Topics[0].Partitions[0].Partition != 1 {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = req.Topics[0].Topic
		for _, p := range req.Topics[0].Partitions {
			// The request per leader (both partitions): partition 1
			// refused, and partition 0 not written either (a leader that
			// moved): each goes on partition by partition.
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, int16(kafkago.NotLeaderForPartition)
			if !grouped {
				rp.ErrorCode = int16(code.Load())
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		if !grouped {
			refuse.Add(-1)
		}
		resp.Topics = append(resp.Topics, rt)
		grouped1.Add(int32(len(rt.Partitions)) - 1)
		return resp, nil, true
	})
	batch := func(tag string) []Message {
		var ms []Message
		for i := range 6 {
			ms = append(ms, Message{Value: fmt.Appendf(nil, "%s%d", tag, i), Partition: i % 2})
		}
		return ms
	}
	// Refused for good (INVALID_RECORD): partition 1's three fail, 0's are written.
	refuse.Store(1 << 20)
	code.Store(int32(kafkago.InvalidRecord))
	err = w.WriteMessages(ctx, batch("x")...)
	var werrs kafkago.WriteErrors
	if !errors.As(err, &werrs) || len(werrs) != 6 {
		t.Fatalf("a partition refusing for good: %v, want WriteErrors of 6", err)
	}
	for i, e := range werrs {
		if (i%2 == 1) != (e != nil) || e != nil && !Permanent(e) {
			t.Errorf("record %d (partition %d): %v", i, i%2, e)
		}
	}
	// Refused once (NOT_LEADER_FOR_PARTITION, temporary): sent again, written.
	refuse.Store(1)
	code.Store(int32(kafkago.NotLeaderForPartition))
	if err := w.WriteMessages(ctx, batch("y")...); err != nil {
		t.Fatalf("a partition refusing once: %v, want it written on the next attempt", err)
	}
	refuse.Store(0)
	got, err := ReadTopic(ctx, k.Addrs, "t")
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, m := range got {
		n[string(m.Value[:1])+strconv.Itoa(m.Partition)]++
	}
	if want := map[string]int{"x0": 3, "y0": 3, "y1": 3}; fmt.Sprint(n) != fmt.Sprint(want) {
		t.Errorf("written per batch and partition %v, want %v", n, want)
	}
	if grouped1.Load() != 2 {
		t.Errorf("%d requests per leader refused, want each call's first (2)", grouped1.Load())
	}
}

// TestWriteMessagesOneRequestPerLeader: a call whose partitions each fit in
// one request is one produce request per leader (three brokers, four
// partitions: at most three requests), every record written once, in
// order in its partition.
func TestWriteMessagesOneRequestPerLeader(t *testing.T) {
	k := testenv.StartKafka(t, 4, []string{"t"}, kfake.NumBrokers(3))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := NewTierWriter(ToolOptions(k.Addrs), "t")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var requests, partitions atomic.Int32
	k.Cluster.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster.KeepControl()
		requests.Add(1)
		for _, t := range kreq.(*kmsg.ProduceRequest).Topics {
			partitions.Add(int32(len(t.Partitions)))
		}
		return nil, nil, false
	})
	var msgs []Message
	for i := range 40 {
		msgs = append(msgs, Message{Value: []byte(strconv.Itoa(i)), Partition: i % 4})
	}
	for range 2 { // the first call may learn the leaders
		requests.Store(0)
		partitions.Store(0)
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	if partitions.Load() != 4 || requests.Load() > 3 {
		t.Errorf("a call over 4 partitions and 3 brokers: %d requests for %d partitions, want at most 3 for 4", requests.Load(), partitions.Load())
	}
	got, err := ReadTopic(ctx, k.Addrs, "t")
	if err != nil {
		t.Fatal(err)
	}
	seen, last := map[string]int{}, map[int]int{}
	for _, m := range got {
		v, _ := strconv.Atoi(string(m.Value))
		seen[string(m.Value)]++
		if v%4 != m.Partition {
			t.Errorf("record %d in partition %d", v, m.Partition)
		}
		if prev, ok := last[m.Partition]; ok && v <= prev && seen[string(m.Value)] == 1 {
			t.Errorf("partition %d: record %d after %d", m.Partition, v, prev)
		}
		last[m.Partition] = v
	}
	for _, m := range msgs {
		if seen[string(m.Value)] != 2 {
			t.Errorf("record %s written %d times over two calls, want 2", m.Value, seen[string(m.Value)])
		}
	}
}
