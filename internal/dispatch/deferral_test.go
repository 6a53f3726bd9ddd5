package dispatch

import (
	"testing"
	"time"
)

// TestParseHeaderTime: the fast reading of capper's own times agrees with
// time.Parse on every input, valid or not (the fast path hands what it
// does not know to time.Parse).
func TestParseHeaderTime(t *testing.T) {
	inputs := []string{
		"2026-11-21T16:00:00.123Z", "2024-02-29T23:59:59.999Z", "1970-01-01T00:00:00.000Z",
		"2026-02-29T00:00:00.000Z", "2026-04-31T00:00:00.000Z", "2026-13-01T00:00:00.000Z",
		"2026-11-21T24:00:00.000Z", "2026-11-21T16:60:00.000Z", "2026-11-21T16:00:60.000Z",
		"2026-11-21T16:00:00.123+01:00", "2026-11-21T16:00:00Z", "2026-11-21T16:00:00.1234Z",
		"2026-11-21 16:00:00.123Z", "2026-1x-21T16:00:00.123Z", "+026-11-21T16:00:00.123Z", "",
	}
	// And every millisecond field, day and month edge of a leap year.
	for d := time.Date(2028, 1, 1, 23, 59, 59, 999e6, time.UTC); d.Year() == 2028; d = d.Add(24*time.Hour + 7*time.Millisecond) {
		inputs = append(inputs, d.Format(TimeLayout))
	}
	for _, s := range inputs {
		want, werr := time.Parse(TimeLayout, s)
		got, err := parseHeaderTime([]byte(s))
		if (werr == nil) != (err == nil) || !got.Equal(want) {
			t.Errorf("%q: got %v (error %v), time.Parse %v (error %v)", s, got, err, want, werr)
		}
		if _, fast := parseUTCMillis([]byte(s)); fast && werr != nil {
			t.Errorf("%q: the fast path accepted what time.Parse refuses (%v)", s, werr)
		}
	}
}
