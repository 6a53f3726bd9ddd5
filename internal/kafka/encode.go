package kafka

// A produce request's records for one partition, encoded here as one
// record batch (message format v2, as kafka-go encodes it: no producer id,
// a null key, value or header value stays null) and sent as a raw record
// set. kafka-go's encoder went through a record reader, an io.Reader per
// key and value and its paged buffer: five times the CPU per record
// (BenchmarkEncodeBatch; docs/benchmarks.md, "Records in one buffer").

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"time"

	"github.com/segmentio/kafka-go/compress"
)

// encodeBatch returns msgs[idx] as a record set, its size then one batch,
// in dst's array when it is large enough. A record without a time is
// stamped now; codec compresses the records (0: none).
func encodeBatch(dst []byte, msgs []Message, idx []int, sizes []int64, codec compress.Compression, now time.Time) ([]byte, error) {
	size := 4 + 12 + batchHeader
	for _, i := range idx {
		size += int(sizes[i]) + 16 // the record's lengths as varints at most
	}
	var head [4 + 12 + batchHeader]byte
	b := append(slices.Grow(dst[:0], size), head[:]...)
	be := binary.BigEndian
	be.PutUint32(b[4+12:], 0xffffffff) // partition leader epoch: -1 (after the size, base offset and length)
	b[4+12+4] = 2                      // magic
	be.PutUint16(b[4+12+9:], uint16(codec)&attrCodec)
	be.PutUint32(b[4+12+11:], uint32(len(idx)-1)) // last offset delta
	be.PutUint64(b[4+12+31:], 0xffffffffffffffff) // producer id: none
	be.PutUint16(b[4+12+39:], 0xffff)             // producer epoch
	be.PutUint32(b[4+12+41:], 0xffffffff)         // base sequence
	be.PutUint32(b[4+12+45:], uint32(len(idx)))
	stamp := now.UnixMilli()
	first, last := int64(0), int64(0)
	records := b
	if codec != 0 {
		records = make([]byte, 0, size) // compressed into b below
	}
	for n, i := range idx {
		m := &msgs[i]
		t := stamp
		if !m.Time.IsZero() {
			t = m.Time.UnixMilli()
		}
		if n == 0 {
			first = t
		}
		last = max(last, t)
		records = appendRecord(records, m, t-first, int64(n))
	}
	if codec == 0 {
		b = records
	} else {
		var err error
		if b, err = compressInto(b, records, codec); err != nil {
			return nil, err
		}
	}
	be.PutUint64(b[4+12+15:], uint64(first))
	be.PutUint64(b[4+12+23:], uint64(last))
	be.PutUint32(b, uint32(len(b)-4))          // the record set's size
	be.PutUint32(b[4+8:], uint32(len(b)-4-12)) // the batch's length
	be.PutUint32(b[4+17:], crc32.Checksum(b[4+21:], castagnoli()))
	return b, nil
}

// appendRecord appends one record (its length first) to b.
func appendRecord(b []byte, m *Message, timeDelta, offsetDelta int64) []byte {
	n := 1 + varintSize(timeDelta) + varintSize(offsetDelta) + nullBytesSize(m.Key) + nullBytesSize(m.Value) +
		varintSize(int64(len(m.Headers)))
	for _, h := range m.Headers {
		n += varintSize(int64(len(h.Key))) + len(h.Key) + nullBytesSize(h.Value)
	}
	b = binary.AppendVarint(b, int64(n))
	b = append(b, 0) // record attributes: unused
	b = binary.AppendVarint(b, timeDelta)
	b = binary.AppendVarint(b, offsetDelta)
	b = appendNullBytes(b, m.Key)
	b = appendNullBytes(b, m.Value)
	b = binary.AppendVarint(b, int64(len(m.Headers)))
	for _, h := range m.Headers {
		b = binary.AppendVarint(b, int64(len(h.Key)))
		b = append(b, h.Key...)
		b = appendNullBytes(b, h.Value)
	}
	return b
}

func appendNullBytes(b, v []byte) []byte {
	if v == nil {
		return binary.AppendVarint(b, -1)
	}
	return append(binary.AppendVarint(b, int64(len(v))), v...)
}

func nullBytesSize(v []byte) int {
	if v == nil {
		return 1
	}
	return varintSize(int64(len(v))) + len(v)
}

// varintSize is the length of x as a zig-zag varint.
func varintSize(x int64) int {
	u, n := uint64(x)<<1^uint64(x>>63), 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// compressInto appends records, compressed with codec, to b.
func compressInto(b, records []byte, codec compress.Compression) ([]byte, error) {
	c := codec.Codec()
	if c == nil {
		return nil, fmt.Errorf("unknown compression codec %d", codec)
	}
	buf := bytes.NewBuffer(b)
	w := c.NewWriter(buf)
	if _, err := w.Write(records); err != nil {
		return nil, fmt.Errorf("compress %s: %w", codec, err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("compress %s: %w", codec, err)
	}
	return buf.Bytes(), nil
}

// maxKept bounds the record sets a writer keeps for reuse.
const maxKept = 2 << 20

// setBuffer is a record set's array to encode into: one a request used
// before, or none.
func (w *Writer) setBuffer() []byte {
	if b, ok := w.sets.Get().(*[]byte); ok {
		return *b
	}
	return nil
}

// recycle keeps set for another request. Only a set whose request was
// answered (on its first try) may be: kafka-go's transport encodes a
// request on its connection's goroutine, and one whose context ended
// while it waited may be encoded later, after the call returned.
func (w *Writer) recycle(set []byte) {
	if cap(set) <= maxKept {
		w.sets.Put(&set)
	}
}
