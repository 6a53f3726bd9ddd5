package capping

// The cap rules (limits, policies per segment) and their validation.

import (
	"errors"
	"fmt"
	"slices"
	"sort"
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

// Rules is everything the engine needs to decide. The config package builds
// it (and owns the defaults); the engine only validates it.
type Rules struct {
	Segments         map[string]Policy // by segment name
	Default          Policy            // users in a segment without a policy, or in none
	Channels         []string          // known channels
	ExemptCategories []string          // bypass capping, not counted
}

// Validate reports every problem of the rules at once. Each error names the
// segment and the limit, e.g.
// `segment "new": limit "daily": window 30s out of range [1m0s, 744h0m0s]`.
func (r Rules) Validate() error {
	var errs []error
	if len(r.Channels) == 0 {
		errs = append(errs, errors.New("channels: at least one channel is required"))
	}
	known := map[string]bool{}
	for i, c := range r.Channels {
		switch {
		case !validName(c):
			errs = append(errs, fmt.Errorf("channels[%d]: %q must be non-empty, at most 64 bytes, without spaces, braces or colons", i, c))
		case known[c]:
			errs = append(errs, fmt.Errorf("channels[%d]: %q is listed twice", i, c))
		}
		known[c] = true
	}
	for i, c := range r.ExemptCategories {
		if c == "" {
			errs = append(errs, fmt.Errorf("exempt_categories[%d]: empty category", i))
		}
	}
	names := make([]string, 0, len(r.Segments))
	for name := range r.Segments {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name == "" {
			errs = append(errs, errors.New(`segment "": empty segment name`))
			continue
		}
		errs = append(errs, r.Segments[name].validate(fmt.Sprintf("segment %q", name), known)...)
	}
	errs = append(errs, r.Default.validate("default policy", known)...)
	return errors.Join(errs...)
}

// validate checks one policy; owner names it in the messages.
func (p Policy) validate(owner string, channels map[string]bool) []error {
	if len(p.Limits) == 0 {
		return []error{fmt.Errorf("%s: policy has no limits", owner)}
	}
	var errs []error
	seen := map[string]bool{}
	for i, l := range p.Limits {
		where := fmt.Sprintf("%s: limit %q", owner, l.Name)
		if !validName(l.Name) {
			errs = append(errs, fmt.Errorf("%s: limits[%d]: name %q must be non-empty, at most 64 bytes, without spaces, braces or colons", owner, i, l.Name))
		} else if seen[l.Name] {
			errs = append(errs, fmt.Errorf("%s: duplicate limit name", where))
		}
		seen[l.Name] = true
		if l.Window < MinWindow || l.Window > MaxWindow {
			errs = append(errs, fmt.Errorf("%s: window %s out of range [%s, %s]", where, l.Window, MinWindow, MaxWindow))
		} else if l.Window%time.Millisecond != 0 {
			errs = append(errs, fmt.Errorf("%s: window %s is not a whole number of milliseconds", where, l.Window))
		}
		if l.Max < 0 {
			errs = append(errs, fmt.Errorf("%s: negative max %d", where, l.Max))
		} else if l.Max > MaxMax {
			errs = append(errs, fmt.Errorf("%s: max %d above %d", where, l.Max, MaxMax))
		}
		if l.Channel != "" && !channels[l.Channel] {
			errs = append(errs, fmt.Errorf("%s: unknown channel %q", where, l.Channel))
		}
	}
	return errs
}

// validName: names end up in Redis keys and message headers.
func validName(s string) bool {
	return s != "" && len(s) <= 64 && !strings.ContainsAny(s, "{}: \t\r\n")
}

// PolicyOf returns the policy of a segment: its own, or Default for a
// segment without one (and for users in no segment).
func (r Rules) PolicyOf(segment string) Policy {
	if p, ok := r.Segments[segment]; ok {
		return p
	}
	return r.Default
}

// Applies reports whether the limit counts an intent on channel.
func (l Limit) Applies(channel string) bool { return l.Channel == "" || l.Channel == channel }

// allPolicies returns every policy, the default one included.
func (r Rules) allPolicies() []Policy {
	ps := []Policy{r.Default}
	for _, p := range r.Segments {
		ps = append(ps, p)
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
		Segments:         make(map[string]Policy, len(r.Segments)),
		Default:          Policy{Limits: slices.Clone(r.Default.Limits)},
		Channels:         slices.Clone(r.Channels),
		ExemptCategories: slices.Clone(r.ExemptCategories),
	}
	for name, p := range r.Segments {
		c.Segments[name] = Policy{Limits: slices.Clone(p.Limits)}
	}
	return c
}
