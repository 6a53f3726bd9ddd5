package pacing

// A budget's tokens on one worker: the pool leased from Redis, the lanes
// waiting for it, and the callers' wake-ups.

import (
	"context"
	"slices"
	"sync"
	"time"
)

// bucket is one budget's tokens on this worker.
type bucket struct {
	name string

	mu sync.Mutex
	// pool: the tokens leased, not yet handed out, per grant (oldest
	// first), each with the time it became valid on this worker's clock:
	// a grant's tokens are dropped poolTTL after their own time, not after
	// a later grant's.
	pool []grant
	// clock: Redis' clock on this worker's, per budget (a budget is one
	// key, so one node of a Cluster, and nodes' clocks differ a little).
	clock redisClock
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

// grant is n tokens valid from at (the worker's clock).
type grant struct {
	n  int
	at time.Time
}

// tokens is how many tokens the pool holds (mu held).
func (b *bucket) tokens() int {
	n := 0
	for _, g := range b.pool {
		n += g.n
	}
	return n
}

// add puts g in the pool, in the order of the grants' times (mu held).
func (b *bucket) add(g grant) {
	if g.n <= 0 {
		return
	}
	i := len(b.pool)
	for i > 0 && b.pool[i-1].at.After(g.at) {
		i--
	}
	b.pool = slices.Insert(b.pool, i, g)
}

// expire drops the pool's tokens valid more than poolTTL before now, and
// says how many it dropped (mu held).
func (b *bucket) expire(now time.Time) int {
	i, n := 0, 0
	for ; i < len(b.pool) && now.Sub(b.pool[i].at) > poolTTL; i++ {
		n += b.pool[i].n
	}
	b.pool = b.pool[:copy(b.pool, b.pool[i:])]
	return n
}

// drop empties the pool and says how many tokens it held (mu held).
func (b *bucket) drop() int {
	n := b.tokens()
	b.pool = b.pool[:0]
	return n
}

// take hands out up to n of the pool's tokens valid at now, oldest first
// (mu held). A grant is in the pool once its leaser woke for it; one not
// valid yet is there only when that wait was cut short.
func (b *bucket) take(now time.Time, n int) int {
	k := 0
	for k < n && len(b.pool) > 0 && !b.pool[0].at.After(now) {
		g := &b.pool[0]
		d := min(n-k, g.n)
		k, g.n = k+d, g.n-d
		if g.n == 0 {
			b.pool = b.pool[:copy(b.pool, b.pool[1:])]
		}
	}
	return k
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
