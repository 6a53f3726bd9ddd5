package policy

import (
	"strings"
	"testing"
	"time"
)

// TestUserLimitsSection: the section's defaults, and its problems at their
// paths.
func TestUserLimitsSection(t *testing.T) {
	d, err := Parse([]byte("user_limits:\n  tiers:\n    - name: fewer\n      limits: [{name: daily, window: 24h, max: 1}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	r, ps := d.Rules()
	if len(ps) > 0 {
		t.Fatal(ps.Err())
	}
	u := r.Users
	if u == nil || len(u.Tiers) != 1 || u.Tiers[0].Limits[0].Max != 1 || u.ChannelWindow != 7*24*time.Hour ||
		u.MaxPerChannel != 7 || u.MaxDefer != 24*time.Hour || strings.Join(u.Channels, ",") != "email,push,sms,inapp" {
		t.Fatalf("rules: %+v", u)
	}
	if d, _ := Parse([]byte("user_limits: {tiers: [{name: later, limits: [{name: d, window: 1h, max: 1, on_cap: defer, max_defer: 2h}]}]}\n")); !strings.Contains(strings.Join(d.DescribeUserLimits(), "\n"), `user tier "later": d at most 1 in any 1h, every intent, capped intents deferred for up to 2h`) {
		t.Fatalf("a tier that defers, described: %q", d.DescribeUserLimits())
	}
	if d, _ := Parse([]byte("channels: [push]\n")); d.UserLimits != nil {
		t.Fatal("a document without the section reads users' limits")
	}
	for _, tc := range []struct{ doc, want string }{
		{"user_limits: {tiers: [{name: fewer, limits: [{name: d, window: 24h}]}]}", `user_limits.tiers[0] (tier "fewer").limits[0] (limit "d").max: is required (0 means never)`},
		{"user_limits: {tiers: [{name: fewer, limits: []}]}", `user_limits.tiers[0] (tier "fewer").limits: at least one limit is required`},
		{"user_limits: {tiers: [{name: a, limits: [{name: d, window: 1d, max: 1}]}, {name: a, limits: [{name: d, window: 1d, max: 1}]}]}", `user_limits.tiers[1] (tier "a").name: tier "a" is listed twice`},
		{"user_limits: {tiers: [{name: a, limits: [{name: d, window: 1d, max: 3, reserve: {slots: 1}}]}]}", `user_limits.tiers[0] (tier "a").limits[0] (limit "d").reserve: a user's tier reserves nothing`},
		{"user_limits: {channels: [fax]}", `user_limits.channels[0]: "fax" is not one of the channels`},
		{"user_limits: {channel_window: 30s}", `user_limits.channel_window: 30s out of range`},
		{"user_limits: {max_per_channel: 10001}", `user_limits.max_per_channel: 10001 out of range [1, 10000]`},
		{"user_limits: {max_defer: 8d}", `user_limits.max_defer: 192h0m0s out of range`},
		{"user_limits: {tier: fewer}", `line 1: user_limits.tier: unknown key; did you mean tiers?`},
	} {
		d, err := Parse([]byte(tc.doc))
		if err != nil {
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want %q", tc.doc, err, tc.want)
			}
			continue
		}
		if got := d.Problems().Err(); got == nil || !strings.Contains(got.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.doc, got, tc.want)
		}
	}
}

// TestDiffUserLimits: tiers added, changed and removed, and the channels'
// settings, in words.
func TestDiffUserLimits(t *testing.T) {
	parse := func(s string) *Document {
		d, err := Parse([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	old := parse("user_limits:\n  tiers:\n    - {name: fewer, limits: [{name: daily, window: 24h, max: 1}]}\n    - {name: rare, limits: [{name: weekly, window: 7d, max: 1}]}\n")
	new := parse("user_limits:\n  channels: [sms]\n  tiers:\n    - {name: fewer, limits: [{name: daily, window: 24h, max: 2}]}\n    - {name: calm, limits: [{name: daily, calendar: day, max: 1}]}\n")
	want := []string{
		`user tier "calm": added: daily at most 1 per calendar day, every intent`,
		`user tier "fewer": daily at most 1 in any 24h, every intent -> daily at most 2 in any 24h, every intent`,
		`user tier "rare": removed (was weekly at most 1 in any 7d, every intent); users who chose it keep only their segment's limits`,
		`user_limits: users may turn down email, push, sms, inapp (at most 7 in any 7d), and snooze for up to 24h (a longer snooze cancels) -> users may turn down sms (at most 7 in any 7d), and snooze for up to 24h (a longer snooze cancels)`,
	}
	if got := Diff(old, new); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
