package dispatch

// The worker's loops (deciding, refunds, writes) retry with the one backoff
// (internal/retry): RetryInitial doubling to RetryMax, with jitter.

import "github.com/capper-dev/capper/internal/retry"

// retryBackoff is the backoff of a loop that retries Redis or Kafka.
func (w *Worker) retryBackoff() *retry.Backoff {
	return &retry.Backoff{Initial: w.o.RetryInitial, Max: w.o.RetryMax}
}
