// Package retry owns how capper's loops wait before trying again: one
// backoff (doubling up to a ceiling, with jitter, so that workers that
// failed together do not retry together) and one context-aware sleep.
// Every retry loop of the worker uses it: deciding, refunds and writes
// (dispatch), reading a partition and joining a group (the Kafka room),
// the users' limits applier and follower.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Jitter is the share of a wait that is random: a wait of d sleeps between
// d*(1-Jitter) and d.
const Jitter = 0.2

// Backoff is one retry loop's wait: Initial, doubled after each Wait up to
// Max (Max below Initial: Initial). The zero Backoff waits 100 ms to 5 s.
type Backoff struct {
	Initial, Max time.Duration
	next         time.Duration
}

// Current is the wait the next Wait sleeps (before its jitter).
func (b *Backoff) Current() time.Duration {
	if b.next == 0 {
		if b.Initial <= 0 {
			b.Initial = 100 * time.Millisecond
		}
		if b.Max <= 0 {
			b.Max = 5 * time.Second
		}
		b.next = b.Initial
	}
	return b.next
}

// Wait sleeps the current wait less up to Jitter of it (or until ctx
// ends: its error), then doubles the wait up to Max.
func (b *Backoff) Wait(ctx context.Context) error {
	d := b.Current()
	d -= time.Duration(rand.Float64() * Jitter * float64(d))
	if err := Sleep(ctx, d); err != nil {
		return err
	}
	b.next = max(min(2*b.next, b.Max), b.Initial)
	return nil
}

// Reset starts the waits again from Initial (after a success).
func (b *Backoff) Reset() { b.next = 0 }

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
