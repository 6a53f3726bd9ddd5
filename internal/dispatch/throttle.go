package dispatch

// Throttle feedback: a delivery status saying the provider throttled a
// send slows the send's budget for every worker (pacing.Pacer.Throttled).

import (
	"context"
	"time"
)

// throttleReport is a throttled status's report to its budget.
type throttleReport struct {
	budget     string
	retryAfter time.Duration
}

// reportThrottles reports the batch's throttled statuses. A report Redis
// did not take is not retried (the provider's next throttled answer
// reports again), and holds nothing of the batch: the send is counted
// either way, and its sender sends it again.
func (w *Worker) reportThrottles(ctx context.Context, entries []entry) {
	if w.o.Pacer == nil {
		return
	}
	for i := range entries {
		t := entries[i].throttle
		if t == nil {
			continue
		}
		ok, err := w.o.Pacer.Throttled(ctx, t.budget, t.retryAfter)
		switch {
		case err != nil:
			w.o.Logger.Warn("pacing: cannot report a throttled send; the budget's rate stays until the next one", "budget", t.budget, "error", err)
		case !ok:
			w.o.Logger.Debug("pacing: a throttled send of a budget the policy does not have", "budget", t.budget)
		}
	}
}
