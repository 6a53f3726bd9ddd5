package kafka

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestPartitionReaderReadsAsKafkaGo: the partition reader's own fetches
// read what kafka-go's batch reader reads (offsets, keys and values, null
// and empty, headers, times), from batches of every compression codec and
// of transactions, but read committed: not the records of an aborted
// transaction (those of another transaction and of none between its
// batches are read); from the first offset or one inside a batch, whole
// or with a max bytes that cuts batches; and its position ends past the
// last transaction's marker, which is no record.
func TestPartitionReaderReadsAsKafkaGo(t *testing.T) {
	k := testenv.StartKafka(t, 1, []string{"t"})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	written := produceVaried(ctx, t, k.Addrs)
	// kafka-go reads uncommitted, and hands on the four transactions'
	// markers as records; they are none, and are skipped now, and so are
	// the records of the aborted transaction.
	all := readReference(ctx, t, k.Addrs[0], "t", len(written)+4)
	var want []Message
	kept := 0
	for _, m := range all {
		if written[m.Offset] {
			want = append(want, m)
		}
	}
	for _, ok := range written {
		if ok {
			kept++
		}
	}
	if len(want) != kept || kept == len(written) {
		t.Fatalf("kafka-go read %d of the %d committed records written (%d in all)", len(want), kept, len(written))
	}
	end := all[len(all)-1].Offset + 1
	for _, c := range []struct {
		from     int64
		maxBytes int
	}{{0, 1 << 20}, {0, 300}, {want[3].Offset, 1 << 20}, {want[len(want)/2].Offset, 500}} {
		t.Run(fmt.Sprintf("from %d max bytes %d", c.from, c.maxBytes), func(t *testing.T) {
			rest := want
			for len(rest) > 0 && rest[0].Offset < c.from {
				rest = rest[1:]
			}
			got, pos := readOwn(ctx, t, k.Addrs, c.from, c.maxBytes, len(rest), end)
			for i := range min(len(got), len(rest)) {
				if d := differ(got[i], rest[i]); d != "" {
					t.Errorf("record %d (offset %d): %s", i, rest[i].Offset, d)
				}
			}
			if len(got) != len(rest) {
				t.Errorf("read %d records, kafka-go %d", len(got), len(rest))
			}
			if pos != end {
				t.Errorf("position %d after the last record, want %d (past the transaction's marker)", pos, end)
			}
		})
	}
}

