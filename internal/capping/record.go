package capping

// A user's record: the packed log the script reads and writes, here decoded
// and encoded in Go for inspect, the tests and the migration from the old
// layout. The script (packed.lua.tmpl) is the other reader and writer; the
// tests check that both agree byte for byte.
//
// Layout (big endian, times in unix seconds):
//
//	count n (varint), then n idempotency entries, oldest first:
//	    digest[5] time[4]
//	sections until the end, one per scope (and campaign) the user has
//	sends in:
//	    id[3]                  bit 23 set: a per-campaign scope, then
//	    campaign[3]            the campaign's hash
//	    count c (varint), then c times[4], oldest first
//
// A trimmed section starts with a mark, the time 0 (counted in c): to stay
// within its scope's largest max it dropped a send that some limit on the
// scope still counted (inside that limit's window), so it may not hold
// every send a limit counts. A refund takes nothing from it (taking a kept
// send could free a slot a dropped one holds), and a limit whose max is
// above the sends it holds (a max raised since) counts the dropped ones as
// if they were at its oldest kept send: full while that send is inside its
// window, never fewer sends than the user got. The decide script sets the
// mark when it drops such a send, and removes it at a later write that
// finds the oldest kept send before every window of the scope, or drops
// kept sends past the scope's retention (the dropped ones are older: no
// limit counts them any more). Readers that predate the mark see an old
// time no window counts; their writes drop it.
//
// A varint is one byte below 128, else two: 0x80|hi, lo (at most 32767).

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A record's parts.
type (
	record struct {
		idem     []idemEntry
		sections []section
	}
	idemEntry struct {
		digest [5]byte
		at     int64
	}
	section struct {
		id       uint32 // with perCampaignFlag for a per-campaign scope
		campaign [3]byte
		trimmed  bool    // it starts with the mark (the layout above)
		times    []int64 // the sends, without the mark
	}
)

func appendVarint(b []byte, n int) []byte {
	if n < 128 {
		return append(b, byte(n))
	}
	return append(b, byte(0x80|n>>8), byte(n))
}

func readVarint(b []byte, p int) (n, next int, err error) {
	if p >= len(b) {
		return 0, p, errors.New("truncated count")
	}
	if b[p] < 128 {
		return int(b[p]), p + 1, nil
	}
	if p+1 >= len(b) {
		return 0, p, errors.New("truncated count")
	}
	return int(b[p]&0x7f)<<8 | int(b[p+1]), p + 2, nil
}

// idemEntrySize is the size of an idempotency entry: the 5-byte digest of
// an intent id, and when it was allowed (unix s, 4 bytes).
const idemEntrySize = 9

// idemEntries decodes consecutive idempotency entries (len(b) a multiple of
// idemEntrySize).
func idemEntries(b []byte) []idemEntry {
	var out []idemEntry
	for p := 0; p+idemEntrySize <= len(b); p += idemEntrySize {
		var e idemEntry
		copy(e.digest[:], b[p:p+5])
		e.at = int64(binary.BigEndian.Uint32(b[p+5:]))
		out = append(out, e)
	}
	return out
}

func decodeRecord(b []byte) (record, error) {
	var r record
	n, p, err := readVarint(b, 0)
	if err != nil {
		return r, err
	}
	if p+idemEntrySize*n > len(b) {
		return r, fmt.Errorf("%d idempotency entries do not fit in %d bytes", n, len(b))
	}
	r.idem = idemEntries(b[p : p+idemEntrySize*n])
	p += idemEntrySize * n
	for p < len(b) {
		if p+3 > len(b) {
			return r, errors.New("truncated section header")
		}
		var s section
		s.id = uint32(b[p])<<16 | uint32(b[p+1])<<8 | uint32(b[p+2])
		p += 3
		if s.id&perCampaignFlag != 0 {
			if p+3 > len(b) {
				return r, errors.New("truncated campaign")
			}
			copy(s.campaign[:], b[p:p+3])
			p += 3
		}
		c, q, err := readVarint(b, p)
		if err != nil {
			return r, err
		}
		p = q
		if p+4*c > len(b) {
			return r, fmt.Errorf("section %06x: %d times do not fit", s.id, c)
		}
		for i := range c {
			t := int64(binary.BigEndian.Uint32(b[p:]))
			p += 4
			if i == 0 && t == 0 {
				s.trimmed = true
				continue
			}
			s.times = append(s.times, t)
		}
		r.sections = append(r.sections, s)
	}
	return r, nil
}

func (r record) encode() []byte {
	b := appendVarint(nil, len(r.idem))
	for _, e := range r.idem {
		b = append(b, e.digest[:]...)
		b = binary.BigEndian.AppendUint32(b, uint32(e.at))
	}
	for _, s := range r.sections {
		b = append(b, byte(s.id>>16), byte(s.id>>8), byte(s.id))
		if s.id&perCampaignFlag != 0 {
			b = append(b, s.campaign[:]...)
		}
		if s.trimmed {
			b = appendVarint(b, len(s.times)+1)
			b = append(b, 0, 0, 0, 0)
		} else {
			b = appendVarint(b, len(s.times))
		}
		for _, t := range s.times {
			b = binary.BigEndian.AppendUint32(b, uint32(t))
		}
	}
	return b
}

// newest is the time of the record's latest send (0 for none).
func (r record) newest() int64 {
	var t int64
	for _, e := range r.idem {
		t = max(t, e.at)
	}
	for _, s := range r.sections {
		if len(s.times) > 0 {
			t = max(t, s.times[len(s.times)-1])
		}
	}
	return t
}
