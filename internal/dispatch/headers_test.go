package dispatch

import (
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/capping"
)

// TestOverrideHeader: capper-override says what became of an intent that
// asked to bypass the caps, next to the decision's usual headers, and
// nothing for one that did not ask; a producer's own capper-override is
// dropped like any capper-* header.
func TestOverrideHeader(t *testing.T) {
	at := time.Date(2026, 11, 21, 16, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name               string
		d                  capping.Decision
		decision, override string // "": no header
		limit              string
	}{
		{"bypass", capping.Decision{Outcome: capping.Allowed, At: at, Override: capping.Bypass}, DecisionAllowed, "bypass", ""},
		{"bypass-uncounted", capping.Decision{Outcome: capping.Exempt, At: at, Override: capping.BypassUncounted}, DecisionExempt, "bypass-uncounted", ""},
		{"refused, capped", capping.Decision{Outcome: capping.Capped, At: at, Limit: "daily", OverrideRefused: true}, DecisionCapped, "refused", "daily"},
		{"refused, allowed", capping.Decision{Outcome: capping.Allowed, At: at, OverrideRefused: true}, DecisionAllowed, "refused", ""},
		{"refused, shadow-capped", capping.Decision{Outcome: capping.ShadowCapped, At: at, Limit: "daily", OverrideRefused: true}, DecisionShadowCapped, "refused", "daily"},
		{"refused, duplicate", capping.Decision{Outcome: capping.Duplicate, At: at, OverrideRefused: true}, DecisionAllowed, "refused", ""},
		{"none asked", capping.Decision{Outcome: capping.Allowed, At: at}, DecisionAllowed, "", ""},
		{"failed open", capping.Decision{Outcome: capping.FailOpen, At: at}, DecisionAllowed, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &kafka.Message{Topic: "in", Partition: 1, Offset: 7, Headers: []kafka.Header{
				{Key: "trace", Value: []byte("x")}, {Key: HeaderOverride, Value: []byte("bypass")}}}
			rec := &entry{segment: "none", decision: tc.d}
			h := newHeaderBuilder("v1", "").build(m, rec)
			n := 0
			for _, x := range h {
				if x.Key == HeaderOverride {
					n++
				}
			}
			if tc.override == "" && n != 0 || tc.override != "" && n != 1 {
				t.Fatalf("%d capper-override headers in %v", n, h)
			}
			if got := findHeader(h, HeaderOverride); got != tc.override {
				t.Fatalf("capper-override %q, want %q", got, tc.override)
			}
			if got := findHeader(h, HeaderDecision); got != tc.decision {
				t.Fatalf("capper-decision %q, want %q", got, tc.decision)
			}
			if got := findHeader(h, HeaderLimit); got != tc.limit {
				t.Fatalf("capper-limit %q, want %q", got, tc.limit)
			}
			if findHeader(h, "trace") != "x" || findHeader(h, HeaderSource) != "in/1/7" || findHeader(h, HeaderSegment) != "none" {
				t.Fatalf("other headers: %v", h)
			}
		})
	}
	t.Run("dead letter", func(t *testing.T) {
		m := &kafka.Message{Topic: "in", Headers: []kafka.Header{{Key: HeaderOverride, Value: []byte("bypass")}}}
		rec := &entry{invalid: invalid("capping", "%q is not one of bypass, bypass-uncounted", "skip"),
			decision: capping.Decision{Outcome: capping.Invalid}}
		h := newHeaderBuilder("v1", "").build(m, rec)
		if findHeader(h, HeaderOverride) != "" || findHeader(h, HeaderError) != `capping: "skip" is not one of bypass, bypass-uncounted` {
			t.Fatalf("dead letter headers: %v", h)
		}
	})
}

// TestInvalidErrorNamesTheElement: the element of a field at fault is in
// the text, not in the field (the metric label).
func TestInvalidErrorNamesTheElement(t *testing.T) {
	e := invalidElem("tags", 2, "must be a JSON string, got %s", "a number")
	if e.Field != "tags" || e.Error() != "tags[2]: must be a JSON string, got a number" {
		t.Fatalf("%q (field %q)", e.Error(), e.Field)
	}
}

// TestPolicyHeader: capper-policy names the policy of the decision, or for
// a record the engine did not decide (dead-lettered, failed open) the one
// in use when its batch started; none when nothing names one.
func TestPolicyHeader(t *testing.T) {
	m := &kafka.Message{Topic: "in", Headers: []kafka.Header{{Key: HeaderPolicy, Value: []byte("forged")}}}
	for _, tc := range []struct {
		name, batch string
		rec         entry
		want        string
	}{
		{"decided", "p1", entry{decision: capping.Decision{Outcome: capping.Capped, Limit: "daily", Policy: "p2"}}, "p2"},
		{"failed open", "p1", entry{decision: capping.Decision{Outcome: capping.FailOpen}}, "p1"},
		{"dead letter", "p1", entry{invalid: invalid("channel", "missing"), decision: capping.Decision{Outcome: capping.Invalid}}, "p1"},
		{"no policy named", "", entry{decision: capping.Decision{Outcome: capping.Allowed}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHeaderBuilder("v1", tc.batch).build(m, &tc.rec)
			n := 0
			for _, x := range h {
				if x.Key == HeaderPolicy {
					n++
				}
			}
			if got := findHeader(h, HeaderPolicy); got != tc.want || n > 1 || (tc.want != "") != (n == 1) {
				t.Fatalf("capper-policy %q (%d headers), want %q", got, n, tc.want)
			}
		})
	}
}
