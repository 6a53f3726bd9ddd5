package pacing

// A budget's tokens on one worker: the pool leased from Redis, the lanes
// waiting for it, and the callers' wake-ups.

import (
	"context"
	"sync"
	"time"
)

// bucket is one budget's tokens on this worker.
type bucket struct {
	name string

	mu     sync.Mutex
	pool   int       // tokens leased, not yet handed out
	poolAt time.Time // when the last of them was leased
	// poolLane: the lane the pool was leased for; only it and lanes above
	// it spend the pool (a lower lane never takes tokens leased while a
	// higher one waited, even when that lane's reader is between fetches).
	// Lanes here are slots (pacer.go's slot: a lane's retry topic before
	// the lane).
	poolLane int
	waiting  []int // per slot: tokens asked for by callers waiting here
	backlog  []int // per slot: callers waiting here whose partition holds more
	credit   int   // with the next lease: minus the exempt sends charged
	leasing  bool  // a caller is leasing (or waiting to lease again)
	changed  chan struct{}
	// reported: when this worker last reported a throttled send of the
	// budget; heldUntil the end of the latest Retry-After it reported.
	reported, heldUntil time.Time
}

// broadcast wakes every caller waiting on the bucket (mu held).
func (b *bucket) broadcast() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// higher reports whether a lane above lane waits here (mu held).
func (b *bucket) higher(lane int) bool {
	for j := 0; j < lane && j < len(b.waiting); j++ {
		if b.waiting[j] > 0 {
			return true
		}
	}
	return false
}

// top is the highest lane waiting here and what it asks (mu held): a
// lease is for that lane only.
func (b *bucket) top() (lane, ask int) {
	for j, n := range b.waiting {
		if n > 0 {
			return j, n
		}
	}
	return -1, 0
}

// wait releases mu until the bucket changes or ctx ends; mu is held again
// on return.
func (b *bucket) wait(ctx context.Context) error {
	ch := b.changed
	b.mu.Unlock()
	defer b.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
