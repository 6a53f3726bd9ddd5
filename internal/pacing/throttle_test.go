package pacing_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/testenv"
)

// throttleSet is one budget of 1,000/s (burst 100) whose effective rate
// may drop to 100/s.
func throttleSet(t *testing.T) *pacing.Set {
	t.Helper()
	s, err := pacing.NewSet([]pacing.Budget{{Name: "push", Rate: 1000, Burst: 100, MinRate: 100, Where: pacing.Where{Channels: []string{"push"}},
		Lanes: []pacing.Lane{{Name: "urgent", MinPriority: capping.High}, {Name: "bulk"}}}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// redisMs is Redis' clock in ms (what the scripts read).
func redisMs(t *testing.T, r *testenv.Redis) int64 {
	t.Helper()
	now, err := r.Client().Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

func effective(t *testing.T, l *pacing.RedisLeaser, b *pacing.Budget) pacing.Effective {
	t.Helper()
	e, err := l.Effective(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestThrottleFeedback: one worker's report of a throttled send lowers
// the budget's effective rate for every worker (kept in Redis with its
// tokens), by a tenth at most once a second and never below min_rate; it
// climbs back by a fiftieth of the rate a second up to the rate; the
// leases fill the bucket at it; a Retry-After holds every lane; a worker
// started later (one restarted after a kill) leases at the lowered rate.
func TestThrottleFeedback(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	ctx := context.Background()
	set := throttleSet(t)
	bud, _ := set.Budget("push")
	leaser := &pacing.RedisLeaser{Client: r.Client(), Prefix: "t"}
	key := leaser.Key("push")
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a, b := newPacer(t, r, set, 0, regA), newPacer(t, r, set, 0, regB)

	if e := effective(t, leaser, bud); e.Rate != 1000 || e.HeldFor != 0 {
		t.Fatalf("before any throttle: %+v, want the rate and no hold", e)
	}
	if ok, err := a.Throttled(ctx, "push", 0); !ok || err != nil {
		t.Fatalf("report: %v %v", ok, err)
	}
	e := effective(t, leaser, bud)
	if e.Rate < 900 || e.Rate > 910 {
		t.Fatalf("after a throttled send: effective %g/s, want 900 (a tenth less; climbing 20/s since)", e.Rate)
	}
	// Worker B, which reported nothing, leases at it and shows it.
	if k, err := b.Acquire(ctx, "push", 1, 1); err != nil || k != 1 {
		t.Fatalf("B's acquire: %d %v", k, err)
	}
	if g := gauge(t, regB, "capper_pacing_rate_effective"); g < 900 || g > 910 {
		t.Fatalf("B's capper_pacing_rate_effective %g, want about 900", g)
	}
	if n := testutil.ToFloat64(metricVec(t, regA, "capper_pacing_throttled_total")); n != 1 {
		t.Fatalf("A's capper_pacing_throttled_total %g, want 1", n)
	}

	// Within a second of the cut, another report cuts nothing: the
	// provider's answers to one burst of sends are one signal. (Its time
	// is moved ahead rather than waited for.)
	r.Client().HSet(ctx, key, "ed", redisMs(t, r)+5000)
	res, err := leaser.Throttle(ctx, pacing.ThrottleRequest{Budget: "push", Rate: 1000, MinRate: 100})
	if err != nil || res.Cut || res.Effective < 900 || res.Effective > 910 {
		t.Fatalf("a report within a second of the last cut: %+v %v, want no cut", res, err)
	}
	// Cut after cut, it stops at min_rate.
	for range 40 {
		r.Client().HDel(ctx, key, "ed")
		if res, err = leaser.Throttle(ctx, pacing.ThrottleRequest{Budget: "push", Rate: 1000, MinRate: 100}); err != nil || !res.Cut {
			t.Fatalf("a report a second after the last cut: %+v %v, want a cut", res, err)
		}
	}
	if res.Effective < 100 || res.Effective > 102 {
		t.Fatalf("after 40 cuts: %g/s, want the min rate, 100", res.Effective)
	}
	// The bucket fills at the effective rate: 10 tokens from an empty
	// bucket are valid in 100 ms at 100/s (10 ms at the rate), less what
	// it filled between the emptying and the lease (a loaded machine's
	// milliseconds: Redis's clock, read after the lease).
	emptied := redisMs(t, r)
	r.Client().HSet(ctx, key, "tok", "0", "ts", emptied)
	l, err := leaser.Lease(ctx, pacing.LeaseRequest{Budget: "push", Rate: 1000, Burst: 100, Ask: 10, Unit: 10, Lane: 1, TTLms: 100, AheadMs: 1000})
	late := redisMs(t, r) - emptied
	if err != nil || l.Granted != 10 || l.ValidMs < 90-late || l.ValidMs > 101 || l.Effective < 100 || l.Effective > 102 {
		t.Fatalf("a lease at 100/s %d ms after the bucket was emptied: %+v %v, want 10 tokens valid in about 100 ms less that", late, l, err)
	}
	// It climbs back 20/s a second: 10 s after it was 500/s, 700/s.
	r.Client().HSet(ctx, key, "eff", "500", "eat", redisMs(t, r)-10000)
	if e := effective(t, leaser, bud); e.Rate < 700 || e.Rate > 710 {
		t.Fatalf("10 s after 500/s: %g/s, want 700", e.Rate)
	}
	// A worker restarted now (a new pacer, nothing in memory) leases at it.
	c := newPacer(t, r, set, 0, prometheus.NewRegistry())
	if l, err := leaser.Lease(ctx, pacing.LeaseRequest{Budget: "push", Rate: 1000, Burst: 100, Ask: 1, Unit: 1, Lane: 1, TTLms: 100, AheadMs: 1000}); err != nil || l.Effective < 700 || l.Effective > 710 {
		t.Fatalf("a lease after the climb: %+v %v", l, err)
	}
	if k, err := c.Acquire(ctx, "push", 1, 1); err != nil || k != 1 {
		t.Fatalf("a restarted worker's acquire: %d %v", k, err)
	}
	// Back at the rate, the fields go: the budget leases at its rate.
	r.Client().HSet(ctx, key, "eff", "990", "eat", redisMs(t, r)-10000)
	if l, err := leaser.Lease(ctx, pacing.LeaseRequest{Budget: "push", Rate: 1000, Burst: 100, Ask: 1, Unit: 1, Lane: 1, TTLms: 100, AheadMs: 1000}); err != nil || l.Effective != 1000 {
		t.Fatalf("a lease once climbed back: %+v %v, want the rate", l, err)
	}
	if n := r.Client().HExists(ctx, key, "eff").Val(); n {
		t.Fatal("the effective rate is still kept at the rate")
	}

	// A Retry-After holds every lane: nothing granted until it ends.
	if ok, err := a.Throttled(ctx, "push", 3*time.Second); !ok || err != nil {
		t.Fatalf("report with a Retry-After: %v %v", ok, err)
	}
	if e := effective(t, leaser, bud); e.HeldFor <= 2*time.Second || e.HeldFor > 3*time.Second {
		t.Fatalf("after a 3 s Retry-After: held for %s", e.HeldFor)
	}
	for lane := range 2 {
		l, err := leaser.Lease(ctx, pacing.LeaseRequest{Budget: "push", Rate: 1000, Burst: 100, Ask: 1, Unit: 1, Lane: lane, TTLms: 100, AheadMs: 1000})
		// (The lower lane waits for the higher one's turn too: 100 ms more.)
		if err != nil || l.Granted != 0 || l.WaitMs <= 2000 || l.WaitMs > 3100 {
			t.Fatalf("lane %d during a Retry-After: %+v %v, want nothing granted, wait about 3 s", lane, l, err)
		}
	}
	// A budget the policy does not have: nothing reported.
	if ok, err := a.Throttled(ctx, "sms", 0); ok || err != nil {
		t.Fatalf("an unknown budget: %v %v", ok, err)
	}
}

// TestThrottleWhileRedisIsDown: a report Redis does not answer is an
// error (it may still be applied once Redis runs it: a cut either way);
// the budget's rate stays as Redis has it, and the next report after Redis
// came back cuts it.
func TestThrottleWhileRedisIsDown(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	ctx := context.Background()
	set := throttleSet(t)
	bud, _ := set.Budget("push")
	leaser := &pacing.RedisLeaser{Client: r.Client(), Prefix: "t"}
	// The worker's clock: it reports a budget at most every 100 ms.
	var mu sync.Mutex
	now := time.Now()
	p, err := pacing.New(pacing.Options{Leaser: leaser, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	if err != nil {
		t.Fatal(err)
	}
	p.SetBudgets(set)
	later := func() { mu.Lock(); now = now.Add(time.Second); mu.Unlock() }
	if _, err := p.Throttled(ctx, "push", 0); err != nil {
		t.Fatal(err)
	}
	later()
	r.Pause()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if ok, err := p.Throttled(short, "push", 0); !ok || err == nil {
		t.Fatalf("a report while Redis does not answer: %v %v, want an error", ok, err)
	}
	r.Resume()
	before := effective(t, leaser, bud)
	if before.Rate >= 1000 {
		t.Fatalf("after the outage: %g/s, want the cut kept", before.Rate)
	}
	r.Client().HDel(ctx, leaser.Key("push"), "ed") // as a second later
	later()
	if _, err := p.Throttled(ctx, "push", 0); err != nil {
		t.Fatal(err)
	}
	if e := effective(t, leaser, bud); e.Rate < 0.9*before.Rate || e.Rate > 0.9*before.Rate+10 {
		t.Fatalf("a report after the outage: %g/s, want a tenth less than %g", e.Rate, before.Rate)
	}
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return testutil.ToFloat64(metricVec(t, reg, name))
}

// metricVec is the one series of name in reg.
func metricVec(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			v := mf.GetMetric()[0]
			c := prometheus.NewGauge(prometheus.GaugeOpts{Name: name})
			switch {
			case v.Gauge != nil:
				c.Set(v.Gauge.GetValue())
			case v.Counter != nil:
				c.Set(v.Counter.GetValue())
			}
			return c
		}
	}
	t.Fatalf("no single series %s", name)
	return nil
}
