package config

// From the capping section to the engine's rules, and their validation
// (capping owns the rules; the file adds only what YAML can get wrong).

import (
	"fmt"

	"github.com/capper-dev/capper/internal/capping"
)

// Rules converts the capping section into the engine's rules.
func (c *Config) Rules() capping.Rules {
	r := capping.Rules{
		Segments:         make([]capping.Segment, 0, len(c.Capping.Segments)),
		Default:          policy(c.Capping.DefaultPolicy.Limits),
		Channels:         c.Capping.Channels,
		ExemptCategories: c.Capping.ExemptCategories,
	}
	for _, s := range c.Capping.Segments {
		r.Segments = append(r.Segments, capping.Segment{Name: s.Name, Policy: policy(s.Limits)})
	}
	return r
}

// policy converts limits; a missing max (reported by validateRules) reads
// as 0, so that everything else about the limit is still checked.
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

// validateRules reports every problem of the cap rules at once, each at its
// path under capping (capping.segments[0] (segment "new").limits[2] (limit
// "x").max): a missing max here, everything else by capping.Rules.
func (c *Config) validateRules(p *problems) {
	missingMax := func(path string, ls []Limit) {
		for i, l := range ls {
			if l.Max == nil {
				p.add(path+"."+capping.LimitPath(i, l.Name)+".max", "is required (0 means never)")
			}
		}
	}
	for i, s := range c.Capping.Segments {
		missingMax("capping."+capping.SegmentPath(i, s.Name), s.Limits)
	}
	missingMax("capping.default_policy", c.Capping.DefaultPolicy.Limits)
	for _, pr := range c.Rules().Problems() {
		p.add(fmt.Sprintf("capping.%s", pr.Path), "%s", pr.Msg)
	}
}
