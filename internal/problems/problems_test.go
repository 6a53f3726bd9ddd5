package problems

import (
	"errors"
	"fmt"
	"testing"
)

func TestPathString(t *testing.T) {
	seg := Key("segments").Named(0, "segment", "new")
	lim := seg.Key("limits").Named(2, "limit", `x"y`)
	for _, tc := range []struct {
		p    Path
		want string
	}{
		{Key("time_zone"), "time_zone"},
		{Key("kafka.topics.input"), "kafka.topics.input"},
		{Key("kafka.brokers").Index(1), "kafka.brokers[1]"},
		{seg, `segments[0] (segment "new")`},
		{lim.Key("window"), `segments[0] (segment "new").limits[2] (limit "x\"y").window`},
		{lim.Key("where.channels").Index(0), `segments[0] (segment "new").limits[2] (limit "x\"y").where.channels[0]`},
		{Key("segments").Named(1, "segment", "").Key("name"), `segments[1] (segment "").name`},
		{lim.Key("max").Under(Key("capping")), `capping.segments[0] (segment "new").limits[2] (limit "x\"y").max`},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("got %s, want %s", got, tc.want)
		}
	}
}

// A path is never changed in place: paths built from one parent do not
// share steps.
func TestPathNotShared(t *testing.T) {
	parent := make(Path, 0, 8).Key("segments").Index(0)
	a, b := parent.Key("a"), parent.Key("b")
	if a.String() != "segments[0].a" || b.String() != "segments[0].b" || parent.String() != "segments[0]" {
		t.Fatalf("a %s, b %s, parent %s", a, b, parent)
	}
}

func TestPathItem(t *testing.T) {
	lim := Key("segments").Named(3, "segment", "limits[9]").Key("limits").Named(1, "limit", "d")
	for _, tc := range []struct {
		p               Path
		segment, limits int
	}{
		{lim.Key("max"), 3, 1},
		{Key("segments").Named(3, "segment", "a").Key("limits"), 3, -1},
		{Key("default_policy").Key("limits").Named(0, "limit", "x"), -1, 0},
		{Key("segments"), -1, -1},
	} {
		if s, l := tc.p.Item("segments"), tc.p.Item("limits"); s != tc.segment || l != tc.limits {
			t.Errorf("%s: segment %d, limit %d, want %d, %d", tc.p, s, l, tc.segment, tc.limits)
		}
	}
	if top := lim.Top(); top != "segments" {
		t.Errorf("top %q", top)
	}
}

func TestListErr(t *testing.T) {
	if err := List(nil).Err(); err != nil {
		t.Fatal(err)
	}
	var l List
	l.Add(Key("a"), "x")
	l.Add(Key("b.c"), "%d", 2)
	err := l.Err()
	if err == nil || err.Error() != "a: x\nb.c: 2" {
		t.Fatalf("err = %v", err)
	}
	var p Problem
	if !errors.As(err, &p) || p.Path.String() != "a" {
		t.Errorf("errors.As: %v", p)
	}
}

// TestProblemLine: the line, when known, comes first; From finds every
// problem of an error, wrapped or joined.
func TestProblemLine(t *testing.T) {
	p := Problem{Path: Key("budgets").Named(0, "budget", "b").Key("rate"), Msg: "is required", Line: 12}
	if got := p.Error(); got != `line 12: budgets[0] (budget "b").rate: is required` {
		t.Errorf("got %s", got)
	}
	if got := (Problem{Msg: "unknown key", Line: 3}).Error(); got != "line 3: unknown key" {
		t.Errorf("without a path: %s", got)
	}
	l := List{p, {Path: Key("time_zone"), Msg: "is required"}}
	err := fmt.Errorf("read policy: %w", l.Err())
	if got := From(err); len(got) != 2 || got[0].Line != 12 || got[1].Path.String() != "time_zone" {
		t.Errorf("From = %v", got)
	}
	if got := From(errors.New("yaml: line 3: bad")); len(got) != 0 {
		t.Errorf("From(no problem) = %v", got)
	}
}
