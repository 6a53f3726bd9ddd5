package config

// From the capping section to the engine's rules, and their validation
// (package policy owns the policy's checks, capping the engine's).

import (
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/problems"
)

// Rules converts the capping section into the engine's rules, the time zone
// resolved. The rules of a validated config pass capping.Rules.Validate.
func (c *Config) Rules() capping.Rules {
	r, _ := c.Capping.Document.Rules()
	return r
}

// validateRules reports every problem of the cap policy at once, each at its
// path under capping (capping.segments[0] (segment "new").limits[2] (limit
// "x").max).
func (c *Config) validateRules(p *problems.List) {
	ps := c.Capping.Problems()
	for _, pr := range ps {
		p.Add(pr.Path.Under(problems.Key("capping")), "%s", pr.Msg)
	}
	// A policy under capping that defers needs somewhere to defer to (a
	// policy from policy.source is checked by the worker when it loads).
	if len(ps) == 0 && c.Policy.Source == "" && len(c.Kafka.DelayTiers) == 0 && c.Rules().Defers() {
		p.Add(problems.Key("kafka.delay_tiers"), "the policy under capping defers intents (on_cap: defer or quiet_hours), so at least one delay tier is required")
	}
}
