package kafka

// A partition reader's fetches. kafka-go opens the connection (the
// partition's leader, TLS, SASL, the offsets to start from); the Fetch
// requests on it are encoded here and their answers read into one buffer
// each, the records sliced out of it (records.go). kafka-go's batch reader
// made each record's key and value and each header's key and value an
// allocation of its own (twenty for a lane record with nine headers), at
// twice the CPU per record (BenchmarkReadPartition; docs/benchmarks.md,
// "Records in one buffer").

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// Fetch version 4 (Kafka 0.11, the first with record headers, which every
// capper record carries; Kafka 4 still serves it): one topic, one
// partition, read committed (kafka-go's reader read uncommitted: an
// aborted transaction's records were handed on).
const (
	apiFetch      = 1
	fetchVersion  = 4
	readCommitted = 1
)

// maxResponse bounds a fetch's answer beyond twice its max bytes: one
// record batch larger than max bytes is answered whole (a batch is up to
// the topic's max.message.bytes).
const maxResponse = 64 << 20

// errMalformed: a fetch's answer that does not parse; the connection is
// replaced.
var errMalformed = errors.New("malformed fetch response")

// fetcher sends one partition's fetches on its leader's connection.
type fetcher struct {
	kc        *kafkago.Conn // kafka-go's connection, over conn: closed with it
	conn      net.Conn      // the leader's connection after TLS and SASL
	clientID  string
	topic     string
	partition int32
	corr      int32
	req       []byte
	head      [8]byte
	dec       recordDecoder
}

// dialLeader connects to partition p's leader as d does, and keeps the
// connection kafka-go dials.
func dialLeader(ctx context.Context, d *kafkago.Dialer, broker string, p kafkago.Partition) (*fetcher, error) {
	var raw net.Conn
	kc, err := capturing(d, &raw).DialPartition(ctx, "tcp", broker, p)
	if err != nil {
		return nil, err
	}
	if raw == nil { // a kafka-go that dials otherwise: not a connection to send on
		_ = kc.Close()
		return nil, fmt.Errorf("connect to the leader of %s/%d: no connection dialed", p.Topic, p.ID)
	}
	return &fetcher{kc: kc, conn: raw, clientID: d.ClientID, topic: p.Topic, partition: int32(p.ID)}, nil
}

// capturing is d, keeping in *raw the connection it dials, TLS done (so
// that it is the connection requests go over; SASL is kafka-go's, done
// before the dial returns).
func capturing(d *kafkago.Dialer, raw *net.Conn) *kafkago.Dialer {
	dial, config := d.DialFunc, d.TLS
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	own := *d
	own.TLS = nil
	own.DialFunc = func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := dial(ctx, network, address)
		if err == nil && config != nil {
			c, err = clientTLS(ctx, c, config, address)
		}
		*raw = c
		return c, err
	}
	return &own
}

// clientTLS is kafka-go's TLS connection: the server's name from the
// address when the configuration has none.
func clientTLS(ctx context.Context, c net.Conn, config *tls.Config, address string) (net.Conn, error) {
	if config.ServerName == "" {
		config = config.Clone()
		config.ServerName = address
		if i := strings.LastIndex(address, ":"); i >= 0 {
			config.ServerName = address[:i]
		}
	}
	tc := tls.Client(c, config)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return tc, nil
}

func (f *fetcher) Close() error { return f.kc.Close() }

// fetched is one fetch's answer.
type fetched struct {
	msgs []Message // from the offset asked, in order
	hwm  int64
	// next is the offset to fetch from next: past the last whole batch
	// (its control records and the offsets compaction removed).
	next int64
}

// fetch asks for the partition's records from offset and reads the
// answer. A broker's error code is returned as kafka-go's Error.
func (f *fetcher) fetch(offset int64, maxBytes int, maxWait time.Duration) (fetched, error) {
	f.corr++
	f.req = f.request(f.req[:0], offset, int32(maxBytes), maxWait)
	if _, err := f.conn.Write(f.req); err != nil {
		return fetched{}, fmt.Errorf("send fetch: %w", err)
	}
	if _, err := io.ReadFull(f.conn, f.head[:]); err != nil {
		return fetched{}, fmt.Errorf("read fetch response: %w", err)
	}
	size := int32(binary.BigEndian.Uint32(f.head[:4]))
	if corr := int32(binary.BigEndian.Uint32(f.head[4:])); corr != f.corr {
		return fetched{}, fmt.Errorf("%w: correlation id %d, want %d", errMalformed, corr, f.corr)
	}
	if size < 4 || int64(size) > 2*int64(maxBytes)+maxResponse {
		return fetched{}, fmt.Errorf("%w: size %d", errMalformed, size)
	}
	buf := make([]byte, size-4) // the records' bytes: one allocation, sliced, never reused
	if _, err := io.ReadFull(f.conn, buf); err != nil {
		return fetched{}, fmt.Errorf("read fetch response: %w", err)
	}
	return f.answer(buf, offset)
}

