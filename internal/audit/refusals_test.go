package audit

import (
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/capping"
)

func TestCheckRefusals(t *testing.T) {
	always := func(string) (capping.Rules, bool) { return rules, true }
	send := func(id, seg string, at time.Duration) Send {
		return Send{User: 1, ID: id, Channel: "push", Category: "marketing", Campaign: "c", Segment: seg, At: t0.Add(at)}
	}
	refusal := func(id, seg, limit string, at time.Duration) Refusal {
		return Refusal{Send: send(id, seg, at), Limit: limit}
	}
	for _, tc := range []struct {
		name     string
		sends    []Send
		refunded map[uint64]map[string]bool
		refusals []Refusal
		want     []string // substrings, one per problem
	}{
		{"explained", []Send{send("a", "new", 0)},
			nil, []Refusal{refusal("b", "new", "hourly", 30*time.Minute)}, nil},
		{"limit not full", []Send{send("a", "new", 0)},
			nil, []Refusal{refusal("b", "new", "daily", 90*time.Minute)}, []string{`held 1 sends at most, and the limit allows 2`}},
		{"the window ended", []Send{send("a", "new", 0)},
			nil, []Refusal{refusal("b", "new", "hourly", 62*time.Minute)}, []string{`held 0 sends at most`}},
		{"an earlier limit was full", []Send{send("a", "new", 0), send("b", "new", 2*time.Hour)},
			nil, []Refusal{refusal("c", "new", "hourly", 150*time.Minute)}, nil},
		{"the first full limit is not the one named", []Send{send("a", "new", 0), send("b", "new", 2*time.Hour)},
			nil, []Refusal{{Send: send("c", "new", 2*time.Hour+30*time.Minute), Limit: "sms"}}, []string{`no limit of that name applies`}},
		{"a later limit named while an earlier one is full", []Send{send("a", "v2", 0), send("b", "v2", time.Hour), send("x", "v2", 2*time.Hour)},
			nil, []Refusal{{Send: Send{User: 1, ID: "d", Channel: "push", Category: "marketing", Campaign: "c", Segment: "v2", At: t0.Add(3 * time.Hour)}, Limit: "daily"}},
			[]string{`limit "same-campaign", ahead of it in policy order, was full`}},
		{"its id allowed before", []Send{send("a", "new", 0)},
			nil, []Refusal{refusal("a", "new", "hourly", 30*time.Minute)}, []string{`its id was allowed at`}},
		{"a refunded send may have counted", []Send{send("a", "new", 0)},
			map[uint64]map[string]bool{1: {"a": true}}, []Refusal{refusal("b", "new", "hourly", 30*time.Minute)}, nil},
		{"a numeric priority below the reserve", []Send{
			{User: 1, ID: "a", Channel: "push", Category: "marketing", Campaign: "c1", Segment: "v2", At: t0},
			{User: 1, ID: "b", Channel: "push", Category: "marketing", Campaign: "c2", Segment: "v2", At: t0.Add(time.Hour)}},
			nil, []Refusal{
				{Send: Send{User: 1, ID: "c", Channel: "push", Category: "marketing", Campaign: "c3", Priority: "74", Segment: "v2", At: t0.Add(2 * time.Hour)}, Limit: "daily"},
				{Send: Send{User: 1, ID: "d", Channel: "push", Category: "marketing", Campaign: "c4", Priority: "75", Segment: "v2", At: t0.Add(2 * time.Hour)}, Limit: "daily"},
			}, []string{`"d" capped by "daily"`}},
		{"held for a plan: its bookings are not in the deliveries", nil,
			nil, []Refusal{{Send: send("a", "new", 0), Limit: "hourly", HeldFor: "vip"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckRefusals(always, tc.sends, tc.refunded, tc.refusals)
			if len(got) != len(tc.want) {
				t.Fatalf("%d problems, want %d: %v", len(got), len(tc.want), got)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i].String(), w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}
