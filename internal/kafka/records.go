package kafka

// A fetch's record batches (message format v2) decoded into Messages whose
// keys, values and header values are slices of the fetch's buffer (full
// slice expressions: an append to one never writes into the next) and
// whose header keys are one string per distinct key. The buffer is not
// reused: a message's bytes stay valid for as long as it is kept, and
// keep the fetch's buffer alive that long (a follower that keeps a
// record's bytes for longer copies them).

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/segmentio/kafka-go/compress"
)

// Record batch attributes.
const (
	attrCodec         = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
)

// batchHeader is a v2 batch's size after its base offset and length, up
// to its records.
const batchHeader = 49

// castagnoli is the CRC of record batches (the standard library makes
// its table once).
func castagnoli() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) }

// maxPrealloc bounds the records a fetch's array is made for from the
// batches' counts (more are appended).
const maxPrealloc = 1 << 16

// maxKeys bounds the distinct header keys a reader keeps a string of.
const maxKeys = 256

// recordDecoder decodes one partition's fetches.
type recordDecoder struct {
	keys      map[string]string
	last      []string // the header keys of the record before, in order
	perRecord int      // headers a record of the last fetch had: the next's array is made for as many
}

// decode returns b's records from offset from on, and the offset after
// the last whole batch in b (a fetch's last batch may be cut at its max
// bytes: it is fetched again).
//
// Read committed: the batches of aborted transactions (aborted, from the
// fetch's answer) are skipped like control batches.
func (d *recordDecoder) decode(b []byte, from int64, topic string, partition int, hwm int64, aborted []abortedTxn) ([]Message, int64, error) {
	// First the batches' framing and CRCs, and how many records: the
	// arrays are made once, that large (a Message is 150 bytes to copy).
	count, whole := 0, false
	skip := aborts{pending: aborted}
	for rest := b; ; {
		body, base, r, err := batchAt(rest)
		if err != nil {
			return nil, 0, err
		}
		if body == nil {
			if !whole && len(rest) > 0 { // brokers answer a fetch's first batch whole, however large
				return nil, 0, fmt.Errorf("%w: no whole record batch in %d bytes", errMalformed, len(rest))
			}
			break
		}
		rest, whole = r, true
		if crc32.Checksum(body[9:], castagnoli()) != binary.BigEndian.Uint32(body[5:]) {
			return nil, 0, fmt.Errorf("record batch at offset %d: CRC mismatch", base)
		}
		if last, attrs := batchInfo(body, base); !skip.skip(body, last, attrs) && last >= from {
			count += max(int(int32(binary.BigEndian.Uint32(body[45:]))), 0)
		}
	}
	var (
		msgs []Message
		hdrs []Header
	)
	if count = min(count, maxPrealloc); count > 0 {
		msgs, hdrs = make([]Message, 0, count), make([]Header, 0, count*d.perRecord)
	}
	next := from
	skip = aborts{pending: aborted}
	for rest := b; ; {
		body, base, r, _ := batchAt(rest)
		if body == nil {
			break
		}
		rest = r
		last, attrs := batchInfo(body, base)
		if !skip.skip(body, last, attrs) && last >= from {
			var err error
			if msgs, hdrs, err = d.batch(msgs, hdrs, body, base, from, attrs); err != nil {
				return nil, 0, fmt.Errorf("record batch at offset %d: %w", base, err)
			}
		}
		next = max(next, last+1)
	}
	for i := range msgs {
		msgs[i].Topic, msgs[i].Partition, msgs[i].HighWaterMark = topic, partition, hwm
	}
	if len(msgs) > 0 {
		d.perRecord = (len(hdrs) + len(msgs) - 1) / len(msgs)
	}
	return msgs, next, nil
}

// batchAt splits b's first record batch off: its body (after its base
// offset and length) and base offset; a nil body when b holds no whole
// batch.
func batchAt(b []byte) (body []byte, base int64, rest []byte, err error) {
	if len(b) < 17 {
		return nil, 0, b, nil
	}
	base, size := int64(binary.BigEndian.Uint64(b)), 12+int(int32(binary.BigEndian.Uint32(b[8:])))
	if magic := b[16]; magic != 2 {
		return nil, 0, nil, fmt.Errorf("record batch at offset %d: message format v%d; capper reads v2 (Kafka 0.11 and later)", base, magic)
	}
	if size < 12+batchHeader {
		return nil, 0, nil, fmt.Errorf("%w: record batch at offset %d of %d bytes", errMalformed, base, size)
	}
	if len(b) < size {
		return nil, 0, b, nil // cut at max bytes
	}
	return b[12:size], base, b[size:], nil
}

// batchInfo is a batch's last offset and attributes.
func batchInfo(body []byte, base int64) (last int64, attrs uint16) {
	return base + int64(int32(binary.BigEndian.Uint32(body[11:]))), binary.BigEndian.Uint16(body[9:])
}

// abortedTxn is an aborted transaction of a fetch's answer: its producer
// and its first offset.
type abortedTxn struct{ producer, first int64 }

// aborts says, batch after batch in offset order, which to skip: control
// batches, and a transactional batch of a producer whose aborted
// transaction has begun (its first offset reached) and whose ABORT marker
// has not come yet (Kafka's consumers read committed so).
type aborts struct {
	pending []abortedTxn   // not begun, by first offset
	open    map[int64]bool // producers inside an aborted transaction
}

