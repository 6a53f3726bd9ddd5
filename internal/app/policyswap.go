package app

// Applying the cap policy's versions to the running worker: each is checked
// against what the worker can run, then swapped into the engine and the
// decoder (between two batches).

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/policy"
	"github.com/capper-dev/capper/internal/problems"
	"github.com/capper-dev/capper/internal/segments"
)

// policySwap is the policy watcher's Apply. The watcher comes first: the
// engine and the decoder are built from the first version it loads, so
// until install a version is only checked; install wires the later ones
// into them.
type policySwap struct {
	// needs are the config keys a version needs and the worker's config
	// leaves unset (config.PolicyNeeds).
	needs func(*policy.Document) problems.List
	// into makes a checked version the one in use: keepFirst, then what
	// install sets (before the watcher's Run starts, so no lock).
	into func(context.Context, *policy.Loaded) error
}

func newPolicySwap(cfg *config.Config) *policySwap {
	return &policySwap{needs: cfg.PolicyNeeds, into: keepFirst}
}

// keepFirst leaves the first version to the engine and the decoder, which
// are built from it.
func keepFirst(context.Context, *policy.Loaded) error { return nil }

// apply refuses a version that needs a config key the worker's config
// leaves unset (delay tiers to defer, lane topics for budgets): an error
// in the config, at start (exit 2) as later; it makes any other the one
// in use.
func (s *policySwap) apply(ctx context.Context, l *policy.Loaded) error {
	if ps := s.needs(l.Document); len(ps) > 0 {
		return configError{fmt.Errorf("the worker's config cannot run it: %w", ps.Err())}
	}
	return s.into(ctx, l)
}

// install swaps each later version into the engine and the decoder (which
// follows the policy's channels and categories), and warns of the
// snapshot's segments it leaves to default_policy.
func (s *policySwap) install(engine *capping.Engine, dec *dispatch.Decoder, snap *segments.Current, log *slog.Logger) {
	s.into = func(ctx context.Context, l *policy.Loaded) error {
		if err := engine.SetPolicy(ctx, l.Rules, l.Version); err != nil {
			return err
		}
		if err := dec.SetVocabulary(l.Rules.Channels, l.Rules.Categories, l.Rules.DefaultCategory); err != nil {
			return fmt.Errorf("policy %s: %w", l.Version, err) // the engine checked the same lists
		}
		warnUnpoliced(log, snap.Load(), l)
		return nil
	}
}

// installPacing has each later version's budgets applied too: their lane
// topics are checked first, the budgets change after the engine's swap (a
// version refused changes nothing).
func (s *policySwap) installPacing(c *consumer) {
	if c.pacer == nil {
		return
	}
	into := s.into
	s.into = func(ctx context.Context, l *policy.Loaded) error {
		set := budgets(l)
		if err := c.pacer.checkLanes(ctx, set); err != nil {
			return fmt.Errorf("policy %s: %w", l.Version, err)
		}
		if err := into(ctx, l); err != nil {
			return err
		}
		return c.pacer.apply(ctx, c.reader, l.Version, set)
	}
}
