package pacing

// Redis' clock on the worker's: a lease's tokens are valid from a time on
// Redis' clock, and the worker spends them within poolTTL of that time on
// its own. Counting from when the answer came (as the worker once did)
// moved a late answer's whole grant later by its delay, and a second
// could then hold more than the rate allows.

import (
	"sync"
	"time"
)

// clockDrift is how fast two clocks may drift apart (1 ms a second, ten
// times more than an NTP-disciplined clock): an older reading of the
// offset is trusted that much less than a new one.
const clockDrift = 1000

// redisClock is the offset of Redis' clock from the worker's, read from
// the lease whose round trip bounds it closest (NTP's way: Redis read its
// clock between the call's send and its answer; the midpoint is the best
// guess, off by at most half the round trip).
type redisClock struct {
	mu     sync.Mutex
	lo, hi time.Duration // Redis' clock minus the worker's is within [lo, hi]
	at     time.Time     // the worker's time of that reading
	ok     bool
}

// observe takes a call sent at sent and answered at back (the worker's
// clock), whose Redis read its clock as redis (to the millisecond).
func (c *redisClock) observe(sent, back, redis time.Time) {
	if redis.IsZero() {
		return // the leaser does not say
	}
	lo, hi := redis.Sub(back), redis.Add(time.Millisecond).Sub(sent)
	c.mu.Lock()
	defer c.mu.Unlock()
	age := back.Sub(c.at)
	olo, ohi := c.lo-age/clockDrift, c.hi+age/clockDrift
	// A narrower bound wins; so does one the older bound does not overlap
	// (a clock was set: NTP stepped it, or the demo's clock skipped).
	if !c.ok || age < 0 || hi-lo <= ohi-olo || hi < olo || lo > ohi {
		c.lo, c.hi, c.at, c.ok = lo, hi, back, true
	}
}

// validFrom returns when lease l's tokens are valid on the worker's clock:
// Redis' time of the grant plus its wait, not the answer's time plus the
// wait (a late answer would stamp its tokens late). The call was sent at
// sent and answered at back; a leaser that does not say Redis' time
// leaves only the answer's.
func (c *redisClock) validFrom(sent, back time.Time, l Lease) time.Time {
	valid := time.Duration(l.ValidMs) * time.Millisecond
	if l.At.IsZero() {
		return back.Add(valid)
	}
	c.observe(sent, back, l.At)
	c.mu.Lock()
	defer c.mu.Unlock()
	return l.At.Add(valid - (c.lo+c.hi)/2)
}
