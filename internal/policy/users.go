package policy

// Users' own limits as the policy writes them (user_limits:): the tiers a
// user may choose and how a channel they turn down is counted. The users'
// choices themselves are data of another kind (the user-limits topic,
// internal/userlimits).

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/problems"
)

// UserLimits is the policy's user_limits section.
type UserLimits struct {
	// Tiers a user may choose, each a list of limits applied on top of
	// their segment's (the stricter wins).
	Tiers []UserTier `yaml:"tiers,omitempty"`
	// Channels users may turn down (default: every channel).
	Channels []string `yaml:"channels,omitempty"`
	// ChannelWindow is the rolling window a user's channel max counts
	// (default 7d).
	ChannelWindow Duration `yaml:"channel_window,omitempty"`
	// MaxPerChannel is the largest max a user may set for a channel
	// (default 7).
	MaxPerChannel int `yaml:"max_per_channel,omitempty"`
	// MaxDefer: a snoozed intent waits for the snooze's end when it comes
	// within this long of its first deferral, else it is cancelled
	// (default 24h).
	MaxDefer Duration `yaml:"max_defer,omitempty"`
}

// UserTier is a named list of limits (on_cap and max_defer as a segment's
// limits; no reserve).
type UserTier struct {
	Name   string  `yaml:"name"`
	Limits []Limit `yaml:"limits"`
}

// rules converts the section (nil: none).
func (u *UserLimits) rules(ps *problems.List, legacy *[]problems.Path, channels []string) *capping.UserRules {
	if u == nil {
		return nil
	}
	r := &capping.UserRules{
		Channels:      u.Channels,
		ChannelWindow: cmp.Or(u.ChannelWindow.D(), capping.DefaultChannelWindow),
		MaxPerChannel: cmp.Or(u.MaxPerChannel, capping.DefaultMaxPerChannel),
		MaxDefer:      cmp.Or(u.MaxDefer.D(), capping.DefaultUserMaxDefer),
	}
	if len(r.Channels) == 0 {
		r.Channels = slices.Clone(channels)
	}
	for i, t := range u.Tiers {
		path := capping.UserTierPath(i, t.Name)
		r.Tiers = append(r.Tiers, capping.UserTier{Name: t.Name, Limits: policy(ps, legacy, path, t.Limits, Holding{}).Limits})
	}
	return r
}

// DescribeUserLimits says what the section lets users do, one line per
// tier and one for the channels and snoozes, in words; nil when there is
// no section.
func (d *Document) DescribeUserLimits() []string {
	u := d.UserLimits
	if u == nil {
		return nil
	}
	var out []string
	for _, t := range u.Tiers {
		out = append(out, fmt.Sprintf("user tier %q: %s", t.Name, describeTier(t)))
	}
	chans := u.Channels
	if len(chans) == 0 {
		chans = d.Channels
	}
	out = append(out, fmt.Sprintf("users may turn down %s (at most %d in any %s), and snooze for up to %s (a longer snooze cancels)",
		strings.Join(chans, ", "), cmp.Or(u.MaxPerChannel, capping.DefaultMaxPerChannel),
		shortDuration(cmp.Or(u.ChannelWindow.D(), capping.DefaultChannelWindow)), shortDuration(cmp.Or(u.MaxDefer.D(), capping.DefaultUserMaxDefer))))
	return out
}

func describeTier(t UserTier) string {
	parts := make([]string, len(t.Limits))
	for i, l := range t.Limits {
		parts[i] = l.Name + " " + describeIn(l, Holding{})
	}
	return strings.Join(parts, "; ")
}

// diffUserLimits compares the user_limits sections, tiers matched by name
// (users' records name them: a renamed tier is another tier, and users who
// chose the old one are refused until they choose again).
func diffUserLimits(old, new *Document) []string {
	var out []string
	tiers := func(d *Document) map[string]string {
		m := map[string]string{}
		if d.UserLimits != nil {
			for _, t := range d.UserLimits.Tiers {
				m[t.Name] = describeTier(t)
			}
		}
		return m
	}
	ot, nt := tiers(old), tiers(new)
	for _, name := range slices.Sorted(maps.Keys(nt)) {
		switch o, ok := ot[name]; {
		case !ok:
			out = append(out, fmt.Sprintf("user tier %q: added: %s", name, nt[name]))
		case o != nt[name]:
			out = append(out, fmt.Sprintf("user tier %q: %s -> %s", name, o, nt[name]))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(ot)) {
		if _, ok := nt[name]; !ok {
			out = append(out, fmt.Sprintf("user tier %q: removed (was %s); users who chose it keep only their segment's limits", name, ot[name]))
		}
	}
	last := func(d *Document) string {
		if l := d.DescribeUserLimits(); len(l) > 0 {
			return l[len(l)-1]
		}
		return "users' own limits not read"
	}
	if a, z := last(old), last(new); a != z {
		out = append(out, fmt.Sprintf("user_limits: %s -> %s", a, z))
	}
	return out
}
