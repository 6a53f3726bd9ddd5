package demo

// The demo's clock: the worker's decision clock, the intents' created_at
// and the delay tiers' waits.

import (
	"context"
	"sync"
	"time"
)

// DefaultStart is where the demo's clock starts when Options.Now is nil: a
// Tuesday morning in UTC, hours from any midnight of the users' time zones
// but Kiritimati's (whose day ends at 10:00 UTC, long after the blast), so
// that a run gives the same outcomes whatever the day it is run.
var DefaultStart = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)

// clock follows base (the wall clock's pace) plus the hours the demo
// skipped: the blast is decided at the wall clock's pace, then the demo
// moves the clock on to when the held intents are due and to the plan's
// window (advance), so that a day of a campaign team takes seconds. The
// worker sees time pass as it would over those hours, in one step: Sleep
// (the delay tiers' wait for their head record) ends when the clock passes
// its end, by the wall clock or by a skip.
//
// Send pacing does not follow the skips: a budget's token bucket is filled
// by Redis' clock (TIME; miniredis answers it with the wall clock, as the
// demo never sets its time), and the worker's pacer waits for its tokens
// on a timer, stamping its releases with this clock. The pacing section
// therefore runs before the first skip, while this clock keeps the wall
// clock's pace: its seconds are Redis' seconds.
type clock struct {
	base  func() time.Time
	mu    sync.Mutex
	skip  time.Duration
	moved chan struct{} // closed (and replaced) when the clock skips ahead
}

func newClock(base func() time.Time) *clock {
	return &clock{base: base, moved: make(chan struct{})}
}

// Now is the demo's time.
func (c *clock) Now() time.Time {
	now, _ := c.read()
	return now
}

func (c *clock) read() (time.Time, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base().Add(c.skip), c.moved
}

// advance moves the clock on to t (never back).
func (c *clock) advance(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := t.Sub(c.base().Add(c.skip)); d > 0 {
		c.skip += d
		close(c.moved)
		c.moved = make(chan struct{})
	}
}

// Sleep waits until the clock has moved on by d, or ctx ends.
func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	until := c.Now().Add(d)
	for {
		now, moved := c.read()
		left := until.Sub(now)
		if left <= 0 {
			return nil
		}
		t := time.NewTimer(left)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-moved:
			t.Stop()
		case <-t.C:
		}
	}
}