func (a *aborts) skip(body []byte, last int64, attrs uint16) bool {
	for len(a.pending) > 0 && a.pending[0].first <= last {
		if a.open == nil {
			a.open = map[int64]bool{}
		}
		a.open[a.pending[0].producer] = true
		a.pending = a.pending[1:]
	}
	if len(a.open) == 0 {
		return attrs&attrControl != 0
	}
	producer := int64(binary.BigEndian.Uint64(body[31:]))
	switch {
	case attrs&attrControl != 0:
		if abortMarker(body) {
			delete(a.open, producer)
		}
		return true
	case attrs&attrTransactional != 0:
		return a.open[producer]
	}
	return false
}

// abortMarker reports whether a control batch's record is an ABORT marker
// (its key: a version, then the type, 0 for ABORT).
func abortMarker(body []byte) bool {
	r := varints{b: body[batchHeader:]}
	r.int()   // the record's length
	r.skip(1) // attributes
	r.int()   // time delta
	r.int()   // offset delta
	key := r.bytes()
	return !r.bad && len(key) >= 4 && binary.BigEndian.Uint16(key[2:]) == 0
}

// batch appends a batch's records from offset from on.
func (d *recordDecoder) batch(msgs []Message, hdrs []Header, body []byte, base, from int64, attrs uint16) ([]Message, []Header, error) {
	be := binary.BigEndian
	first, maxTime := int64(be.Uint64(body[15:])), int64(be.Uint64(body[23:]))
	count := int(int32(be.Uint32(body[45:])))
	data := body[batchHeader:]
	if codec := attrs & attrCodec; codec != 0 {
		var err error
		if data, err = decompress(compress.Compression(codec), data); err != nil {
			return nil, nil, err
		}
	}
	r := varints{b: data}
	for i := 0; i < count; i++ {
		n := r.int()
		if n < 0 || n > int64(len(r.b)) {
			return nil, nil, fmt.Errorf("%w: record %d of %d cut short", errMalformed, i, count)
		}
		rec := varints{b: r.b[:n]}
		r.b = r.b[n:]
		rec.skip(1) // attributes
		at, offset := rec.int(), base+rec.int()
		msgs = append(msgs, Message{}) // filled in place
		m := &msgs[len(msgs)-1]
		m.Offset, m.Key, m.Value, m.Time = offset, rec.bytes(), rec.bytes(), makeTime(first+at)
		if attrs&attrLogAppendTime != 0 {
			m.Time = makeTime(maxTime)
		}
		start := len(hdrs)
		for j := range rec.int() {
			if rec.bad {
				break
			}
			hdrs = append(hdrs, Header{Key: d.key(int(j), rec.bytes()), Value: rec.bytes()})
		}
		if rec.bad {
			return nil, nil, fmt.Errorf("%w: record at offset %d", errMalformed, offset)
		}
		if offset < from {
			msgs, hdrs = msgs[:len(msgs)-1], hdrs[:start]
			continue
		}
		if len(hdrs) > start {
			m.Headers = hdrs[start:len(hdrs):len(hdrs)]
		}
	}
	return msgs, hdrs, nil
}

// key is the one string of a record's i-th header key: most often the
// key the record before had there (a topic's records carry their headers
// in one order), else looked up.
func (d *recordDecoder) key(i int, b []byte) string {
	if i < len(d.last) && d.last[i] == string(b) {
		return d.last[i]
	}
	k, ok := d.keys[string(b)]
	if !ok {
		k = string(b)
		if d.keys == nil {
			d.keys = map[string]string{}
		}
		if len(d.keys) < maxKeys {
			d.keys[k] = k
		}
	}
	if i < maxKeys {
		for len(d.last) <= i {
			d.last = append(d.last, "")
		}
		d.last[i] = k
	}
	return k
}

// decompress is a compressed batch's records.
func decompress(c compress.Compression, data []byte) ([]byte, error) {
	codec := c.Codec()
	if codec == nil {
		return nil, fmt.Errorf("unknown compression codec %d", c)
	}
	rd := codec.NewReader(bytes.NewReader(data))
	defer rd.Close()
	out, err := io.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("decompress %s: %w", c, err)
	}
	return out, nil
}

// makeTime is a record's timestamp as kafka-go gives it (zero when unset).
func makeTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}

// varints reads a record's zig-zag varints and the bytes they size; a
// bad varint or a length past the end sets bad.
type varints struct {
	b   []byte
	bad bool
}

func (v *varints) int() int64 {
	if len(v.b) > 0 && v.b[0] < 0x80 { // one byte: most lengths and deltas
		x := int64(v.b[0])
		v.b = v.b[1:]
		return x>>1 ^ -(x & 1)
	}
	x, n := binary.Varint(v.b)
	if n <= 0 {
		v.bad, v.b = true, nil
		return 0
	}
	v.b = v.b[n:]
	return x
}

func (v *varints) skip(n int) {
	if len(v.b) < n {
		v.bad, v.b = true, nil
		return
	}
	v.b = v.b[n:]
}

// bytes is a length-prefixed field: nil when null or empty, as kafka-go
// read them.
func (v *varints) bytes() []byte {
	n := v.int()
	if n > int64(len(v.b)) {
		v.bad, v.b = true, nil
		return nil
	}
	if n <= 0 {
		return nil
	}
	x := v.b[:n:n]
	v.b = v.b[n:]
	return x
}
