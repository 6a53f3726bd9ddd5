package pacing

import (
	"testing"
	"time"
)

// TestRedisClock: the offset comes from the reading with the shortest
// round trip; a wider one later does not replace it, unless it cannot be
// true with it (the worker's clock was set) or the older one has aged
// past it; a lease's tokens are then valid at Redis' time plus the wait,
// on the worker's clock.
func TestRedisClock(t *testing.T) {
	w := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) // the worker's clock
	redis := w.Add(-5 * time.Second)                  // Redis' is 5 s behind
	ms := time.Millisecond
	var c redisClock
	lease := func(sent, back time.Time, read time.Time, validMs int64) time.Time {
		return c.validFrom(sent, back, Lease{Granted: 1, ValidMs: validMs, At: read.Truncate(ms)})
	}
	// A 2 ms round trip; Redis read its clock 1.5 ms in.
	if got, want := lease(w, w.Add(2*ms), redis.Add(1500*us), 20), w.Add(21*ms); absDiff(got, want) > ms {
		t.Fatalf("valid from %s, want %s (within 1 ms)", got, want)
	}
	// A 40 ms round trip (a late answer) is not trusted over it.
	w2 := w.Add(100 * ms)
	if got, want := lease(w2, w2.Add(40*ms), redis.Add(100*ms+time.Millisecond), 0), w2.Add(ms); absDiff(got, want) > ms {
		t.Fatalf("late answer: valid from %s, want %s: the late answer moved the clock", got, want)
	}
	// The worker's clock is set 50 ms ahead: the old reading cannot hold.
	w3 := w.Add(200*ms + 50*ms)
	if got, want := lease(w3, w3.Add(20*ms), redis.Add(200*ms+10*ms), 0), w3.Add(10*ms); absDiff(got, want) > ms {
		t.Fatalf("after the clock was set: valid from %s, want %s", got, want)
	}
	// A lease without Redis' time counts from its answer.
	if got := c.validFrom(w, w.Add(3*ms), Lease{Granted: 1, ValidMs: 7}); !got.Equal(w.Add(10 * ms)) {
		t.Fatalf("without Redis' time: valid from %s, want the answer plus 7 ms", got)
	}
}

const us = time.Microsecond

func absDiff(a, b time.Time) time.Duration {
	if d := a.Sub(b); d >= 0 {
		return d
	}
	return b.Sub(a)
}

// TestPoolKeepsEachGrantsTime: leftovers of an older grant expire
// poolTTL after their own time, not a newer grant's; tokens go oldest
// first, and none before its time.
func TestPoolKeepsEachGrantsTime(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ms := time.Millisecond
	var b bucket
	b.add(grant{n: 5, at: t0})
	b.add(grant{n: 5, at: t0.Add(8 * ms)})
	b.add(grant{n: 0, at: t0.Add(9 * ms)}) // a refused lease adds nothing
	if k := b.take(t0.Add(ms), 3); k != 3 || b.tokens() != 7 {
		t.Fatalf("took %d, %d left; want 3, 7", k, b.tokens())
	}
	if n := b.expire(t0.Add(12 * ms)); n != 2 {
		t.Fatalf("expired %d tokens at 12 ms, want the first grant's 2 left", n)
	}
	if k := b.take(t0.Add(12*ms), 10); k != 5 {
		t.Fatalf("took %d, want the second grant's 5", k)
	}
	b.add(grant{n: 4, at: t0.Add(30 * ms)})
	if k := b.take(t0.Add(29*ms), 4); k != 0 {
		t.Fatalf("took %d tokens before their time", k)
	}
	if n := b.drop(); n != 4 || len(b.pool) != 0 {
		t.Fatalf("dropped %d, %d grants left", n, len(b.pool))
	}
}
