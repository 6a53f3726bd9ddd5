package capping

import (
	"os"
	"strings"
	"testing"
)

// TestReasonsDocumented: the event contract's capper-reason row names every
// reason, as on the wire, and the names read back.
func TestReasonsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/reference/event-contract.md")
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "| `capper-reason` |") {
			row = l
		}
	}
	if row == "" {
		t.Fatal("docs/reference/event-contract.md has no capper-reason row")
	}
	n := 0
	for _, o := range Outcomes() {
		for _, r := range Reasons(o) {
			n++
			if !strings.Contains(row, "`"+r.String()+"`") {
				t.Errorf("the capper-reason row does not name %q (a reason of %s)", r, o)
			}
			if back, err := ParseReason(r.String()); err != nil || back != r {
				t.Errorf("ParseReason(%q) = %v, %v", r, back, err)
			}
		}
	}
	if n != len(reasons)-1 {
		t.Errorf("%d reasons come with an outcome, want every one of the %d", n, len(reasons)-1)
	}
	if _, err := ParseReason("nope"); err == nil {
		t.Error("ParseReason accepted an unknown name")
	}
}

// TestShadowed: shadow mode marks the policy's verdicts and takes the
// others (the reason table's shadow column), and the page that owns shadow
// mode names every reason.
func TestShadowed(t *testing.T) {
	for _, c := range []struct {
		d    Decision
		want bool
	}{
		{Decision{Outcome: Allowed}, false},
		{Decision{Outcome: Exempt}, false},
		{Decision{Outcome: Duplicate}, false},
		{Decision{Outcome: Capped, Limit: "daily"}, true},
		{Decision{Outcome: Capped, Limit: "user-channel/sms", UserLimit: true}, false},
		{Decision{Outcome: Capped, Limit: "daily", Reason: ReasonDeferExpired}, true},
		{Decision{Outcome: Capped, Limit: "user-tier/fewer/one", Reason: ReasonDeferExpired, UserLimit: true}, false},
		{Decision{Outcome: Deferred, Limit: "daily", Reason: ReasonCap}, true},
		{Decision{Outcome: Deferred, Limit: "user-tier/fewer/one", Reason: ReasonCap, UserLimit: true}, false},
		{Decision{Outcome: Deferred, Reason: ReasonQuietHours}, true},
		{Decision{Outcome: Deferred, Reason: ReasonPaused}, false},
		{Decision{Outcome: Cancelled, Reason: ReasonCampaignStopped}, false},
		{Decision{Outcome: Cancelled, Reason: ReasonExpired}, false},
		{Decision{Outcome: Cancelled, Reason: ReasonExpired, Replaced: ReasonCap, Limit: "daily"}, true},
		{Decision{Outcome: Cancelled, Reason: ReasonExpired, Replaced: ReasonCap, Limit: "user-tier/fewer/one", UserLimit: true}, false},
		{Decision{Outcome: Cancelled, Reason: ReasonExpired, Replaced: ReasonQuietHours}, true},
		{Decision{Outcome: Cancelled, Reason: ReasonExpired, Replaced: ReasonSnoozed}, false},
		{Decision{Outcome: Cancelled, Reason: ReasonExpired, Replaced: ReasonUserQuietHours}, false},
		{Decision{Outcome: Deferred, Reason: ReasonSnoozed}, false},
		{Decision{Outcome: Cancelled, Reason: ReasonSnoozeTooLong}, false},
		{Decision{Outcome: Deferred, Reason: ReasonUserQuietHours}, false},
	} {
		if got := c.d.Shadowed(); got != c.want {
			t.Errorf("%s %q (limit %q, user's %v, replaced %q): Shadowed %v, want %v", c.d.Outcome, c.d.Reason, c.d.Limit,
				c.d.UserLimit, c.d.Replaced, got, c.want)
		}
	}
	b, err := os.ReadFile("../../docs/reference/worker-config.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n### Shadow mode\n")
	if !ok {
		t.Fatal("docs/reference/worker-config.md has no section Shadow mode")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for r := range reasons {
		if name := Reason(r).String(); r != int(NoReason) && !strings.Contains(section, "`"+name+"`") {
			t.Errorf("the shadow mode section of worker-config.md does not say what becomes of %q", name)
		}
	}
}
