package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"syscall"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/capper-dev/capper/internal/testenv"
)

// heldRecords is n records shaped as held intents: a 300-byte value, a
// user's key and nine headers.
func heldRecords(n int) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		m := Message{Key: []byte("user-123456789"), Value: bytes.Repeat([]byte("v"), 300), Time: time.UnixMilli(1_764_460_800_000)}
		m.Value[0] = byte(i)
		for _, h := range []string{"capper-held-since", "capper-campaign", "capper-send-by", "capper-lane", "capper-released-at",
			"capper-source", "capper-priority", "capper-decided-at", "traceparent"} {
			m.Headers = append(m.Headers, Header{Key: h, Value: []byte("2026-11-30T01:00:00.000Z")})
		}
		msgs[i] = m
	}
	return msgs
}

// encodeAll is msgs as the writer encodes them, in batches of 100 (no
// record set size before each).
func encodeAll(b *testing.B, msgs []Message) []byte {
	var out []byte
	for from := 0; from < len(msgs); from += 100 {
		part := msgs[from:min(from+100, len(msgs))]
		idx, sizes := make([]int, len(part)), make([]int64, len(part))
		for i := range part {
			idx[i], sizes[i] = i, recordSize(&part[i])
		}
		set, err := encodeBatch(nil, part, idx, sizes, 0, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		batch := set[4:]
		binary.BigEndian.PutUint64(batch, uint64(from))
		out = append(out, batch...)
	}
	return out
}

// compactRecords is heldRecords with one 80-byte header in place of the
// nine (a compact lane record's capper-held).
func compactRecords(n int) []Message {
	msgs := heldRecords(n)
	for i := range msgs {
		msgs[i].Headers = []Header{{Key: "capper-held", Value: bytes.Repeat([]byte{1}, 80)}}
	}
	return msgs
}

// BenchmarkDecode: a 256 KiB lane fetch's records decoded, per record, in
// each form of a lane record, with compact's ratio in the same run.
func BenchmarkDecode(b *testing.B) {
	const n = 700 // 256 KiB of held records
	var ns [2]float64
	for i, records := range []func(int) []Message{heldRecords, compactRecords} {
		b.Run([]string{"headers", "compact"}[i], func(b *testing.B) {
			fetch := encodeAll(b, records(n))
			var d recordDecoder
			b.SetBytes(int64(len(fetch)))
			b.ReportAllocs()
			for b.Loop() {
				msgs, _, err := d.decode(fetch, 0, "lane", 0, n, nil)
				if err != nil || len(msgs) != n {
					b.Fatalf("%d records, %v", len(msgs), err)
				}
			}
			ns[i] = float64(b.Elapsed().Nanoseconds()) / float64(b.N*n)
			b.ReportMetric(ns[i], "ns/record")
			b.ReportMetric(float64(len(fetch))/n, "B/record")
		})
	}
	if ns[0] > 0 && ns[1] > 0 {
		b.Logf("compact %.0f ns against headers %.0f ns per record: %.2fx", ns[1], ns[0], ns[1]/ns[0])
	}
}

// BenchmarkReadPartition: 20,000 records shaped as held intents read from
// the broker with kafka-go's batch reader (what the partition readers
// used) and with the partition reader, in CPU per record of this process
// (kfake's included: the same in both).
func BenchmarkReadPartition(b *testing.B) {
	k := testenv.StartKafka(b, 1, []string{"t"})
	ctx := context.Background()
	const n = 20000
	k.Produce(b, "t", heldRecords(n))
	b.Run("kafka-go", func(b *testing.B) {
		c0 := processCPU()
		for b.Loop() {
			conn, err := kafkago.DialLeader(ctx, "tcp", k.Addrs[0], "t", 0)
			if err != nil {
				b.Fatal(err)
			}
			got := 0
			for next := int64(0); got < n; {
				_, _ = conn.Seek(next, kafkago.SeekAbsolute)
				batch := conn.ReadBatch(1, 256<<10)
				for {
					m, err := batch.ReadMessage()
					if err != nil {
						break
					}
					got, next = got+1, m.Offset+1
				}
				_ = batch.Close()
			}
			_ = conn.Close()
		}
		b.ReportMetric(float64((processCPU()-c0).Nanoseconds())/float64(b.N*n), "cpu-ns/record")
	})
	b.Run("own", func(b *testing.B) {
		c0 := processCPU()
		for b.Loop() {
			rctx, stop := context.WithCancel(ctx)
			PartitionReader{Dialer: ToolOptions(k.Addrs).Dialer(), Brokers: k.Addrs, Topic: "t", MaxBytes: 256 << 10,
				MaxWait: 100 * time.Millisecond,
				Hand: func(_ context.Context, msgs []Message, _ int64) error {
					if msgs[len(msgs)-1].Offset == n-1 {
						stop()
					}
					return nil
				}}.Read(rctx, 0)
			stop()
		}
		b.ReportMetric(float64((processCPU()-c0).Nanoseconds())/float64(b.N*n), "cpu-ns/record")
	})
}

// processCPU is the CPU time this process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEncodeBatch: 200 records shaped as held intents encoded as one
// produce request's record set, by kafka-go's encoder (what the writer
// used) and by the writer's own.
func BenchmarkEncodeBatch(b *testing.B) {
	const n = 200
	msgs := heldRecords(n)
	idx, sizes := make([]int, n), make([]int64, n)
	for i := range msgs {
		idx[i], sizes[i] = i, recordSize(&msgs[i])
	}
	b.Run("kafka-go", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			recs := make([]kafkago.Record, n)
			for i := range msgs {
				recs[i] = kafkago.Record{Time: msgs[i].Time, Key: kafkago.NewBytes(msgs[i].Key), Value: kafkago.NewBytes(msgs[i].Value), Headers: msgs[i].Headers}
			}
			rs := protocol.RecordSet{Version: 2, Records: kafkago.NewRecordReader(recs...)}
			if _, err := rs.WriteTo(io.Discard); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
	})
	b.Run("own", func(b *testing.B) {
		b.ReportAllocs()
		var set []byte
		for b.Loop() {
			var err error
			if set, err = encodeBatch(set, msgs, idx, sizes, 0, time.Now()); err != nil { // the array reused, as a writer does
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
	})
}
