package capping

// Memory's refunds: the refund script (refund.lua.tmpl) in Go on Memory's records, so that a replay
// with refunds holds what Redis would, byte for byte.

// Refund gives back the slots of one allowed send as Engine.Refund does.
// An id Engine.Refund calls invalid was never allowed: RefundUnknown.
func (m *Memory) Refund(r RefundRequest) RefundResult {
	if n := len(r.IntentID); n == 0 || n > MaxIntentID {
		return RefundUnknown
	}
	rec, ok := m.users[r.UserID]
	if !ok && (!r.Forget || r.Answered) {
		return RefundUnknown
	}
	d := digest(r.IntentID)
	out, res := refundRecord(rec, string(d[:5]), r.giveBack())
	if out != rec || !ok {
		m.users[r.UserID] = out
	}
	return res
}

// refundRecord is the refund script on one record ("": none): what it does
// for the intent whose digest is d5, and the record after it. giveBack (""
// for a refund: "f" or "g" and times otherwise) removes a send only when
// the id's entry has one of its times, and forgets d5's idempotency entries
// too; with "f" it voids its attempts unless an entry of the id stays
// (voidedEntries), with "g" (attempts answered) it voids none. The steps
// are the script's; keep them in step.
func refundRecord(rec, d5, giveBack string) (string, RefundResult) {
	forget := giveBack != ""
	voids := forget && giveBack[0] == 'f' // "g": the attempts were answered, not voided
	if rec == "" {
		if !voids {
			return rec, RefundUnknown
		}
		rec = "\x00" // no entries, no sections
	}
	cur := cursor{rec: rec}
	ib, sb := cur.entries()
	// The newest entry with the digest; times compared as their bytes.
	at := -1
	for p := ib; p < sb; p += idemEntrySize {
		if rec[p:p+digestSize] == d5 {
			at = p + digestSize
		}
	}
	if at < 0 && voids { // nothing recorded yet: the attempts are voided
		return string(voidedEntries(nil, rec[ib:sb], d5, giveBack)) + rec[sb:], RefundUnknown
	}
	if at < 0 {
		return rec, RefundUnknown
	}
	tb := rec[at : at+timeSize]
	if forget {
		ours := false
		for q := 1; q+timeSize <= len(giveBack); q += timeSize {
			ours = ours || giveBack[q:q+timeSize] == tb
		}
		if !ours {
			return rec, RefundUnknown
		}
	}
	k := 0 // the sends at that second
	for q := ib + digestSize; q < sb; q += idemEntrySize {
		if rec[q:q+timeSize] == tb {
			k++
		}
	}
	out := make([]byte, sb, len(rec))
	copy(out, rec)
	removed := false
	var s sectionPos
	for cur.next(&s) {
		c, first := 0, -1
		if !s.trimmed { // a trimmed one may not hold every send counted: it keeps them all
			for j := s.times; j < s.end; j += timeSize {
				if rec[j:j+timeSize] == tb {
					c++
					if first < 0 {
						first = j
					}
				}
			}
		}
		switch {
		case c == 0 || c != k: // not there, or maybe not the refunded send's
			out = append(out, rec[s.start:s.end]...)
		case s.n() > 1:
			removed = true
			out = append(out, rec[s.start:s.count]...)
			out = appendVarint(out, s.n()-1)
			out = append(out, rec[s.times:first]...)
			out = append(out, rec[first+timeSize:s.end]...)
		default: // emptied: the section goes
			removed = true
		}
	}
	if forget {
		out = append(voidedEntries(make([]byte, 0, len(out)+len(giveBack)*2), rec[ib:sb], d5, giveBack), out[sb:]...)
	}
	if !removed {
		if forget {
			return string(out), RefundNothing
		}
		return rec, RefundNothing
	}
	return string(out), RefundApplied
}

// voidedEntries appends to b a give-back's idempotency entries, with their
// count: those of ents without d5's, and with "f" a voided entry per attempt
// of giveBack (d5 with its first byte inverted, at the attempt's time), in
// time order, the oldest beyond maxIdem left out (refund.lua.tmpl's voided).
func voidedEntries(b []byte, ents, d5, giveBack string) []byte {
	vd := voidDigest(d5)
	var kept []string
	q := 1
	if giveBack[0] != 'f' { // "g": no attempt to void
		q = len(giveBack)
	}
	void := func(limit int64, all bool) {
		for ; q+timeSize <= len(giveBack) && (all || u32(giveBack, q) <= limit); q += timeSize {
			if e := vd + giveBack[q:q+timeSize]; len(kept) == 0 || kept[len(kept)-1] != e {
				kept = append(kept, e)
			}
		}
	}
	for p := 0; p < len(ents); p += idemEntrySize {
		e := ents[p : p+idemEntrySize]
		if e[:digestSize] == d5 {
			continue
		}
		void(u32(e, digestSize), false)
		if len(kept) == 0 || kept[len(kept)-1] != e {
			kept = append(kept, e)
		}
	}
	void(0, true)
	kept = kept[max(len(kept)-maxIdem, 0):]
	b = appendVarint(b, len(kept))
	for _, e := range kept {
		b = append(b, e...)
	}
	return b
}

// voidDigest is the digest of a voided entry of the intent whose digest is
// d5: its first byte inverted, so that no duplicate check finds it.
func voidDigest(d5 string) string { return string([]byte{255 - d5[0]}) + d5[1:] }
