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
