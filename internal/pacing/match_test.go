package pacing

import (
	"slices"
	"testing"
)

// TestDims: a budget covers an intent in every dimension (an empty list:
// every channel; any route, none included); CoveredBy reads an empty
// channel list as the policy's channels and an empty route list as more
// than any list; every value problem is named by its key and index.
func TestDims(t *testing.T) {
	voc := Vocabulary{Channels: []string{"email", "push"}}
	push := Where{Channels: []string{"push"}}
	fcm := Where{Channels: []string{"push"}, Routes: []string{"fcm"}}
	all := Where{}
	for _, c := range []struct {
		b    Where
		in   Intent
		want bool
	}{
		{push, Intent{Channel: "push"}, true},
		{push, Intent{Channel: "email"}, false},
		{fcm, Intent{Channel: "push", Route: "fcm"}, true},
		{fcm, Intent{Channel: "push"}, false},
		{all, Intent{Channel: "sms", Route: "x"}, true},
	} {
		if got := c.b.covers(&c.in); got != c.want {
			t.Errorf("%+v covers %+v: %t, want %t", c.b, c.in, got, c.want)
		}
	}
	if !fcm.CoveredBy(push, voc) || push.CoveredBy(fcm, voc) || !all.CoveredBy(Where{Channels: []string{"push", "email"}}, voc) ||
		all.CoveredBy(Where{Routes: []string{"fcm"}}, voc) || !fcm.CoveredBy(all, voc) {
		t.Error("CoveredBy")
	}
	if got := fcm.Covers(); got != "channels push, routes fcm" {
		t.Errorf("Covers: %q", got)
	}
	if got := all.Covers(); got != "every channel, any route" {
		t.Errorf("Covers: %q", got)
	}
	var probs []string
	Where{Channels: []string{"push", "sms", "push"}, Routes: []string{"Bad"}}.Problems(voc, func(key string, i int, msg string) {
		probs = append(probs, key+"["+string(rune('0'+i))+"]: "+msg)
	})
	want := []string{`channels[1]: "sms" is not one of the channels`, `channels[2]: "push" is listed twice`,
		`routes[0]: "Bad" must match ` + RoutePattern.String() + ` (an intent's route field)`}
	if !slices.Equal(probs, want) {
		t.Errorf("Problems: %q, want %q", probs, want)
	}
	in := Intent{Channel: "push", Route: "fcm"}
	if c := in.Clone(); c != in {
		t.Errorf("Clone: %+v", c)
	}
}
