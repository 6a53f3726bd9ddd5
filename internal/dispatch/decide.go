package dispatch

// Deciding with retries: nothing undecided is forwarded or committed.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capper-dev/capper/internal/capping"
)

// decide asks the Decider until every request has an answer. Requests that
// failed are retried with capped exponential backoff (nothing undecided is
// forwarded and nothing is committed meanwhile), unless FailOpen is set:
// then they are answered FailOpen. A request the engine calls invalid is
// answered Invalid (dead-lettered), never retried. A request that waits for
// an earlier one of its user (capping.ErrEarlierUndecided) is retried with
// it, after it in batch order, and is never failed open for it: once the
// earlier one is answered FailOpen, it is decided.
func (w *Worker) decide(ctx context.Context, reqs []capping.Request) ([]capping.Decision, error) {
	out := make([]capping.Decision, len(reqs))
	pending := make([]int, len(reqs))
	for i := range pending {
		pending[i] = i
	}
	sub := make([]capping.Request, 0, len(reqs))
	waits := make([]bool, len(reqs)) // waiting for an earlier one, this attempt
	backoff := w.o.RetryInitial
	for attempt := 1; len(pending) > 0; attempt++ {
		// The decision time is taken per attempt: a retried intent is decided
		// now, not when it first arrived.
		now := w.o.Now().Truncate(time.Millisecond)
		sub = sub[:0]
		for _, i := range pending {
			r := reqs[i]
			r.At = now
			sub = append(sub, r)
		}
		t0 := time.Now()
		ds, err := w.o.Decider.Decide(ctx, sub)
		w.m.decision.Observe(time.Since(t0).Seconds())
		if err != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("decide: %w", err)
		}
		// still: what is retried, in batch order; failed: how many of
		// them Redis could not decide (the others wait for one of those).
		var still, waiting []int
		clear(waits)
		var lastErr error
		failed := 0
		for j, i := range pending {
			switch {
			case err != nil:
				lastErr = err
			case errors.Is(ds[j].Err, capping.ErrInvalidRequest):
				// The policy that decides it does not know its channel
				// or category (it changed since the intent was decoded),
				// or a check the decoder lacks: no retry can help.
				out[i] = capping.Decision{Outcome: capping.Invalid, Err: ds[j].Err, At: now}
				continue
			case errors.Is(ds[j].Err, capping.ErrEarlierUndecided):
				still, waiting = append(still, i), append(waiting, i)
				waits[i] = true
				continue
			case ds[j].Err != nil:
				lastErr = ds[j].Err
				if failed < 10 {
					// Ids only at debug: logs above it never name a user.
					w.o.Logger.Debug("intent not decided", "user", reqs[i].UserID, "intent", reqs[i].IntentID, "error", lastErr)
				}
			default:
				out[i] = ds[j]
				continue
			}
			failed++
			still = append(still, i)
		}
		if len(still) == 0 {
			w.setReady("redis")
			return out, nil
		}
		if w.o.FailOpen {
			if failed > 0 {
				w.o.Logger.Warn("redis could not decide; failing open as configured",
					"intents", failed, "error", lastErr)
			}
			// The failed ones are answered; those that waited for them
			// are decided next.
			for _, i := range still {
				if !waits[i] {
					out[i] = capping.Decision{Outcome: capping.FailOpen, At: now}
				}
			}
			pending = waiting
			continue
		}
		w.setNotReady("redis", fmt.Errorf("redis cannot decide %d intents: %w", failed, lastErr))
		w.m.redisRetries.Add(float64(len(still)))
		if attempt == 1 || attempt%10 == 0 {
			w.o.Logger.Warn("redis could not decide; waiting and retrying", "intents", len(still),
				"attempt", attempt, "backoff", backoff, "error", lastErr)
		}
		if err := sleep(ctx, backoff); err != nil {
			return nil, fmt.Errorf("decide: %w (last redis error: %v)", err, lastErr)
		}
		backoff = min(2*backoff, w.o.RetryMax)
		pending = still
	}
	return out, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
