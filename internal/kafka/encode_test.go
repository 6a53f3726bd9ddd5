package kafka

import (
	"bytes"
	"context"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestWriterEncodesAsKafkaGo: the writer's own record batches, of every
// codec, read back as kafka-go's Writer's do: null and empty keys, values
// and header values kept apart, times kept (a record without one stamped
// at the write).
func TestWriterEncodesAsKafkaGo(t *testing.T) {
	codecs := []string{"none", "gzip", "snappy", "lz4", "zstd"}
	var topics []string
	for _, c := range codecs {
		topics = append(topics, "own-"+c, "ref-"+c)
	}
	k := testenv.StartKafka(t, 1, topics)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	at := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	msgs := []Message{
		{Value: []byte("no key, no time")},
		{Key: []byte{}, Value: []byte{}, Time: at},
		{Key: []byte("k"), Time: at.Add(-time.Minute), Headers: []Header{{Key: "null"}, {Key: "empty", Value: []byte{}}, {Key: "h", Value: []byte("v")}}},
		{Key: []byte("k2"), Value: bytes.Repeat([]byte("long value "), 40), Time: at.Add(time.Second)},
	}
	for _, c := range codecs {
		o := ToolOptions(k.Addrs)
		o.Compression = c
		w, err := NewWriter(o, "own-"+c)
		if err != nil {
			t.Fatal(err)
		}
		before := time.Now().Truncate(time.Millisecond)
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		_ = w.Close()
		ref := &kafkago.Writer{Addr: kafkago.TCP(k.Addrs...), Topic: "ref-" + c, RequiredAcks: kafkago.RequireAll,
			BatchTimeout: time.Millisecond, Compression: w.Compression}
		if err := ref.WriteMessages(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
		_ = ref.Close()
		got, want := readKgo(ctx, t, k.Addrs, "own-"+c, len(msgs)), readKgo(ctx, t, k.Addrs, "ref-"+c, len(msgs))
		if got[0].Timestamp.Before(before) || got[0].Timestamp.After(time.Now()) {
			t.Errorf("%s: a record without a time stamped %v, not at the write", c, got[0].Timestamp)
		}
		for i := 1; i < len(msgs); i++ {
			if !got[i].Timestamp.Equal(want[i].Timestamp) {
				t.Errorf("%s: record %d at %v, kafka-go's at %v", c, i, got[i].Timestamp, want[i].Timestamp)
			}
		}
		for i := range msgs {
			g, w := got[i], want[i]
			if !same(g.Key, w.Key) || !same(g.Value, w.Value) || len(g.Headers) != len(w.Headers) {
				t.Errorf("%s: record %d key %q value %q headers %v, kafka-go's %q %q %v", c, i, g.Key, g.Value, g.Headers, w.Key, w.Value, w.Headers)
				continue
			}
			for j, h := range g.Headers {
				if h.Key != w.Headers[j].Key || !same(h.Value, w.Headers[j].Value) {
					t.Errorf("%s: record %d header %s=%q (nil %t), kafka-go's %s=%q (nil %t)", c, i, h.Key, h.Value, h.Value == nil,
						w.Headers[j].Key, w.Headers[j].Value, w.Headers[j].Value == nil)
				}
			}
		}
	}
}

// same: equal bytes, both null or neither.
func same(a, b []byte) bool { return bytes.Equal(a, b) && (a == nil) == (b == nil) }

// readKgo reads n records of topic's partition 0 with franz-go's client,
// which keeps a null field apart from an empty one.
func readKgo(ctx context.Context, t *testing.T, addrs []string, topic string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(out) < n && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		if errs := fs.Errors(); len(errs) > 0 {
			t.Fatalf("read %s: %v", topic, errs)
		}
		out = append(out, fs.Records()...)
	}
	if len(out) != n {
		t.Fatalf("read %d records of %s, want %d", len(out), topic, n)
	}
	return out
}
