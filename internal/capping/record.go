package capping

// A user's record decoded: the packed log the script reads and writes
// (layout.go), as values, for inspect, the tests and the migration from the
// old layout. The script (packed.lua.tmpl) is the other reader and writer;
// the tests check that both agree byte for byte.
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

import (
	"encoding/binary"
)

// A record's parts.
type (
	record struct {
		idem     []idemEntry
		sections []section
	}
	idemEntry struct {
		digest [digestSize]byte
		at     int64
	}
	section struct {
		id       uint32 // with perCampaignFlag for a per-campaign scope
		campaign [campaignSize]byte
		trimmed  bool    // it starts with the mark (the layout above)
		times    []int64 // the sends, without the mark
	}
)

// idemEntries decodes consecutive idempotency entries (len(b) a multiple of
// idemEntrySize).
func idemEntries(b string) []idemEntry {
	var out []idemEntry
	for p := 0; p+idemEntrySize <= len(b); p += idemEntrySize {
		var e idemEntry
		copy(e.digest[:], b[p:p+digestSize])
		e.at = u32(b, p+digestSize)
		out = append(out, e)
	}
	return out
}

func decodeRecord(b []byte) (record, error) {
	var r record
	c := cursor{rec: string(b)}
	start, end := c.entries()
	r.idem = idemEntries(c.rec[start:end])
	var s sectionPos
	for c.next(&s) {
		sec := section{id: s.id, trimmed: s.trimmed}
		if s.id&perCampaignFlag != 0 {
			copy(sec.campaign[:], s.campaign(c.rec))
		}
		for j := s.times; j < s.end; j += timeSize {
			sec.times = append(sec.times, u32(c.rec, j))
		}
		r.sections = append(r.sections, sec)
	}
	return r, c.err
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
			b = append(b, trimMark...)
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
