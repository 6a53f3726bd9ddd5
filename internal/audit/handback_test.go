package audit

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
)

// TestHandedBack: a status written by HandBackStatus hands its delivery
// back: it is an input, its delivery is not one the user received, and its
// send explains refusals only as a refunded one would (marked, added to
// refunded); a later delivery of the same intent is the user's.
func TestHandedBack(t *testing.T) {
	del := func(src, at, id string) kafka.Message {
		return kafka.Message{Key: []byte("7"), Value: []byte(`{"id":"` + id + `","user_id":7,"channel":"push"}`), Headers: []kafka.Header{
			{Key: "capper-decision", Value: []byte("allowed")}, {Key: "capper-source", Value: []byte(src)},
			{Key: "capper-decided-at", Value: []byte(at)}, {Key: "capper-segment", Value: []byte("s")}}}
	}
	throttled := del("in/0/1", "2026-11-21T16:00:04.120Z", "a")
	again := del("status/0/0", "2026-11-21T16:00:06.000Z", "a")
	other := del("in/0/2", "2026-11-21T16:00:05.000Z", "b")
	v, err := HandBackStatus(throttled, time.Date(2026, 11, 21, 16, 0, 5, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(v, &st); err != nil || st["id"] != "a" || st["status"] != "throttled" || st["delivery"] == nil {
		t.Fatalf("HandBackStatus: %s (%v)", v, err)
	}
	statuses := []kafka.Message{{Value: v}, {Value: []byte(`{"id":"b","user_id":7,"status":"failed","at":"2026-11-21T16:00:05Z"}`)}}
	if got := HandBacks(statuses); len(got) != 1 || string(got[0].Value) != string(v) {
		t.Fatalf("HandBacks: %d", len(got))
	}
	deliveries := []kafka.Message{throttled, other, again}
	if got := Delivered(deliveries, statuses); len(got) != 2 || headerValue(got[0], "capper-source") != "in/0/2" {
		t.Fatalf("Delivered: %v", got)
	}
	sends, err := Sends(deliveries)
	if err != nil {
		t.Fatal(err)
	}
	refunded := map[uint64]map[string]bool{}
	kept, back := SplitSends(sends, deliveries, statuses, refunded)
	ids := func(ss []Send) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.ID)
		}
		return out
	}
	if !slices.Equal(ids(kept), []string{"b", "a"}) || !slices.Equal(ids(back), []string{"a#handed-back"}) || !refunded[7]["a#handed-back"] || refunded[7]["a"] {
		t.Fatalf("SplitSends: kept %v, back %v, refunded %v", ids(kept), ids(back), refunded)
	}
}

// TestProvider: Low a second from the first answer, High once LowFor has
// passed; the rest throttled, counted per second.
func TestProvider(t *testing.T) {
	p := Provider{Low: 2, High: 3, LowFor: 2 * time.Second}
	t0 := time.Unix(1000, 0)
	var got []bool
	for _, at := range []time.Duration{0, 100, 200, 1000, 1100, 1200, 2000, 2100, 2200, 2300} {
		got = append(got, p.Answer(t0.Add(at*time.Millisecond)))
	}
	if want := []bool{true, true, false, true, true, false, true, true, true, false}; !slices.Equal(got, want) {
		t.Fatalf("answers %v, want %v", got, want)
	}
	if acc, thr := p.Answers(); acc != 7 || thr != 3 || !p.First.Equal(t0) || !p.ThrottledFrom.Equal(t0.Add(200*time.Millisecond)) || !p.Raised.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("answers %d/%d, first %v, throttled from %v, raised %v", acc, thr, p.First, p.ThrottledFrom, p.Raised)
	}
}
