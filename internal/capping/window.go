package capping

// The sliding_window arithmetic on the Go side (Inspect). It mirrors
// sliding_window.lua; the tests check the script against an independent model.

// floorDiv is floor(a/b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// windowEstimate returns E, the estimated count times s, of the counters at
// time t for a window of w ms split in sub-intervals of s ms: the counter of
// the sub-interval holding t-w+1 weighted by its part inside the window, the
// later ones in full.
func windowEstimate(counters map[int64]int64, t, w, s int64) int64 {
	i0 := floorDiv(t-w+1, s)
	var after int64
	for i, c := range counters {
		if i > i0 {
			after += c
		}
	}
	inside := (i0+1)*s - (t - w + 1)
	return inside*counters[i0] + s*after
}

// windowCount rounds an estimate up, as Decision.Counts reports it.
func windowCount(e, s int64) int64 { return (e + s - 1) / s }

// windowNextFree returns the earliest time t' >= t, in ms, at which the
// estimate allows one more intent under max (max >= 1), if no intent is
// added meanwhile.
func windowNextFree(counters map[int64]int64, t, w, s, maxCount int64) int64 {
	i0 := floorDiv(t-w+1, s)
	top := floorDiv(t, s)
	var after int64
	for i, c := range counters {
		if i >= i0 {
			after += c
			top = max(top, i)
		}
	}
	for b := i0; b <= top+1; b++ {
		cb := counters[b]
		after -= cb
		r := s * (maxCount - 1 - after)
		if r < 0 {
			continue
		}
		start, stop := b*s+w-1, (b+1)*s+w-1
		at := start
		if cb > 0 {
			at = max(start, stop-min(r/cb, s))
		}
		return max(at, t)
	}
	return t // not reached for maxCount >= 1
}
