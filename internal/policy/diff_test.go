package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readDoc(t *testing.T, name string) *Document {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if ps := d.Problems(); len(ps) > 0 {
		t.Fatalf("%s: %v", name, ps.Err())
	}
	return d
}

// TestDiff: every kind of change, in words, in a stable order (on_cap and
// max_defer as each limit ends up with them, its policy's filling in); a
// document against itself has none, and the channel shorthand reads as its
// where.
func TestDiff(t *testing.T) {
	old, new := readDoc(t, "diff-old.yaml"), readDoc(t, "diff-new.yaml")
	want := []string{
		`segment "active": limit "promo-day": added: at most 2 per calendar day, intents with channels push and tags promo, capped intents deferred for up to 12h`,
		`segment "active": limit "daily": max 3 -> 2`,
		`segment "active": limit "daily": capped intents: suppressed -> deferred for up to 12h`,
		`segment "active": limit "weekly": counts every intent -> every intent, per campaign (another scope: its counts are the sends recorded for it, none unless another limit already counts it)`,
		`segment "active": limit "weekly": capped intents: suppressed -> deferred for up to 12h`,
		`segment "active": limit "gap": removed (was at most 1 in any 4h, every intent)`,
		`segment "active": quiet_hours: added, 21:00-08:00 in the user's time zone, channels push|sms, released over 10m`,
		`segment "new": limit "daily": renamed to "first-day" (counts kept)`,
		`segment "vip": added, 1 limit`,
		`segment "vip": limit "daily": at most 5 in any 24h, every intent`,
		`segment "vip": quiet_hours: 23:00-06:30 in the user's time zone, every channel, released over 20m`,
		`segment "lapsed": removed; its users get default_policy`,
		`segment priority order: new, active -> active, new`,
		`default_policy: limit "daily": in any 24h -> per calendar day`,
		`default_policy: limit "sms-weekly": capped intents: suppressed -> deferred for up to 24h`,
		`default_policy: quiet_hours: 22:00-07:00 in the user's time zone, every channel, released over 10m -> 21:00-07:00 in the user's time zone, every channel, released over 10m, exempt categories too`,
		`channels: added inapp`,
		`overrides.campaigns: removed service-outage`,
		`time_zone: UTC -> Asia/Singapore`,
	}
	got := Diff(old, new)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if d := Diff(new, new); len(d) != 0 {
		t.Fatalf("a policy against itself: %q", d)
	}
}

// TestDiffOnCap: a policy's on_cap changes the limits that name none; a
// limit that names its own keeps it, and a rename that also changes what
// becomes of capped intents is not a plain rename.
func TestDiffOnCap(t *testing.T) {
	parse := func(y string) *Document {
		t.Helper()
		d, err := Parse([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		if ps := d.Problems(); len(ps) > 0 {
			t.Fatalf("%s: %v", y, ps.Err())
		}
		return d
	}
	old := parse(`default_policy:
  on_cap: defer
  limits:
    - {name: own, window: 24h, max: 1, on_cap: suppress}
    - {name: inherits, window: 7d, max: 3}
    - {name: old-name, window: 1h, max: 1}
`)
	new := parse(`default_policy:
  limits:
    - {name: own, window: 24h, max: 1, on_cap: suppress}
    - {name: inherits, window: 7d, max: 3}
    - {name: new-name, window: 1h, max: 1, on_cap: defer, max_defer: 2h}
`)
	want := []string{
		`default_policy: limit "inherits": capped intents: deferred for up to 24h -> suppressed`,
		`default_policy: limit "new-name": added: at most 1 in any 1h, every intent, capped intents deferred for up to 2h`,
		`default_policy: limit "old-name": removed (was at most 1 in any 1h, every intent, capped intents deferred for up to 24h)`,
	}
	if got := Diff(old, new); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
