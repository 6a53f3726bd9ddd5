package audit

import (
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/capping"
)

var ny, _ = time.LoadLocation("America/New_York")

var rules = capping.Rules{
	Segments: []capping.Segment{
		{Name: "new", Policy: capping.Policy{Limits: []capping.Limit{
			{Name: "hourly", Window: time.Hour, Max: 1},
			{Name: "daily", Window: 24 * time.Hour, Max: 2},
			{Name: "sms", Window: 24 * time.Hour, Max: 0, Where: capping.Where{Channels: []string{"sms"}}},
		}}},
		{Name: "v2", Policy: capping.Policy{Limits: []capping.Limit{
			{Name: "promo-day", Calendar: capping.Day, Max: 1, Where: capping.Where{Tags: []string{"promo"}}},
			{Name: "same-campaign", Window: 7 * 24 * time.Hour, Max: 1, Per: capping.PerCampaign, Where: capping.Where{Categories: []string{"marketing"}}},
			{Name: "daily", Window: 24 * time.Hour, Max: 3, Reserve: capping.Reserve{Slots: 1, Below: capping.High}},
		}}},
	},
	Default:         capping.Policy{Limits: []capping.Limit{{Name: "daily", Window: 24 * time.Hour, Max: 5}}},
	Categories:      []string{"marketing", "transactional"},
	DefaultCategory: "marketing",
	TimeZone:        ny,
	WeekStart:       time.Monday,
}

