package audit

import (
	"slices"
	"time"
)

// BusiestSecond is the most of ts (any order) within one second, [from,
// from+1s), and from: what a budget's rate bound (rate x 1.01 + burst in
// any one second) is checked against, by the demo, the soak, the tests and
// the pacing benchmark alike.
func BusiestSecond(ts []time.Time) (most int, from time.Time) {
	sorted := slices.SortedFunc(slices.Values(ts), time.Time.Compare)
	for i, j := 0, 0; i < len(sorted); i++ {
		for sorted[i].Sub(sorted[j]) >= time.Second {
			j++
		}
		if i-j+1 > most {
			most, from = i-j+1, sorted[j]
		}
	}
	return most, from
}

// UnixMillis are ms (unix) as times, for BusiestSecond.
func UnixMillis(ms []int64) []time.Time {
	out := make([]time.Time, len(ms))
	for i, m := range ms {
		out[i] = time.UnixMilli(m)
	}
	return out
}
