package capping

// Memory's refunds: refund.lua in Go on Memory's records, so that a replay
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

// refundRecord is refund.lua on one record: what it does for the intent
// whose digest is d5, and the record after it. The steps are the script's;
// keep them in step.
func refundRecord(rec, d5 string) (string, RefundResult) {
	ni, ib := varint(rec, 0)
	sb := ib + idemEntrySize*ni
	// The newest entry with the digest; times compared as their 4 bytes.
	at := -1
	for p := ib; p < sb; p += idemEntrySize {
		if rec[p:p+5] == d5 {
			at = p + 5
		}
	}
	if at < 0 {
		return rec, RefundUnknown
	}
	tb := rec[at : at+4]
	k := 0 // the sends at that second
	for q := ib + 5; q < sb; q += idemEntrySize {
		if rec[q:q+4] == tb {
			k++
		}
	}
	out := make([]byte, sb, len(rec))
	copy(out, rec)
	removed := false
	for p := sb; p < len(rec); {
		_, h, cnt, b := sectionAt(rec, p)
		e := b + 4*cnt
		c, first := 0, -1
		from := b
		if trimmedAt(rec, b, cnt) { // it may not hold every send counted: it keeps them all
			from = e
		}
		for j := from; j < e; j += 4 {
			if rec[j:j+4] == tb {
				c++
				if first < 0 {
					first = j
				}
			}
		}
		switch {
		case c == 0 || c != k: // not there, or maybe not the refunded send's
			out = append(out, rec[p:e]...)
		case cnt > 1:
			removed = true
			out = append(out, rec[p:h]...)
			out = appendVarint(out, cnt-1)
			out = append(out, rec[b:first]...)
			out = append(out, rec[first+4:e]...)
		default: // emptied: the section goes
			removed = true
		}
		p = e
	}
	if !removed {
		return rec, RefundNothing
	}
	return string(out), RefundApplied
}
