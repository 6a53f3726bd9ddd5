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
	if !ok {
		return RefundUnknown
	}
	d := digest(r.IntentID)
	out, res := refundRecord(rec, string(d[:5]), r.giveBack())
	if res == RefundApplied || r.Forget && res == RefundNothing {
		m.users[r.UserID] = out
	}
	return res
}

// refundRecord is the refund script on one record: what it does for the intent
// whose digest is d5, and the record after it. giveBack ("" for a refund:
// "f" and times otherwise) does something only when the id's entry has one
// of its times, and forgets d5's idempotency entries too. The steps are the
// script's; keep them in step.
func refundRecord(rec, d5, giveBack string) (string, RefundResult) {
	forget := giveBack != ""
	cur := cursor{rec: rec}
	ib, sb := cur.entries()
	// The newest entry with the digest; times compared as their bytes.
	at := -1
	for p := ib; p < sb; p += idemEntrySize {
		if rec[p:p+digestSize] == d5 {
			at = p + digestSize
		}
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
		out = forgetEntries(out, rec[ib:sb], d5)
	}
	if !removed {
		if forget {
			return string(out), RefundNothing
		}
		return rec, RefundNothing
	}
	return string(out), RefundApplied
}

// forgetEntries is out (a record whose first sb bytes are the original
// count and entries) with the entries of digest d5 left out.
func forgetEntries(out []byte, ents, d5 string) []byte {
	sb := len(varintPrefix(len(ents)/idemEntrySize)) + len(ents)
	kept := make([]byte, 0, len(ents))
	for p := 0; p < len(ents); p += idemEntrySize {
		if ents[p:p+digestSize] != d5 {
			kept = append(kept, ents[p:p+idemEntrySize]...)
		}
	}
	b := appendVarint(make([]byte, 0, len(out)), len(kept)/idemEntrySize)
	b = append(b, kept...)
	return append(b, out[sb:]...)
}

func varintPrefix(n int) []byte { return appendVarint(nil, n) }