var (
	t0      = time.Date(2026, 11, 21, 16, 0, 0, 0, time.UTC)
	kiri, _ = time.LoadLocation("Pacific/Kiritimati")
)

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
		// 2026-11-01 in New York has 25 hours: 00:30 and 23:45 local are
		// the same calendar day, 24h15m apart.
		{"calendar day of 25 hours", []Send{
			{User: 4, ID: "a", Campaign: "c1", Tags: []string{"promo"}, Segment: "v2", At: time.Date(2026, 11, 1, 0, 30, 0, 0, ny)},
			{User: 4, ID: "b", Campaign: "c2", Tags: []string{"promo"}, Segment: "v2", At: time.Date(2026, 11, 1, 23, 45, 0, 0, ny)},
		}, []string{`2 sends in the calendar day from 2026-11-01T00:00:00.000-04:00`}},
		{"next calendar day", []Send{
			{User: 4, ID: "a", Campaign: "c1", Tags: []string{"promo"}, Segment: "v2", At: time.Date(2026, 11, 1, 23, 45, 0, 0, ny)},
			{User: 4, ID: "b", Campaign: "c2", Tags: []string{"promo"}, Segment: "v2", At: time.Date(2026, 11, 2, 0, 0, 0, 0, ny)},
		}, nil},
		{"the send's own time zone", []Send{ // the same instants: one day in Kiritimati, two in New York
			{User: 4, ID: "a", Campaign: "c1", Tags: []string{"promo"}, Segment: "v2", At: time.Date(2026, 11, 1, 23, 45, 0, 0, ny), TimeZone: kiri},
			{User: 4, ID: "b", Campaign: "c2", Tags: []string{"promo"}, Segment: "v2", At: time.Date(2026, 11, 2, 0, 0, 0, 0, ny), TimeZone: kiri},
		}, []string{`limit "promo-day" allows 1`}},
		{"untagged sends do not count", []Send{
			{User: 4, ID: "a", Campaign: "c1", Tags: []string{"promo"}, Segment: "v2", At: t0},
			{User: 4, ID: "b", Campaign: "c2", Tags: []string{"news"}, Segment: "v2", At: t0.Add(time.Minute)},
		}, nil},
		{"per campaign", []Send{
			{User: 5, ID: "a", Campaign: "c1", Segment: "v2", At: t0},
			{User: 5, ID: "b", Campaign: "c2", Segment: "v2", At: t0.Add(time.Hour)},
			{User: 5, ID: "c", Campaign: "c1", Segment: "v2", At: t0.Add(2 * time.Hour), Priority: "high"},
		}, []string{`for campaign "c1", limit "same-campaign" allows 1`}},
		{"per campaign, other category", []Send{
			{User: 5, ID: "a", Campaign: "c1", Segment: "v2", At: t0},
			{User: 5, ID: "b", Campaign: "c1", Category: "transactional", Segment: "v2", At: t0.Add(time.Hour)},
		}, nil},
		{"reserved slot used by normal priority", []Send{
			{User: 6, ID: "a", Campaign: "c1", Segment: "v2", At: t0},
			{User: 6, ID: "b", Campaign: "c2", Segment: "v2", At: t0.Add(time.Hour)},
			{User: 6, ID: "c", Campaign: "c3", Segment: "v2", At: t0.Add(2 * time.Hour)},
		}, []string{`3 sends in the 24h0m0s window ending 2026-11-21T18:00:00.000Z, limit "daily" allows 2`}},
		{"reserved slot used by high priority", []Send{
			{User: 6, ID: "a", Campaign: "c1", Segment: "v2", At: t0},
			{User: 6, ID: "b", Campaign: "c2", Segment: "v2", At: t0.Add(time.Hour)},
			{User: 6, ID: "c", Campaign: "c3", Segment: "v2", At: t0.Add(2 * time.Hour), Priority: "high"},
		}, nil},
		{"same time, decided later in the batch", []Send{ // the high one used the reserved slot after b
			{User: 8, ID: "a", Campaign: "c1", Segment: "v2", At: t0, Seq: 1},
			{User: 8, ID: "b", Campaign: "c2", Segment: "v2", At: t0, Seq: 2},
			{User: 8, ID: "c", Campaign: "c3", Segment: "v2", At: t0, Seq: 3, Priority: "high"},
		}, nil},
		{"same time, decided earlier in the batch", []Send{
			{User: 8, ID: "a", Campaign: "c1", Segment: "v2", At: t0, Seq: 1},
			{User: 8, ID: "c", Campaign: "c3", Segment: "v2", At: t0, Seq: 2, Priority: "high"},
			{User: 8, ID: "b", Campaign: "c2", Segment: "v2", At: t0, Seq: 3},
		}, []string{`3 sends in the 24h0m0s window ending 2026-11-21T16:00:00.000Z, limit "daily" allows 2`}},
		{"a bypass is not checked but counts", []Send{
			{User: 7, ID: "a", Campaign: "c1", Segment: "new", At: t0},
			{User: 7, ID: "b", Campaign: "c2", Segment: "new", At: t0.Add(time.Minute), Bypass: true},
			{User: 7, ID: "c", Campaign: "c3", Segment: "new", At: t0.Add(2 * time.Hour)},
		}, []string{`3 sends in the 24h0m0s window`}},
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
		return kafka.Message{Value: []byte(`{"id":"x","user_id":"42","channel":"push","campaign_id":"c","tags":["promo"],"priority":"high","time_zone":"Asia/Singapore"}`), Headers: h}
	}
	got, err := Sends([]kafka.Message{
		rec("allowed"),
		rec("exempt"),
		rec("shadow-capped"),
		rec("allowed", kafka.Header{Key: "capper-unchecked", Value: []byte("true")}),
		rec("exempt", kafka.Header{Key: "capper-override", Value: []byte("bypass-uncounted")}),
		rec("allowed", kafka.Header{Key: "capper-override", Value: []byte("bypass")}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].User != 42 || got[0].At != t0.Add(123*time.Millisecond) || got[0].Segment != "new" ||
		got[0].Campaign != "c" || got[0].Tags[0] != "promo" || got[0].Priority != "high" || got[0].TimeZone.String() != "Asia/Singapore" ||
		got[0].Bypass || !got[1].Bypass {
		t.Fatalf("got %+v", got)
	}
	if _, err := Sends([]kafka.Message{{Value: []byte(`{`), Headers: rec("allowed").Headers}}); err == nil {
		t.Fatal("bad JSON accepted")
	}
}

// TestBusiestSecond: the most times in any one second, [from, from+1s),
// whatever their order; a time a whole second after another is not in its
// second.
func TestBusiestSecond(t *testing.T) {
	base := time.Now().Truncate(time.Second)
	at := func(ms ...int64) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, base.Add(time.Duration(m)*time.Millisecond))
		}
		return out
	}
	for _, c := range []struct {
		ts   []time.Time
		most int
		from int64
	}{
		{nil, 0, 0},
		{at(0), 1, 0},
		{at(0, 1000), 1, 0},
		{at(1500, 0, 999, 1200, 2400), 3, 999},
		{at(100, 300, 500, 1050, 1099), 5, 100},
	} {
		most, from := BusiestSecond(c.ts)
		if most != c.most || (most > 0 && !from.Equal(base.Add(time.Duration(c.from)*time.Millisecond))) {
			t.Errorf("%v: %d from %v, want %d from +%dms", c.ts, most, from, c.most, c.from)
		}
	}
	if most, _ := BusiestSecond(UnixMillis([]int64{0, 999, 1000})); most != 2 {
		t.Errorf("UnixMillis: %d, want 2", most)
	}
}
