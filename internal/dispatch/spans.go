package dispatch

// A held intent's fields, carried to its lane record: where in its value
// each field the decision reads is (capper-fields), so its release reads
// them without parsing the JSON again. The value was checked whole when it
// was held (UTF-8, JSON, one object, no key twice); the header binds the
// offsets to those bytes with their CRC-32C, and a record without it, or
// whose header does not fit its value, is parsed as any intent is.

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/segmentio/encoding/json"

	"github.com/capper-dev/capper/internal/kafka"
)

// HeaderFields is a lane record's capper-fields (internal to the lanes).
const HeaderFields = "capper-fields"

// spansVersion is the first byte of capper-fields: a worker that does not
// know it parses the value.
const spansVersion = 1

// maxSpans bounds an encoded capper-fields: the version, a CRC, and two
// uvarints per field of up to 5 bytes each.
const maxSpans = 1 + 4 + intentFields*2*binary.MaxVarintLen32

// intentFields is how many fields an intent is read from.
const intentFields = 12

// castagnoli is the CRC of capper-fields (the standard library makes its
// table once).
func castagnoli() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) }

// fieldSpans is an encoded capper-fields (n 0: none).
type fieldSpans struct {
	b [maxSpans]byte
	n uint8
}

// intentSlots are the fields an intent is read from, in capper-fields'
// order (a new one goes at the end, with a new spansVersion).
func (f *fields) intentSlots() [intentFields]*json.RawValue {
	return [intentFields]*json.RawValue{&f.id, &f.userID, &f.campaignID, &f.channel, &f.category, &f.createdAt,
		&f.tags, &f.priority, &f.timeZone, &f.override, &f.sendBy, &f.route}
}

// encodeSpans says where f's intent fields are in value, which they must
// be slices of (scan's); none (n 0) when one is not.
func encodeSpans(value []byte, f *fields) (s fieldSpans) {
	b := append(s.b[:0], spansVersion)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(value, castagnoli()))
	for _, slot := range f.intentSlots() {
		raw := *slot
		if raw == nil {
			b = append(b, 0)
			continue
		}
		at := cap(value) - cap(raw) // raw is value[at:...]
		if len(raw) == 0 || at < 0 || at > len(value)-len(raw) || &value[at] != &raw[0] || len(value) > 1<<31 {
			return fieldSpans{}
		}
		b = binary.AppendUvarint(b, uint64(at)+1)
		b = binary.AppendUvarint(b, uint64(len(raw)))
	}
	s.n = uint8(len(b))
	return s
}

// fromSpans fills f's intent fields from a capper-fields header over
// value, reporting whether it fits: its version, the value's CRC, every
// field inside the value and a whole token (a string quoted at both ends;
// one with escapes, and tags, checked as JSON, as their readers expect).
func (f *fields) fromSpans(value, spans []byte) bool {
	if len(spans) < 5 || spans[0] != spansVersion || binary.BigEndian.Uint32(spans[1:]) != crc32.Checksum(value, castagnoli()) {
		return false
	}
	p := spans[5:]
	for i, slot := range f.intentSlots() {
		start, n := binary.Uvarint(p)
		if n <= 0 {
			return false
		}
		p = p[n:]
		if start == 0 {
			*slot = nil
			continue
		}
		size, n := binary.Uvarint(p)
		if n <= 0 {
			return false
		}
		p = p[n:]
		at := start - 1
		if size == 0 || at >= uint64(len(value)) || size > uint64(len(value))-at {
			return false
		}
		tok := json.RawValue(value[at : at+size])
		if !wholeToken(tok, i == 6) {
			return false
		}
		*slot = tok
	}
	return len(p) == 0
}

// wholeToken reports whether tok can be read as scan's token would be: a
// string has its quotes, and what could make a reader's unquoting fail (an
// escape, an array's elements) is checked as JSON.
func wholeToken(tok json.RawValue, array bool) bool {
	switch {
	case array || tok[0] == '[':
		return json.Valid(tok)
	case tok[0] != '"':
		return true
	case len(tok) < 2 || tok[len(tok)-1] != '"':
		return false
	}
	for _, c := range tok[1 : len(tok)-1] {
		if c == '\\' || c == '"' || c < 0x20 {
			return json.Valid(tok)
		}
	}
	return true
}

// decodeInto is Decode, leaving the fields it read in f.
func (d *Decoder) decodeInto(key, value []byte, f *fields) (Intent, error) {
	if err := d.scan(value, "an intent", f); err != nil {
		return Intent{}, err
	}
	return d.validate(key, true, f)
}

// decodeHeld decodes a released lane record's intent: from its
// capper-fields when they fit its value (checked as any intent is, against
// the vocabulary in force now), otherwise as Decode does.
func (d *Decoder) decodeHeld(key, value, spans []byte, f *fields) (Intent, error) {
	if len(value) <= d.maxBytes && f.fromSpans(value, spans) {
		return d.validate(key, true, f)
	}
	*f = fields{}
	return d.decodeInto(key, value, f)
}

// decodeIntent decodes m's intent into f: a released lane record's from
// its capper-fields when it carries them.
func (w *Worker) decodeIntent(m *kafka.Message, e *entry, f *fields) (Intent, error) {
	*f = fields{}
	if e.lane != nil && e.lane.fields != nil {
		return w.o.Decoder.decodeHeld(m.Key, m.Value, e.lane.fields, f)
	}
	return w.o.Decoder.decodeInto(m.Key, m.Value, f)
}
