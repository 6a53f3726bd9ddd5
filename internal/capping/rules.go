package capping

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// DefaultSegment is the segment name of users found in no segment; they get
// Rules.Default. It must equal segments.None (the two packages do not import
// each other).
const DefaultSegment = "none"

// DefaultCategory is the category of a request that names none.
const DefaultCategory = "marketing"

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

// Rules is everything the engine needs to decide. The config package builds it.
type Rules struct {
	Segments         map[string]Policy // by segment name
	Default          Policy            // users in no segment (DefaultSegment)
	Channels         []string          // known channels
	ExemptCategories []string          // bypass capping, not counted
}

// DefaultChannels is the channel list when Rules leave it empty.
func DefaultChannels() []string { return []string{"email", "push", "sms", "inapp"} }

// DefaultExemptCategories is the exempt list when Rules leave it nil.
func DefaultExemptCategories() []string { return []string{"transactional"} }

// Validate reports every problem of the rules at once. Each error names the
// segment and the limit, e.g.
// `segment "new": limit "daily": window 30s out of range [1m0s, 744h0m0s]`.
func (r Rules) Validate() error {
	var errs []error
	channels := r.channels()
	known := map[string]bool{}
	for i, c := range channels {
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
		switch {
		case name == DefaultSegment:
			errs = append(errs, fmt.Errorf("segment %q: the name is reserved for users in no segment (use Rules.Default)", name))
			continue
		case name == "":
			errs = append(errs, errors.New(`segment "": empty segment name`))
			continue
		}
		errs = append(errs, r.Segments[name].validate(name, known)...)
	}
	errs = append(errs, r.Default.validate(DefaultSegment, known)...)
	return errors.Join(errs...)
}

func (p Policy) validate(segment string, channels map[string]bool) []error {
	if len(p.Limits) == 0 {
		return []error{fmt.Errorf("segment %q: policy has no limits", segment)}
	}
	var errs []error
	seen := map[string]bool{}
	for i, l := range p.Limits {
		where := fmt.Sprintf("segment %q: limit %q", segment, l.Name)
		if !validName(l.Name) {
			errs = append(errs, fmt.Errorf("segment %q: limits[%d]: name %q must be non-empty, at most 64 bytes, without spaces, braces or colons", segment, i, l.Name))
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

func (r Rules) channels() []string {
	if len(r.Channels) == 0 {
		return DefaultChannels()
	}
	return r.Channels
}

func (r Rules) exempt() []string {
	if r.ExemptCategories == nil {
		return DefaultExemptCategories()
	}
	return r.ExemptCategories
}

// policy returns the policy of a segment name, DefaultSegment included.
func (r Rules) policy(segment string) (Policy, bool) {
	if segment == DefaultSegment {
		return r.Default, true
	}
	p, ok := r.Segments[segment]
	return p, ok
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

func (r Rules) isExempt(category string) bool {
	return slices.Contains(r.exempt(), category)
}

// windowHash is what one sliding_window counter hash counts.
type windowHash struct {
	window  int64 // ms
	channel string
}

// windowHashes lists the distinct (window, channel) of every policy, in a
// stable order.
func (r Rules) windowHashes() []windowHash {
	seen := map[windowHash]bool{}
	var hs []windowHash
	for _, p := range r.allPolicies() {
		for _, l := range p.Limits {
			h := windowHash{l.Window.Milliseconds(), l.Channel}
			if !seen[h] {
				seen[h] = true
				hs = append(hs, h)
			}
		}
	}
	sort.Slice(hs, func(i, j int) bool {
		if hs[i].channel != hs[j].channel {
			return hs[i].channel < hs[j].channel
		}
		return hs[i].window < hs[j].window
	})
	return hs
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
