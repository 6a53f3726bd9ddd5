package pacing

// The worker's side of the budgets: the tokens it leased and the lanes
// waiting for them, one bucket per budget. Lanes of one worker are served
// in precedence order; the lease's lane flag orders them across workers.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capper-dev/capper/internal/retry"
	"github.com/prometheus/client_golang/prometheus"
)

// Leaser takes leases of a budget's tokens (*RedisLeaser).
type Leaser interface {
	Lease(ctx context.Context, r LeaseRequest) (Lease, error)
	Throttle(ctx context.Context, r ThrottleRequest) (Throttled, error)
}

// Options configure New.
type Options struct {
	Leaser Leaser // required
	// Now and Sleep are the clock (nil: time.Now and a timer).
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	// Logger; nil discards. Registerer receives the metrics (nil: none).
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// LaneTTL is how long a lane that asked goes before lower lanes, on
	// every worker (0: DefaultLaneTTL); BacklogTTL how long when its
	// partition held more records than it asked for (0: DefaultBacklogTTL).
	LaneTTL, BacklogTTL time.Duration
}

// Tuning. A lane's flag outlives its last ask, and the wait it was told, by
// LaneTTL: long enough for a waiting lane to ask again, short enough that
// a lane with nothing left gives way at once. A lane a higher one blocks
// waits as long as that lane's flag lasts (at most maxWait). Tokens unspent poolTTL after
// they became valid are dropped: a release is then at most 10 ms after
// its token's time, which bounds any second's releases to 1.01 times the
// rate, plus the burst.
const (
	DefaultLaneTTL = 100 * time.Millisecond
	// DefaultBacklogTTL: a lane with more records behind its ask comes back
	// once its reader has handed these out and fetched the next (a busy
	// worker can take hundreds of ms); its flag must outlast that, or a
	// lower lane of another worker takes tokens in between. The price: a
	// lower lane waits up to this long after a backlog's last ask.
	DefaultBacklogTTL = 500 * time.Millisecond
	maxWait           = 300 * time.Millisecond
	minWait           = time.Millisecond
	poolTTL           = 10 * time.Millisecond
	retryAfter        = 250 * time.Millisecond // after a failed lease (Redis unreachable)
	// ahead is how far into the bucket's future a lease may be granted:
	// room for three workers' next unit (a unit is 50 ms of the rate;
	// less, and workers asking together are refused half the time). A
	// lower lane's lease granted just before a higher lane asks is
	// released at most this long after, ahead of the higher lane's tokens.
	ahead = 150 * time.Millisecond
)

// Unit is the fewest tokens a lease grants of a budget (unless fewer were
// asked): a twentieth of a second of its rate, at most its burst. A
// budget's Redis calls are then about rate/Unit a second, shared by every
// worker: 0.05 s of the rate per call, at most 0.01 calls per release
// from a rate of 2,000/s with a burst of at least 100.
func Unit(b *Budget) int {
	u := int(math.Ceil(b.Rate / 20))
	return max(1, min(u, b.Burst))
}

// Pacer hands a worker's held intents the tokens of their budgets.
type Pacer struct {
	o   Options
	log *slog.Logger
	m   *metrics
	set atomic.Pointer[Set]

	mu      sync.Mutex
	buckets map[string]*bucket
	waiting map[string][]int64 // per budget, per lane: intents waiting (SetWaiting)
	// effective: per budget, its effective rate as Redis last said it.
	effective map[string]float64
}

