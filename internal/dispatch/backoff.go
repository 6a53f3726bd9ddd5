package dispatch

// The one retry policy of the worker's loops (deciding, refunds, writes,
// reading a partition): wait, then double the wait, up to a ceiling.

import (
	"context"
	"time"
)

// backoff is one retry loop's wait: it starts at the initial wait and
// doubles after each wait, up to max.
type backoff struct{ next, max time.Duration }

// retryBackoff is the backoff of a loop that retries Redis or Kafka
// (RetryInitial doubling to RetryMax).
func (w *Worker) retryBackoff() *backoff {
	return &backoff{next: w.o.RetryInitial, max: w.o.RetryMax}
}

// current is the wait the next call to wait sleeps.
func (b *backoff) current() time.Duration { return b.next }

// wait sleeps the current wait (or until ctx ends: its error), then
// doubles it.
func (b *backoff) wait(ctx context.Context) error {
	if err := Sleep(ctx, b.next); err != nil {
		return err
	}
	b.next = min(2*b.next, b.max)
	return nil
}

// Sleep waits d, or until ctx ends (its error then).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
