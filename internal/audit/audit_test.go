package audit

import (
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/capping"
)

var rules = capping.Rules{
	Segments: []capping.Segment{
		{Name: "new", Policy: capping.Policy{Limits: []capping.Limit{
			{Name: "hourly", Window: time.Hour, Max: 1},
			{Name: "daily", Window: 24 * time.Hour, Max: 2},
			{Name: "sms", Window: 24 * time.Hour, Max: 0, Channel: "sms"},
		}}},
	},
	Default: capping.Policy{Limits: []capping.Limit{{Name: "daily", Window: 24 * time.Hour, Max: 5}}},
}

var t0 = time.Date(2026, 11, 21, 16, 0, 0, 0, time.UTC)

func TestCheckFindsEachKindOfViolation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sends []Send
		want  []string // substrings, one per violation
	}{
		{"within caps", []Send{
			{User: 1, ID: "a", Channel: "push", Segment: "new", At: t0},
			{User: 1, ID: "b", Channel: "push", Segment: "new", At: t0.Add(time.Hour)}, // half-open: the first left the hour
		}, nil},
		{"hourly exceeded", []Send{
			{User: 1, ID: "a", Channel: "push", Segment: "new", At: t0},
			{User: 1, ID: "b", Channel: "push", Segment: "new", At: t0.Add(59 * time.Minute)},
		}, []string{`2 sends in the 1h0m0s window`}},
		{"daily exceeded across hours", []Send{
			{User: 1, ID: "a", Channel: "push", Segment: "new", At: t0},
			{User: 1, ID: "b", Channel: "push", Segment: "new", At: t0.Add(2 * time.Hour)},
			{User: 1, ID: "c", Channel: "email", Segment: "new", At: t0.Add(4 * time.Hour)},
		}, []string{`limit "daily" allows 2`}},
		{"max 0 channel", []Send{
			{User: 2, ID: "a", Channel: "sms", Segment: "new", At: t0},
		}, []string{`limit "sms" allows 0`}},
		{"repeated id counts once", []Send{
			{User: 1, ID: "a", Channel: "push", Segment: "new", At: t0},
			{User: 1, ID: "a", Channel: "push", Segment: "new", At: t0.Add(time.Minute), Duplicate: true},
		}, nil},
		{"default policy", []Send{
			{User: 3, ID: "1", Channel: "push", Segment: "none", At: t0},
			{User: 3, ID: "2", Channel: "push", Segment: "none", At: t0},
			{User: 3, ID: "3", Channel: "push", Segment: "none", At: t0},
			{User: 3, ID: "4", Channel: "push", Segment: "none", At: t0},
			{User: 3, ID: "5", Channel: "push", Segment: "none", At: t0},
			{User: 3, ID: "6", Channel: "push", Segment: "none", At: t0},
		}, []string{"6 sends"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Check(rules, tc.sends)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d violations %v, want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i].String(), w) {
					t.Errorf("violation %q does not contain %q", got[i], w)
				}
			}
		})
	}
}

func TestSendsReadsHeaders(t *testing.T) {
	rec := func(decision string, extra ...kafka.Header) kafka.Message {
		h := append([]kafka.Header{
			{Key: "capper-decision", Value: []byte(decision)},
			{Key: "capper-segment", Value: []byte("new")},
			{Key: "capper-decided-at", Value: []byte("2026-11-21T16:00:00.123Z")},
		}, extra...)
		return kafka.Message{Value: []byte(`{"id":"x","user_id":"42","channel":"push"}`), Headers: h}
	}
	got, err := Sends([]kafka.Message{
		rec("allowed"),
		rec("exempt"),
		rec("shadow-capped"),
		rec("allowed", kafka.Header{Key: "capper-unchecked", Value: []byte("true")}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].User != 42 || got[0].At != t0.Add(123*time.Millisecond) || got[0].Segment != "new" {
		t.Fatalf("got %+v", got)
	}
	if _, err := Sends([]kafka.Message{{Value: []byte(`{`), Headers: rec("allowed").Headers}}); err == nil {
		t.Fatal("bad JSON accepted")
	}
}
