package soak

import (
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
)

// TestCountedCheck reads a record built by its documented layout and
// checks it against made-up deliveries: a counted send no delivery
// explains (an intent cancelled after its lost attempt ran) is reported;
// sends delivered (in the second counted or later), a trimmed section's
// mark, a trimmed section's time standing for an older delivery it dropped
// and refunded sends (fewer times) are not.
func TestCountedCheck(t *testing.T) {
	base := time.Date(2026, 11, 26, 21, 0, 0, 0, time.UTC)
	u32 := func(t time.Time) []byte {
		v := uint32(t.Unix())
		return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
	}
	// Two idempotency entries; a section of scope 1 with two sends; a
	// per-campaign section of scope 2, trimmed, with one send.
	rec := []byte{2}
	rec = append(rec, append([]byte{1, 2, 3, 4, 5}, u32(base)...)...)
	rec = append(rec, append([]byte{1, 2, 3, 4, 6}, u32(base.Add(10*time.Second))...)...)
	rec = append(rec, 0, 0, 1, 2)
	rec = append(rec, u32(base)...)
	rec = append(rec, u32(base.Add(10*time.Second))...)
	rec = append(rec, 0x80, 0, 2, 0xaa, 0xbb, 0xcc, 2, 0, 0, 0, 0)
	rec = append(rec, u32(base.Add(10*time.Second))...)
	secs, err := parseRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(secs) != 2 || len(secs[0].times) != 2 || len(secs[1].times) != 1 || secs[1].scope != "800002aabbcc" {
		t.Fatalf("parsed %+v", secs)
	}
	if _, err := parseRecord(rec[:len(rec)-2]); err == nil {
		t.Error("a truncated record parsed")
	}

	delivery := func(id string, at time.Time) kafka.Message {
		return kafka.Message{Topic: tDeliveries, Key: []byte("7"), Value: []byte(`{"id":"` + id + `","user_id":7,"campaign_id":"c1","channel":"email"}`),
			Headers: []kafka.Header{{Key: hDecision, Value: []byte("allowed")}, {Key: hDecidedAt, Value: []byte(at.Format(timeLayout))}}}
	}
	recs := map[uint64][]section{7: secs}
	for _, c := range []struct {
		name       string
		deliveries []kafka.Message
		want       string
	}{
		{"both delivered", []kafka.Message{delivery("a", base.Add(300*time.Millisecond)), delivery("b", base.Add(11*time.Second))}, ""},
		{"one never delivered", []kafka.Message{delivery("a", base)}, "user 7: Redis counts a send at 21:00:10 (scope 000001: 2 sends, trimmed false)"},
		{"delivered before it was counted", []kafka.Message{delivery("a", base), delivery("b", base.Add(5*time.Second))}, "at 21:00:10"},
	} {
		r := &report{counts: map[string]int{}}
		checkCounted(r, outputs{deliveries: c.deliveries}, recs)
		wantFinding(t, c.name, r.problems["counted"], c.want)
	}
}

// TestCountedCheckTrimmed: a trimmed section's time that no delivery at or
// after it explains stands for an older delivery it dropped (a give-back
// keeps a trimmed section whole), one time per such delivery; without an
// older delivery it is reported.
func TestCountedCheckTrimmed(t *testing.T) {
	base := time.Now().Truncate(time.Second)
	at := func(d time.Duration) []byte {
		v := uint32(base.Add(d).Unix())
		return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
	}
	delivery := func(id string, d time.Duration) kafka.Message {
		return kafka.Message{Topic: tDeliveries, Key: []byte("8"), Value: []byte(`{"id":"` + id + `","user_id":8,"campaign_id":"c1","channel":"email"}`),
			Headers: []kafka.Header{{Key: hDecision, Value: []byte("allowed")}, {Key: hDecidedAt, Value: []byte(base.Add(d).Format(timeLayout))}}}
	}
	// No entries; a per-campaign section, trimmed, holding 30 s and 40 s.
	rec := append([]byte{0, 0x80, 0, 2, 0xaa, 0xbb, 0xcc, 3, 0, 0, 0, 0}, append(at(30*time.Second), at(40*time.Second)...)...)
	secs, err := parseRecord(rec)
	if err != nil || len(secs) != 1 || !secs[0].trimmed || len(secs[0].times) != 2 {
		t.Fatalf("parsed %+v %v", secs, err)
	}
	for _, c := range []struct {
		name       string
		deliveries []kafka.Message
		want       string
	}{
		{"30 s given back, kept for the dropped a", []kafka.Message{delivery("a", 0), delivery("c", 40*time.Second)}, ""},
		{"both given back, one dropped delivery", []kafka.Message{delivery("a", 0)}, "trimmed true"},
		{"no older delivery", []kafka.Message{delivery("c", 40*time.Second)}, "trimmed true"},
	} {
		r := &report{counts: map[string]int{}}
		checkCounted(r, outputs{deliveries: c.deliveries}, map[uint64][]section{8: secs})
		wantFinding(t, c.name, r.problems["counted"], c.want)
	}
}

// wantFinding fails unless got (a check's findings) is empty when want is,
// or its first finding holds want.
func wantFinding(t *testing.T, name string, got []string, want string) {
	t.Helper()
	switch {
	case want == "" && len(got) > 0:
		t.Errorf("%s: reported %q", name, got)
	case want != "" && (len(got) == 0 || !strings.Contains(got[0], want)):
		t.Errorf("%s: reported %q, want %q", name, got, want)
	}
}
