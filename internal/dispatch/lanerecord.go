package dispatch

// A lane record's compact form (kafka.lane_records: compact): what the
// lanes need of a held intent in one binary header, capper-held, instead
// of seven text headers (capper-held-since, -lane, -campaign, -send-by,
// -released-at, -fields, -source). A held intent's lane record is written
// and read back once more than a decided one; its headers were most of
// that record's bytes and of the time to decode it. The rare parts (a
// deferral it carries, a throttled send handed back) stay headers.
//
// capper-held: a version byte; the release time, 8 bytes big-endian Unix
// ms, 0 until the gate stamps it in place; then held-since and send-by
// (zigzag varint Unix ms; send-by after a presence byte); then lane
// (<budget>/<lane>), campaign, source (<topic>/<partition>/<offset>) and
// fields (capper-fields), each a uvarint length and its bytes.

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
)

// HeaderHeld is a compact lane record's capper-held (internal to the
// lanes).
const HeaderHeld = "capper-held"

// heldVersion is capper-held's first byte.
const heldVersion = 1

// heldRecord is what a capper-held says.
type heldRecord struct {
	released                      time.Time // zero: not released with a token
	since, sendBy                 time.Time // sendBy zero: none
	lane, campaign, source, field []byte
}

// heldValue is e's capper-held, from hb's arena.
func (hb *headerBuilder) heldValue(m *kafka.Message, e *entry) []byte {
	he := e.held
	return hb.bytes(func(b []byte) []byte {
		b = append(b, heldVersion, 0, 0, 0, 0, 0, 0, 0, 0)
		b = binary.AppendVarint(b, he.since.UnixMilli())
		if he.sendBy.IsZero() {
			b = append(b, 0)
		} else {
			b = binary.AppendVarint(append(b, 1), he.sendBy.UnixMilli())
		}
		b = binary.AppendUvarint(b, uint64(len(he.budget)+1+len(he.lane)))
		b = append(append(append(b, he.budget...), '/'), he.lane...)
		b = binary.AppendUvarint(b, uint64(len(he.campaign)))
		b = append(b, he.campaign...)
		src := e.tier.source // capper-source's value (headerBuilder.source)
		if src == nil {
			var pos [128]byte
			src = appendPosition(pos[:0], m)
		}
		b = binary.AppendUvarint(b, uint64(len(src)))
		b = append(b, src...)
		s := &he.fields
		b = binary.AppendUvarint(b, uint64(s.n))
		return append(b, s.b[:s.n]...)
	})
}

// errHeld: a capper-held that does not parse.
var errHeld = errors.New("not a capper-held of version 1 (cut short, or another version)")

// parseHeld reads a capper-held. Its byte slices are views of v.
func parseHeld(v []byte) (heldRecord, error) {
	var r heldRecord
	if len(v) < 9 || v[0] != heldVersion {
		return r, errHeld
	}
	if ms := int64(binary.BigEndian.Uint64(v[1:9])); ms != 0 {
		r.released = time.UnixMilli(ms).UTC()
	}
	p := heldParser{b: v[9:]}
	r.since = p.time()
	if p.byte() == 1 {
		r.sendBy = p.time()
	}
	r.lane, r.campaign, r.source, r.field = p.bytes(), p.bytes(), p.bytes(), p.bytes()
	if p.bad {
		return heldRecord{}, errHeld
	}
	return r, nil
}

// heldParser reads capper-held's fields; past its end it says bad.
type heldParser struct {
	b   []byte
	bad bool
}

func (p *heldParser) byte() byte {
	if len(p.b) == 0 {
		p.bad = true
		return 0
	}
	c := p.b[0]
	p.b = p.b[1:]
	return c
}

func (p *heldParser) time() time.Time {
	ms, n := binary.Varint(p.b)
	if n <= 0 {
		p.bad = true
		return time.Time{}
	}
	p.b = p.b[n:]
	return time.UnixMilli(ms).UTC()
}

func (p *heldParser) bytes() []byte {
	l, n := binary.Uvarint(p.b)
	if n <= 0 || l > uint64(len(p.b)-n) {
		p.bad = true
		return nil
	}
	v := p.b[n : n+int(l) : n+int(l)]
	p.b = p.b[n+int(l):]
	return v
}

// heldOf is m's capper-held (nil: none).
func heldOf(m *kafka.Message) []byte {
	for i := range m.Headers {
		if m.Headers[i].Key == HeaderHeld {
			return m.Headers[i].Value
		}
	}
	return nil
}

// readHeld reads a compact lane record's capper-held into li and e (what
// readLane reads of the headers it replaces) and returns its lane.
func readHeld(v []byte, li *laneInfo, e *entry) (lane []byte, ok bool) {
	r, err := parseHeld(v)
	if err != nil {
		e.setUnreadable(&InvalidError{Field: "header " + HeaderHeld, Reason: err.Error()})
		return nil, false
	}
	li.heldSince, li.fields = r.since, nonEmpty(r.field)
	if !r.released.IsZero() {
		li.releasedAt, li.token = r.released, true
	}
	e.tier.source = nonEmpty(r.source)
	return r.lane, true
}

// nonEmpty is v, or nil for none.
func nonEmpty(v []byte) []byte {
	if len(v) == 0 {
		return nil
	}
	return v
}

// compactHeaders are a compact lane record's headers: the input's own
// (not capper-*), capper-held, and the deferral and hand-back it carries.
func (hb *headerBuilder) compactHeaders(m *kafka.Message, e *entry) []kafka.Header {
	n := len(m.Headers) + 3 // capper-held, a hand-back's two
	if e.tier.Deferral.Count > 0 {
		n += 3
	}
	h := append(ownHeaders(hb.cut(n), m), kafka.Header{Key: HeaderHeld, Value: hb.heldValue(m, e)})
	return hb.handBackHeaders(hb.carriedHeaders(h, e), e)
}
