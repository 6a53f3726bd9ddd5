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

// TestDiff: every kind of change, in words, in a stable order; a document
// against itself has none, and the channel shorthand reads as its where.
func TestDiff(t *testing.T) {
	old, new := readDoc(t, "diff-old.yaml"), readDoc(t, "diff-new.yaml")
	want := []string{
		`segment "active": limit "promo-day": added: at most 2 per calendar day, intents with channels push and tags promo`,
		`segment "active": limit "daily": max 3 -> 2`,
		`segment "active": limit "weekly": counts every intent -> every intent, per campaign (another scope: its counts are the sends recorded for it, none unless another limit already counts it)`,
		`segment "active": limit "gap": removed (was at most 1 in any 4h, every intent)`,
		`segment "new": limit "daily": renamed to "first-day" (counts kept)`,
		`segment "vip": added, 1 limit`,
		`segment "vip": limit "daily": at most 5 in any 24h, every intent`,
		`segment "lapsed": removed; its users get default_policy`,
		`segment priority order: new, active -> active, new`,
		`default_policy: limit "daily": in any 24h -> per calendar day`,
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
