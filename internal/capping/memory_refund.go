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
	out, res := refundRecord(rec, string(d[:5]))
	if res == RefundApplied {
		m.users[r.UserID] = out
	}
	return res
}

// refundRecord is the refund script on one record: what it does for the intent
// whose digest is d5, and the record after it. The steps are the script's;
// keep them in step.
func refundRecord(rec, d5 string) (string, RefundResult) {
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
	if !removed {
		return rec, RefundNothing
	}
	return string(out), RefundApplied
}