// request appends a Fetch v4 request for offset to b.
func (f *fetcher) request(b []byte, offset int64, maxBytes int32, maxWait time.Duration) []byte {
	be := binary.BigEndian
	b = append(b, 0, 0, 0, 0) // its size, set last
	b = be.AppendUint16(b, apiFetch)
	b = be.AppendUint16(b, fetchVersion)
	b = be.AppendUint32(b, uint32(f.corr))
	b = appendString(b, f.clientID)
	b = be.AppendUint32(b, 0xffffffff) // replica id -1: a consumer
	b = be.AppendUint32(b, uint32(maxWait.Milliseconds()))
	b = be.AppendUint32(b, 1) // min bytes: answer with any record
	// The answer's own bound: none past the one partition's (below). Not
	// the same bound twice: kfake leaves a partition's aborted
	// transactions out of an answer its own bound cut.
	b = be.AppendUint32(b, math.MaxInt32)
	b = append(b, readCommitted) // isolation level: the broker answers up to the last stable offset
	b = be.AppendUint32(b, 1)
	b = appendString(b, f.topic)
	b = be.AppendUint32(b, 1)
	b = be.AppendUint32(b, uint32(f.partition))
	b = be.AppendUint64(b, uint64(offset))
	b = be.AppendUint32(b, uint32(maxBytes))
	be.PutUint32(b, uint32(len(b)-4))
	return b
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// answer reads a Fetch v4 response's body (after the correlation id): the
// one topic and partition asked for.
func (f *fetcher) answer(buf []byte, offset int64) (fetched, error) {
	r := wire{b: buf}
	r.int32() // throttle time
	var out fetched
	found := false
	for topics, i := r.count(), 0; i < topics && r.err == nil; i++ {
		topic := r.bytes(int(r.int16()))
		for parts, j := r.count(), 0; j < parts && r.err == nil; j++ {
			partition, code := r.int32(), r.int16()
			hwm := r.int64()
			r.int64() // last stable offset: the records are up to it
			aborted := r.aborted()
			records := r.bytes(int(r.int32()))
			if r.err != nil || string(topic) != f.topic || partition != f.partition {
				continue
			}
			found, out.hwm = true, hwm
			if code != 0 {
				return out, kafkago.Error(code)
			}
			var err error
			if out.msgs, out.next, err = f.dec.decode(records, offset, f.topic, int(partition), hwm, aborted); err != nil {
				return out, fmt.Errorf("fetch %s/%d at offset %d: %w", f.topic, partition, offset, err)
			}
		}
	}
	if r.err != nil {
		return fetched{}, fmt.Errorf("%w: %v", errMalformed, r.err)
	}
	if !found {
		return fetched{}, fmt.Errorf("%w: no answer for %s/%d", errMalformed, f.topic, f.partition)
	}
	return out, nil
}

// wire reads big-endian fields; past the end it returns zeros and
// remembers the error.
type wire struct {
	b   []byte
	err error
}

func (w *wire) bytes(n int) []byte {
	if n < 0 || n > len(w.b) {
		if n >= 0 && w.err == nil {
			w.err = io.ErrUnexpectedEOF
		}
		return nil
	}
	v := w.b[:n:n]
	w.b = w.b[n:]
	return v
}

func (w *wire) int16() int16 {
	if b := w.bytes(2); b != nil {
		return int16(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (w *wire) int32() int32 {
	if b := w.bytes(4); b != nil {
		return int32(binary.BigEndian.Uint32(b))
	}
	return 0
}

func (w *wire) int64() int64 {
	if b := w.bytes(8); b != nil {
		return int64(binary.BigEndian.Uint64(b))
	}
	return 0
}

// count is an array's length (a null array: 0).
func (w *wire) count() int { return max(int(w.int32()), 0) }

// aborted reads a partition's aborted transactions (nil: none), sorted
// by their first offsets.
func (w *wire) aborted() []abortedTxn {
	n := w.count()
	if n == 0 || n > len(w.b)/16 {
		w.bytes(16 * n) // past the end: an error
		return nil
	}
	out := make([]abortedTxn, n)
	for i := range out {
		out[i] = abortedTxn{producer: w.int64(), first: w.int64()}
	}
	slices.SortStableFunc(out, func(a, b abortedTxn) int { return cmp.Compare(a.first, b.first) })
	return out
}
