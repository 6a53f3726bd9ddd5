package policy

// Users' own limits as the policy writes them (user_limits:): the tiers a
// user may choose and how a channel they turn down is counted. The users'
// choices themselves are data of another kind (the user-limits topic,
// internal/userlimits).

import (
	"cmp"
	"slices"

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