// New returns a Pacer with no budgets (SetBudgets installs a policy's).
func New(o Options) (*Pacer, error) {
	if o.Leaser == nil {
		return nil, errors.New("pacing: a Leaser is required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = retry.Sleep
	}
	if o.LaneTTL <= 0 {
		o.LaneTTL = DefaultLaneTTL
	}
	if o.BacklogTTL <= 0 {
		o.BacklogTTL = DefaultBacklogTTL
	}
	p := &Pacer{o: o, log: o.Logger, buckets: map[string]*bucket{}}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.m = newMetrics(o.Registerer, o.Now)
	p.set.Store(&Set{})
	return p, nil
}

// SetBudgets makes s the budgets in use (a policy version's). A bucket's
// tokens and waiting lanes carry over; a budget that is gone releases what
// waits for it unpaced.
func (p *Pacer) SetBudgets(s *Set) {
	if s == nil {
		s = &Set{}
	}
	p.set.Store(s)
	p.m.setBudgets(s)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.buckets {
		b.mu.Lock()
		b.broadcast()
		b.mu.Unlock()
	}
}

// Budgets returns the budgets in use.
func (p *Pacer) Budgets() *Set { return p.set.Load() }

func (p *Pacer) bucket(name string) *bucket {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.buckets[name]
	if b == nil {
		b = &bucket{name: name, changed: make(chan struct{})}
		p.buckets[name] = b
	}
	return b
}

// Acquire waits until lane of budget may release, and returns how many of
// the n records waiting at its head may go now (1 to n). A budget the
// policy no longer has releases all n at once.
func (p *Pacer) Acquire(ctx context.Context, budget string, lane, n int) (int, error) {
	k, _, err := p.Release(ctx, budget, lane, n, false)
	return k, err
}

// Release is Acquire, and says when the tokens were taken: the release's
// time (within poolTTL of when the tokens became valid). more says that the
// lane's partition holds records beyond these n (a backlog): the lane's
// flag then lasts BacklogTTL, so that it keeps its precedence while its
// reader hands these out and fetches the next.
func (p *Pacer) Release(ctx context.Context, budget string, lane, n int, more bool) (k int, at time.Time, err error) {
	return p.release(ctx, budget, Place{Lane: lane}, n, more)
}

// ReleaseRetry is Release for the records of lane's retry topic: they go
// before the lane's own records on this worker, and take its place among
// the budget's lanes on every worker.
func (p *Pacer) ReleaseRetry(ctx context.Context, budget string, lane, n int, more bool) (k int, at time.Time, err error) {
	return p.release(ctx, budget, Place{Lane: lane, Retry: true}, n, more)
}

// slot is a place's precedence within a bucket (0 first): a lane's retry
// topic, then the lane, then the next lane's retry topic. Leases and the
// lane flags in Redis know only lanes (slot/2).
func slot(pl Place) int {
	if pl.Retry {
		return 2 * pl.Lane
	}
	return 2*pl.Lane + 1
}

func (p *Pacer) release(ctx context.Context, budget string, pl Place, n int, more bool) (k int, at time.Time, err error) {
	if n < 1 {
		return 0, time.Time{}, fmt.Errorf("pacing: acquire %d tokens of %s", n, budget)
	}
	lane := slot(pl)
	b := p.bucket(budget)
	b.mu.Lock()
	for len(b.waiting) <= lane {
		b.waiting = append(b.waiting, 0)
		b.backlog = append(b.backlog, 0)
	}
	b.waiting[lane] += n
	if more {
		b.backlog[lane]++
	}
	defer func() {
		// Lanes below this one may have waited for it to go: wake them.
		b.waiting[lane] -= n
		if more {
			b.backlog[lane]--
		}
		b.broadcast()
		b.mu.Unlock()
	}()
	for {
		bud, ok := p.set.Load().Budget(budget)
		if !ok {
			return n, p.o.Now(), nil
		}
		now := p.o.Now()
		if b.pool > 0 && now.Sub(b.poolAt) > poolTTL {
			// Leased for callers that went away: spent later (or given
			// back), they could take a later second above the rate.
			p.m.unused.WithLabelValues(budget).Add(float64(b.pool))
			b.pool = 0
		}
		if b.pool > 0 && !b.higher(lane) && lane <= b.poolLane {
			k := min(n, b.pool)
			b.pool -= k
			p.m.released.WithLabelValues(budget, bud.Lanes[min(lane/2, len(bud.Lanes)-1)].Name).Add(float64(k))
			return k, now, nil
		}
		if b.leasing || b.higher(lane) {
			if err := b.wait(ctx); err != nil {
				return 0, time.Time{}, err
			}
			continue
		}
		if err := p.lease(ctx, b, bud); err != nil {
			return 0, time.Time{}, err
		}
	}
}

// lease takes one lease for the lanes waiting here (mu held, released
// during the call), then, when nothing was granted, waits as long as the
// budget said before another caller may ask.
func (p *Pacer) lease(ctx context.Context, b *bucket, bud *Budget) error {
	lane, ask := b.top() // a slot
	unit := Unit(bud)
	ttl := p.o.LaneTTL
	if b.backlog[lane] > 0 {
		ttl = p.o.BacklogTTL
	}
	// What the top lane waits for (a backlog asks for a fetch's worth, so
	// a grant is a unit or more): more would be dropped unspent.
	req := LeaseRequest{Budget: bud.Name, Rate: bud.Rate, Burst: bud.Burst, Unit: unit,
		Ask: min(ask, bud.Burst), Credit: b.credit, Lane: lane / 2, TTLms: ttl.Milliseconds(),
		AheadMs: ahead.Milliseconds()}
	b.credit = 0
	b.leasing = true
	b.mu.Unlock()
	l, err := p.o.Leaser.Lease(ctx, req)
	var wait time.Duration
	switch {
	case err != nil:
		p.m.calls.WithLabelValues(bud.Name, "error").Inc()
		p.log.Warn("pacing: cannot lease tokens; held intents wait", "budget", bud.Name, "error", err)
		wait = retryAfter
	case l.Granted == 0:
		// Until the higher lane's turn ends (it is extended while that
		// lane goes on asking), or the bucket has room again.
		p.m.calls.WithLabelValues(bud.Name, "waited").Inc()
		wait = min(max(time.Duration(l.WaitMs)*time.Millisecond, minWait), maxWait)
	default:
		// Granted from the bucket's future: spent no earlier than that.
		p.m.calls.WithLabelValues(bud.Name, "granted").Inc()
		p.m.granted.WithLabelValues(bud.Name).Add(float64(l.Granted))
		wait = time.Duration(l.ValidMs) * time.Millisecond
	}
	if err == nil {
		p.setEffective(bud.Name, l.Effective)
	}
	var serr error
	if wait > 0 {
		serr = p.o.Sleep(ctx, wait)
	}
	b.mu.Lock()
	b.leasing = false
	if err != nil {
		b.credit += req.Credit // not returned: with the next call
	} else {
		now := p.o.Now()
		if b.pool > 0 && now.Sub(b.poolAt) > poolTTL {
			p.m.unused.WithLabelValues(bud.Name).Add(float64(b.pool))
			b.pool = 0
		}
		if b.pool > 0 && lane > b.poolLane {
			// A higher lane's leftovers are not this lane's.
			p.m.unused.WithLabelValues(bud.Name).Add(float64(b.pool))
			b.pool = 0
		}
		if b.pool == 0 || lane < b.poolLane {
			b.poolLane = lane // a lower lane's leftovers go to this one
		}
		b.pool += l.Granted
		b.poolAt = now
	}
	b.broadcast()
	return serr
}

// Unused counts n tokens of budget that released intents did not deliver
// (capped, deferred, cancelled after their release). They are not given
// back: a token given back would let a later second go above the rate.
func (p *Pacer) Unused(budget string, n int) {
	if _, ok := p.set.Load().Budget(budget); ok { // a budget gone has no series
		p.m.unused.WithLabelValues(budget).Add(float64(n))
	}
}

// Charge counts n sends of budget that never wait (exempt intents): the
// provider takes them from the same rate, so every lane waits for them.
func (p *Pacer) Charge(budget string, n int) {
	if _, ok := p.set.Load().Budget(budget); n <= 0 || !ok {
		return
	}
	b := p.bucket(budget)
	b.mu.Lock()
	b.credit -= n
	b.mu.Unlock()
	p.m.charged.WithLabelValues(budget).Add(float64(n))
}

// Held counts n intents written to a lane to wait for their budget.
func (p *Pacer) Held(budget, lane string, n int) {
	p.m.held.WithLabelValues(budget, lane).Add(float64(n))
}

// SetWaiting records how many intents wait in each lane of budget (the
// delay group's lag on its lane topics), for the drain estimates.
func (p *Pacer) SetWaiting(budget string, lanes []int64) {
	b, ok := p.set.Load().Budget(budget)
	if !ok {
		return
	}
	p.mu.Lock()
	if p.waiting == nil {
		p.waiting = map[string][]int64{}
	}
	p.waiting[budget] = lanes
	rate := p.rateOf(b)
	p.mu.Unlock()
	var ahead int64
	for i, l := range b.Lanes {
		if i >= len(lanes) {
			break
		}
		ahead += lanes[i]
		p.m.waiting.WithLabelValues(budget, l.Name).Set(float64(lanes[i]))
		p.m.drain.WithLabelValues(budget, l.Name).Set(float64(ahead) / rate)
	}
}

// Wait is how long an intent put in lane of budget now would wait: the
// intents waiting in its lane and the lanes above (as of the last
// SetWaiting), at the budget's effective rate.
func (p *Pacer) Wait(budget string, lane int) time.Duration {
	b, ok := p.set.Load().Budget(budget)
	if !ok {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var ahead int64
	for i, n := range p.waiting[budget] {
		if i <= lane {
			ahead += n
		}
	}
	return time.Duration(float64(ahead) / p.rateOf(b) * float64(time.Second))
}

// Expired counts an intent of budget's lane cancelled for its send-by.
func (p *Pacer) Expired(budget, lane string) {
	p.m.expired.WithLabelValues(budget, lane).Inc()
}