// produceVaried writes batches of each codec, null and empty fields and
// headers, and transactions: one aborted, with a batch of another
// transaction (committed) and one of no transaction between two of its
// batches, then one of the same producer committed, then another. It
// returns the offsets of every record
// written: true for those read committed (not the aborted transaction's).
func produceVaried(ctx context.Context, t *testing.T, addrs []string) map[int64]bool {
	t.Helper()
	n, written := 0, map[int64]bool{}
	client := func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic("t")}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	begin := func(cl *kgo.Client) {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
	}
	end := func(cl *kgo.Client, commit bool) {
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	produce := func(cl *kgo.Client, committed bool) {
		var recs []*kgo.Record
		for i := range 7 {
			r := &kgo.Record{Value: []byte(fmt.Sprintf("value %d of batch %d %s", i, n, strings.Repeat("x", i*20)))}
			switch i {
			case 0: // null key and value, no header
				r.Value = nil
			case 1:
				r.Key, r.Value = []byte{}, []byte{}
			case 2:
				r.Headers = []kgo.RecordHeader{{Key: "empty"}, {Key: "capper-lane", Value: []byte("b/l")}}
			default:
				r.Key = []byte(fmt.Sprintf("user-%d", i))
				r.Headers = []kgo.RecordHeader{{Key: "capper-held-since", Value: []byte("2026-01-01T00:00:00.000Z")}, {Key: fmt.Sprintf("h%d", i), Value: r.Key}}
			}
			recs = append(recs, r)
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		n += len(recs)
		for _, r := range recs {
			written[r.Offset] = committed
		}
	}
	for _, codec := range []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(),
		kgo.Lz4Compression(), kgo.ZstdCompression()} {
		produce(client(kgo.ProducerBatchCompression(codec)), true)
	}
	aborted, other, plain := client(kgo.TransactionalID("aborted")), client(kgo.TransactionalID("other")), client()
	begin(aborted)
	begin(other)
	produce(aborted, false)
	produce(other, true)
	produce(plain, true)
	produce(aborted, false)
	end(aborted, false)
	end(other, true)
	begin(aborted) // the same producer again, after its abort: read
	produce(aborted, true)
	end(aborted, true)
	committed := client(kgo.TransactionalID("committed"), kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	begin(committed)
	produce(committed, true)
	end(committed, true)
	return written
}

// readReference reads n records with kafka-go's batch reader.
func readReference(ctx context.Context, t *testing.T, addr, topic string, n int) []Message {
	t.Helper()
	conn, err := kafkago.DialLeader(ctx, "tcp", addr, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var out []Message
	for next := int64(0); len(out) < n && ctx.Err() == nil; {
		if _, err := conn.Seek(next, kafkago.SeekAbsolute); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		b := conn.ReadBatch(1, 1<<20)
		for {
			m, err := b.ReadMessage()
			if err != nil {
				break
			}
			out = append(out, m)
		}
		next = max(next, b.Offset())
		_ = b.Close()
	}
	if len(out) != n {
		t.Fatalf("kafka-go read %d records, want %d", len(out), n)
	}
	return out
}

// readOwn reads n records with a PartitionReader, and waits for its
// position to reach end (or for ctx).
func readOwn(ctx context.Context, t *testing.T, addrs []string, from int64, maxBytes, n int, end int64) ([]Message, int64) {
	t.Helper()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		mu  sync.Mutex
		got []Message
		pos atomic.Int64
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		PartitionReader{Dialer: ToolOptions(addrs).Dialer(), Brokers: addrs, Topic: "t", MaxBytes: maxBytes,
			MaxWait: 100 * time.Millisecond, Position: &pos,
			Failed: func(err error) { t.Errorf("reader failed: %v", err) },
			Hand: func(_ context.Context, msgs []Message, _ int64) error {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, msgs...)
				return nil
			}}.Read(rctx, from)
	}()
	for ctx.Err() == nil && pos.Load() < end {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	return got, pos.Load()
}

// differ says how a record read differs from kafka-go's.
func differ(got, want Message) string {
	switch {
	case got.Offset != want.Offset:
		return fmt.Sprintf("offset %d", got.Offset)
	case got.Topic != want.Topic || got.Partition != want.Partition:
		return fmt.Sprintf("topic %s/%d, want %s/%d", got.Topic, got.Partition, want.Topic, want.Partition)
	case !same(got.Key, want.Key):
		return fmt.Sprintf("key %q (nil %t), want %q (nil %t)", got.Key, got.Key == nil, want.Key, want.Key == nil)
	case !same(got.Value, want.Value):
		return fmt.Sprintf("value %q, want %q", got.Value, want.Value)
	case !got.Time.Equal(want.Time) || got.Time.Location() != want.Time.Location():
		return fmt.Sprintf("time %v, want %v", got.Time, want.Time)
	case got.HighWaterMark != want.HighWaterMark:
		return fmt.Sprintf("high watermark %d, want %d", got.HighWaterMark, want.HighWaterMark)
	case len(got.Headers) != len(want.Headers):
		return fmt.Sprintf("headers %v, want %v", got.Headers, want.Headers)
	}
	for i, h := range got.Headers {
		if h.Key != want.Headers[i].Key || !same(h.Value, want.Headers[i].Value) {
			return fmt.Sprintf("header %d %s=%q, want %s=%q", i, h.Key, h.Value, want.Headers[i].Key, want.Headers[i].Value)
		}
	}
	if cap(got.Value) != len(got.Value) || cap(got.Key) != len(got.Key) {
		return "key or value with room past its end: an append would write into the next record"
	}
	return ""
}

// TestDecodeRefuses: a batch whose CRC does not match, one of an old
// message format and a fetch with no whole batch are errors that name
// them; a batch before the offset asked is skipped and read past.
func TestDecodeRefuses(t *testing.T) {
	batch := testBatch(10, "a", "b", "c")
	var d recordDecoder
	msgs, next, err := d.decode(batch, 11, "t", 0, 13, nil)
	if err != nil || len(msgs) != 2 || string(msgs[0].Value) != "b" || msgs[1].Offset != 12 || next != 13 {
		t.Fatalf("from 11: %d records, next %d, %v; want b and c, next 13", len(msgs), next, err)
	}
	if msgs, next, err = d.decode(append(batch, batch[:30]...), 13, "t", 0, 13, nil); err != nil || len(msgs) != 0 || next != 13 {
		t.Errorf("a batch all before the offset and a cut one: %d records, next %d, %v; want none, next 13", len(msgs), next, err)
	}
	for _, c := range []struct {
		name string
		edit func(b []byte) []byte
		want string
	}{
		{"a changed byte", func(b []byte) []byte { b[len(b)-2] ^= 1; return b }, "CRC mismatch"},
		{"format v1", func(b []byte) []byte { b[16] = 1; return b }, "message format v1"},
		{"only a cut batch", func(b []byte) []byte { return b[:40] }, "no whole record batch"},
	} {
		_, _, err := d.decode(c.edit(bytes.Clone(batch)), 10, "t", 0, 13, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

// testBatch is a v2 batch of values from base.
func testBatch(base int64, values ...string) []byte {
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		body := r.AppendTo(nil)
		r.Length = int32(len(body) - 1) // the length varint of 0 is one byte
		recs = r.AppendTo(recs)
	}
	b := kmsg.RecordBatch{FirstOffset: base, Magic: 2, LastOffsetDelta: int32(len(values) - 1), FirstTimestamp: 1,
		MaxTimestamp: 1, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(len(values)), Records: recs}
	b.Length = int32(len(b.AppendTo(nil)) - 12)
	out := b.AppendTo(nil)
	crc := crc32.Checksum(out[21:], castagnoli())
	out[17], out[18], out[19], out[20] = byte(crc>>24), byte(crc>>16), byte(crc>>8), byte(crc)
	return out
}

// TestIdleWait: a fetch after one that found the partition empty waits
// idleWait, one after records MaxWait; a record written during an idle
// wait is still read (the broker ends the wait).
func TestIdleWait(t *testing.T) {
	k := testenv.StartKafka(t, 1, []string{"t"})
	var mu sync.Mutex
	var waits []int32 // each fetch's max wait, in ms
	k.Cluster.ControlKey(int16(kmsg.Fetch), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster.KeepControl()
		mu.Lock()
		waits = append(waits, kreq.(*kmsg.FetchRequest).MaxWaitMillis)
		mu.Unlock()
		return nil, nil, false
	})
	seen := func() []int32 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(waits)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan Message, 1)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		PartitionReader{Dialer: ToolOptions(k.Addrs).Dialer(), Brokers: k.Addrs, Topic: "t", MaxBytes: 1 << 20,
			MaxWait: 20 * time.Millisecond,
			Hand: func(_ context.Context, msgs []Message, _ int64) error {
				got <- msgs[0]
				return nil
			}}.Read(rctx, 0)
	}()
	for ctx.Err() == nil && len(seen()) < 3 { // the first fetch and two after it found nothing
		time.Sleep(10 * time.Millisecond)
	}
	k.Produce(t, "t", []Message{{Key: []byte("k"), Value: []byte("v")}})
	select {
	case m := <-got:
		if string(m.Value) != "v" {
			t.Errorf("read %q", m.Value)
		}
	case <-ctx.Done():
		t.Fatal("the record written during an idle wait was not read")
	}
	for ctx.Err() == nil && len(seen()) < 5 { // the fetch after the record's
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	w := seen()
	if len(w) < 5 || w[0] != 20 || w[1] != int32(idleWait.Milliseconds()) || w[2] != int32(idleWait.Milliseconds()) {
		t.Fatalf("fetches waited %v ms: want 20, then %d while empty", w, idleWait.Milliseconds())
	}
	if !slices.Contains(w[3:], 20) {
		t.Errorf("fetches waited %v ms: the one after the record's should wait 20 again", w)
	}
}
