package app

// Each budget's effective rate in `capper budgets` (the policy in force):
// its rate, or less while its provider throttles sends (pacing's throttle
// feedback), as Redis keeps it for every worker.

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/pacing"
)

// readEffective reads each budget's effective rate (BudgetState.Effective)
// and computes the drain times at it. Redis not answering leaves them
// unknown (EffectiveErr), and the drain times at the rate.
func (r *BudgetsReport) readEffective(ctx context.Context, rdb redis.UniversalClient, cfg *config.Config) {
	ctx, cancel := context.WithTimeout(ctx, 2*cfg.Redis.DialTimeout.D()+time.Second)
	defer cancel()
	l := &pacing.RedisLeaser{Client: rdb, Prefix: cfg.Capping.KeyPrefix}
	for i := range r.Budgets {
		b := &r.Budgets[i]
		e, err := l.Effective(ctx, &b.Budget)
		if err != nil {
			r.EffectiveErr = err
			return
		}
		b.Effective = &e
		if e.Rate >= b.Rate {
			continue
		}
		var ahead int64
		for j := range b.LaneStates {
			ahead += b.LaneStates[j].Waiting
			b.LaneStates[j].DrainIn = drainTime(ahead, e.Rate)
		}
		b.DrainIn = drainTime(b.Waiting, e.Rate)
	}
}

// effectiveText says a budget's effective rate for `capper budgets show`.
func (r *BudgetsReport) effectiveText(b *BudgetState) string {
	e := b.Effective
	switch {
	case e == nil && r.EffectiveErr != nil:
		return fmt.Sprintf("unknown (%v)", r.EffectiveErr)
	case e == nil:
		return "-"
	}
	s := formatRate(roundRate(e.Rate)) + "/s"
	if e.Rate < b.Rate {
		s += " (lowered: its provider throttles sends; back at the rate by itself, 2% of it a second)"
	}
	if e.HeldFor > 0 {
		s += fmt.Sprintf(", nothing released for %s more (the provider's Retry-After)", formatDrain(e.HeldFor))
	}
	return s
}

// effectiveColumn is the effective rate in `capper budgets`' list.
func effectiveColumn(b *BudgetState) string {
	if b.Effective == nil {
		return "-"
	}
	return formatRate(roundRate(b.Effective.Rate))
}

// roundRate is an effective rate to a tenth (it moves every ms).
func roundRate(r float64) float64 { return math.Round(r*10) / 10 }
