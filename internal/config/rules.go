package config

// From the capping section to the engine's rules.

import (
	"strings"

	"github.com/capper-dev/capper/internal/capping"
)

// Rules converts the capping section into the engine's rules.
func (c *Config) Rules() capping.Rules {
	r := capping.Rules{
		Segments:         make(map[string]capping.Policy, len(c.Capping.Segments)),
		Default:          policy(c.Capping.DefaultPolicy.Limits),
		Channels:         c.Capping.Channels,
		ExemptCategories: c.Capping.ExemptCategories,
	}
	for _, s := range c.Capping.Segments {
		r.Segments[s.Name] = policy(s.Limits)
	}
	return r
}

func policy(ls []Limit) capping.Policy {
	p := capping.Policy{Limits: make([]capping.Limit, 0, len(ls))}
	for _, l := range ls {
		m := 0
		if l.Max != nil {
			m = *l.Max
		}
		p.Limits = append(p.Limits, capping.Limit{Name: l.Name, Window: l.Window.D(), Max: m, Channel: l.Channel})
	}
	return p
}

// validateRules lets the engine check the cap rules (window range, duplicate
// limit names, channels), so they are defined once, and files its messages
// under the capping key.
func (c *Config) validateRules(p *problems) {
	for _, l := range c.Capping.Segments {
		for _, lim := range l.Limits {
			if lim.Max == nil {
				return // already reported; the engine would read it as 0
			}
		}
	}
	for _, lim := range c.Capping.DefaultPolicy.Limits {
		if lim.Max == nil {
			return
		}
	}
	if err := c.Rules().Validate(); err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			p.add("capping", "%s", line)
		}
	}
}
