package capping

// The cap rules (limits, policies per segment) and their validation.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Window bounds of a limit.
const (
	MinWindow = time.Minute
	MaxWindow = 31 * 24 * time.Hour
)

// MaxMax bounds a limit's max. Far above any frequency cap; it keeps the
// sliding-window arithmetic (count * sub-interval in ms) exact in Lua's
// doubles, and a sliding log of that many entries per user would already be
// a misuse.
const MaxMax = 1_000_000

// Limit is one cap: at most Max intents in any rolling Window. A limit with a
// Channel counts and caps only intents on that channel.
type Limit struct {
	Name    string
	Window  time.Duration
	Max     int
	Channel string // "" = every channel
}

// Policy is the limits of one segment; all must pass.
type Policy struct{ Limits []Limit }

// Segment is the policy of one segment.
type Segment struct {
	Name string
	Policy
}

// Rules is everything the engine needs to decide. The config package builds
// it (and owns the defaults); the engine only validates it.
type Rules struct {
	Segments         []Segment // priority order, as configured
	Default          Policy    // users in a segment without a policy, or in none
	Channels         []string  // known channels
	ExemptCategories []string  // bypass capping, not counted
}

// Problem is one thing wrong with the rules, at the path of the field in
// the policy as configured, e.g.
// segments[0] (segment "new").limits[2] (limit "x").window.
type Problem struct{ Path, Msg string }

func (p Problem) Error() string { return p.Path + ": " + p.Msg }

// SegmentPath names a segment's policy in every message.
func SegmentPath(i int, name string) string { return fmt.Sprintf("segments[%d] (segment %q)", i, name) }

// LimitPath names a limit of a policy in every message.
func LimitPath(i int, name string) string { return fmt.Sprintf("limits[%d] (limit %q)", i, name) }

// Problems reports every problem of the rules at once, each at its path.
func (r Rules) Problems() []Problem {
	var ps []Problem
	add := func(path, format string, args ...any) {
		ps = append(ps, Problem{path, fmt.Sprintf(format, args...)})
	}
	if len(r.Channels) == 0 {
		add("channels", "at least one channel is required")
	}
	known := map[string]bool{}
	for i, c := range r.Channels {
		switch {
		case !validName(c):
			add(fmt.Sprintf("channels[%d]", i), "%q must be non-empty, at most 64 bytes, without spaces, braces or colons", c)
		case known[c]:
			add(fmt.Sprintf("channels[%d]", i), "%q is listed twice", c)
		}
		known[c] = true
	}
	for i, c := range r.ExemptCategories {
		if c == "" {
			add(fmt.Sprintf("exempt_categories[%d]", i), "empty category")
		}
	}
	names := map[string]bool{}
	for i, s := range r.Segments {
		path := SegmentPath(i, s.Name)
		switch {
		case s.Name == "":
			add(path+".name", "is required")
		case names[s.Name]:
			add(path+".name", "segment %q is listed twice", s.Name)
		}
		names[s.Name] = true
		ps = append(ps, s.Policy.problems(path, known)...)
	}
	return append(ps, r.Default.problems("default_policy", known)...)
}

// Validate is Problems as one error (nil when there is none).
func (r Rules) Validate() error {
	ps := r.Problems()
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p
	}
	return errors.Join(errs...)
}

// problems checks one policy at path.
func (p Policy) problems(path string, channels map[string]bool) []Problem {
	if len(p.Limits) == 0 {
		return []Problem{{path + ".limits", "at least one limit is required"}}
	}
	var ps []Problem
	add := func(path, format string, args ...any) {
		ps = append(ps, Problem{path, fmt.Sprintf(format, args...)})
	}
	seen := map[string]bool{}
	for i, l := range p.Limits {
		at := path + "." + LimitPath(i, l.Name)
		switch {
		case !validName(l.Name):
			add(at+".name", "%q must be non-empty, at most 64 bytes, without spaces, braces or colons", l.Name)
		case seen[l.Name]:
			add(at+".name", "%q is used by an earlier limit of this policy", l.Name)
		}
		seen[l.Name] = true
		if l.Window < MinWindow || l.Window > MaxWindow {
			add(at+".window", "%s out of range [%s, %s]", l.Window, MinWindow, MaxWindow)
		} else if l.Window%time.Millisecond != 0 {
			add(at+".window", "%s is not a whole number of milliseconds", l.Window)
		}
		if l.Max < 0 {
			add(at+".max", "must not be negative, got %d", l.Max)
		} else if l.Max > MaxMax {
			add(at+".max", "%d is above %d", l.Max, MaxMax)
		}
		if l.Channel != "" && !channels[l.Channel] {
			add(at+".channel", "%q is not one of the channels", l.Channel)
		}
	}
	return ps
}

// validName: names end up in Redis keys and message headers.
func validName(s string) bool {
	return s != "" && len(s) <= 64 && !strings.ContainsAny(s, "{}: \t\r\n")
}

// PolicyOf returns the policy of a segment: its own, or Default for a
// segment without one (and for users in no segment).
func (r Rules) PolicyOf(segment string) Policy {
	for _, s := range r.Segments {
		if s.Name == segment {
			return s.Policy
		}
	}
	return r.Default
}

// Applies reports whether the limit counts an intent on channel.
func (l Limit) Applies(channel string) bool { return l.Channel == "" || l.Channel == channel }

// allPolicies returns every policy, the default one included.
func (r Rules) allPolicies() []Policy {
	ps := []Policy{r.Default}
	for _, s := range r.Segments {
		ps = append(ps, s.Policy)
	}
	return ps
}

// longestWindow is the longest window of any policy. Retention is global, not
// per policy, so that a user moving between segments (a new snapshot) keeps
// the history the new policy's longer windows need.
func (r Rules) longestWindow() time.Duration {
	var w time.Duration
	for _, p := range r.allPolicies() {
		for _, l := range p.Limits {
			w = max(w, l.Window)
		}
	}
	return w
}

// trackedChannels maps each channel that some policy caps separately to the
// longest window of those limits. An allowed intent on a tracked channel is
// recorded in that channel's log whatever the user's current policy, so that
// channel counts stay exact when the user moves to a segment that caps the
// channel.
func (r Rules) trackedChannels() map[string]time.Duration {
	m := map[string]time.Duration{}
	for _, p := range r.allPolicies() {
		for _, l := range p.Limits {
			if l.Channel != "" {
				m[l.Channel] = max(m[l.Channel], l.Window)
			}
		}
	}
	return m
}

// IsExempt reports whether a category bypasses capping.
func (r Rules) IsExempt(category string) bool {
	return slices.Contains(r.ExemptCategories, category)
}

// clone copies the rules so that the caller's maps and slices can change.
func (r Rules) clone() Rules {
	c := Rules{
		Segments:         make([]Segment, len(r.Segments)),
		Default:          Policy{Limits: slices.Clone(r.Default.Limits)},
		Channels:         slices.Clone(r.Channels),
		ExemptCategories: slices.Clone(r.ExemptCategories),
	}
	for i, s := range r.Segments {
		c.Segments[i] = Segment{Name: s.Name, Policy: Policy{Limits: slices.Clone(s.Limits)}}
	}
	return c
}
