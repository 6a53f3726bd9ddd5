package pacing_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/testenv"
)

func budgetSet(t *testing.T, rate float64, burst int) *pacing.Set {
	t.Helper()
	s, err := pacing.NewSet([]pacing.Budget{{Name: "push", Rate: rate, Burst: burst, Where: pacing.Where{Channels: []string{"push"}},
		Lanes: []pacing.Lane{{Name: "urgent", MinPriority: capping.High}, {Name: "bulk"}}}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newPacer(t *testing.T, r *testenv.Redis, set *pacing.Set, laneTTL time.Duration, reg prometheus.Registerer) *pacing.Pacer {
	t.Helper()
	p, err := pacing.New(pacing.Options{Leaser: &pacing.RedisLeaser{Client: r.Client(), Prefix: "t"}, LaneTTL: laneTTL, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	p.SetBudgets(set)
	return p
}

// TestBudgetHoldsAcrossWorkers: three workers' pacers, three callers each,
// take a budget's tokens as fast as they can for a while. What they got
// together is at most the burst plus the rate times the time it took, and
// at least most of it (the callers never stopped asking), at a cost of at
// most one Redis call per Unit tokens (plus the calls that waited).
func TestBudgetHoldsAcrossWorkers(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	const rate, burst = 1000, 100
	set := budgetSet(t, rate, burst)
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	got := 0
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range 3 {
		var wreg prometheus.Registerer = prometheus.NewRegistry()
		if w == 0 {
			wreg = reg
		}
		p := newPacer(t, r, set, 0, wreg)
		for range 3 {
			wg.Go(func() {
				for {
					k, err := p.Acquire(ctx, "push", 1, 60) // a backlog: a fetch's worth at the gate
					if err != nil {
						return
					}
					mu.Lock()
					got += k
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	if most := burst + int(rate*elapsed.Seconds()); got > most {
		t.Errorf("%d tokens in %s; the budget allows %d (burst %d, rate %d/s)", got, elapsed, most, burst, rate)
	}
	if got < rate/2 {
		t.Errorf("%d tokens in %s: the callers were starved (rate %d/s)", got, elapsed, rate)
	}
	t.Logf("%d tokens in %s (rate %d/s, burst %d); worker 0's calls: %v granted, %v waited", got, elapsed, rate, burst,
		testutil.ToFloat64(counter(t, reg, "granted")), testutil.ToFloat64(counter(t, reg, "waited")))
}

func counter(t *testing.T, reg *prometheus.Registry, result string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
	for _, mf := range mfs {
		if mf.GetName() != "capper_pacing_lease_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					c.Add(m.GetCounter().GetValue())
				}
			}
		}
	}
	return c
}

// TestHigherLaneGoesFirstOnEveryWorker: while a worker's urgent lane keeps
// asking, another worker's bulk lane gets nothing, though the bucket is
// full; once the urgent lane stops asking, the bulk lane is served.
func TestHigherLaneGoesFirstOnEveryWorker(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	set := budgetSet(t, 1000, 500)
	const ttl = 2 * time.Second
	a, b := newPacer(t, r, set, ttl, nil), newPacer(t, r, set, ttl, nil)
	ctx, cancel0 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel0()
	if k, err := a.Acquire(ctx, "push", 0, 1); err != nil || k != 1 {
		t.Fatalf("urgent: %d tokens, %v", k, err)
	}
	short, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	defer cancel()
	if k, err := b.Acquire(short, "push", 1, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("bulk on another worker got %d tokens (%v) while the urgent lane's turn lasted", k, err)
	}
	long, cancel2 := context.WithTimeout(ctx, 10*time.Second)
	defer cancel2()
	if k, err := b.Acquire(long, "push", 1, 1); err != nil || k != 1 {
		t.Fatalf("bulk after the urgent lane's turn: %d tokens, %v", k, err)
	}
}

// TestChargeAndCredit: exempt sends charged to a budget take its tokens
// (the lanes wait for them); tokens credited back are there again.
func TestChargeAndCredit(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	l := &pacing.RedisLeaser{Client: r.Client(), Prefix: "t"}
	ctx := context.Background()
	req := pacing.LeaseRequest{Budget: "sms", Rate: 1, Burst: 50, Unit: 1, Lane: 0, TTLms: 1}
	charge := req
	charge.Credit = -50
	if _, err := l.Lease(ctx, charge); err != nil {
		t.Fatal(err)
	}
	ask := req
	ask.Ask = 10
	got, err := l.Lease(ctx, ask)
	if err != nil {
		t.Fatal(err)
	}
	if got.Granted != 0 || got.WaitMs < 500 {
		t.Fatalf("after 50 exempt sends on a full bucket of 50: %+v; want nothing granted and a wait of about a second", got)
	}
	credit := ask
	credit.Credit = 20
	if got, err = l.Lease(ctx, credit); err != nil {
		t.Fatal(err)
	}
	if got.Granted != 10 {
		t.Fatalf("after 20 tokens credited back: %+v; want the 10 asked for", got)
	}
}

// TestLeaseWhileRedisIsDown: with Redis gone nothing is released (the
// failed calls are counted); once it is back, the waiting lane is served.
func TestLeaseWhileRedisIsDown(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	reg := prometheus.NewRegistry()
	p := newPacer(t, r, budgetSet(t, 1000, 100), 0, reg)
	r.Kill()
	short, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	if k, err := p.Acquire(short, "push", 1, 5); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with Redis down: %d tokens, %v", k, err)
	}
	if n := testutil.ToFloat64(counter(t, reg, "error")); n < 1 {
		t.Fatalf("%v failed lease calls counted", n)
	}
	r.Restart()
	long, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	if k, err := p.Acquire(long, "push", 1, 5); err != nil || k < 1 {
		t.Fatalf("after Redis came back: %d tokens, %v", k, err)
	}
}

// TestMatch: the first budget that covers an intent is its budget, and its
// lane the first whose min_priority the intent reaches; exempt categories
// and uncovered intents are not held.
func TestMatch(t *testing.T) {
	s, err := pacing.NewSet([]pacing.Budget{
		{Name: "push-fcm", Rate: 10, Burst: 1, Where: pacing.Where{Channels: []string{"push"}, Routes: []string{"fcm"}},
			Lanes: []pacing.Lane{{Name: "urgent", MinPriority: capping.High}, {Name: "bulk"}}},
		{Name: "push", Rate: 10, Burst: 1, Where: pacing.Where{Channels: []string{"push"}}, Lanes: []pacing.Lane{{Name: pacing.DefaultLane}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	s = s.WithExempt([]string{"transactional"})
	for _, c := range []struct {
		channel, route string
		p              capping.Priority
		want           pacing.Place
		ok             bool
	}{
		{"push", "fcm", capping.High, pacing.Place{Budget: 0, Lane: 0}, true},
		{"push", "fcm", 90, pacing.Place{Budget: 0, Lane: 0}, true},
		{"push", "fcm", capping.Normal, pacing.Place{Budget: 0, Lane: 1}, true},
		{"push", "apns", capping.High, pacing.Place{Budget: 1, Lane: 0}, true},
		{"push", "", capping.Low, pacing.Place{Budget: 1, Lane: 0}, true},
		{"email", "fcm", capping.High, pacing.Place{}, false},
	} {
		got, ok := s.Match(pacing.Intent{Channel: c.channel, Route: c.route, Priority: c.p})
		if got != c.want || ok != c.ok {
			t.Errorf("Match(%s, %q, %s) = %+v %v, want %+v %v", c.channel, c.route, c.p, got, ok, c.want, c.ok)
		}
	}
	if !s.Exempt("transactional") || s.Exempt("marketing") {
		t.Error("Exempt: transactional is exempt, marketing is not")
	}
	if got := s.Topics("lanes"); len(got) != 3 || got[0] != "lanes.push-fcm.urgent" || got[2] != "lanes.push.marketing" {
		t.Errorf("Topics: %v", got)
	}
	if got := s.RetryTopics("lanes"); len(got) != 3 || got[0] != "lanes.push-fcm.urgent.retry" || got[2] != "lanes.push.marketing.retry" {
		t.Errorf("RetryTopics: %v", got)
	}
	for topic, want := range map[string]pacing.Place{"lanes.push-fcm.urgent": {Budget: 0, Lane: 0},
		"lanes.push-fcm.urgent.retry": {Budget: 0, Lane: 0, Retry: true}, "lanes.push.marketing.retry": {Budget: 1, Lane: 0, Retry: true}} {
		if got, ok := s.Of("lanes", topic); !ok || got != want {
			t.Errorf("Of(%s) = %+v %v, want %+v", topic, got, ok, want)
		}
	}
	if _, ok := s.Of("lanes", "lanes.push.retry"); ok {
		t.Error("Of(lanes.push.retry): no such lane")
	}
}

// bulkWaiting is a pacer whose budget (8/s, burst 1) has spent its one
// token (the next comes in 125 ms), and a bulk caller (lane 1) that leases
// that next token and waits for it; its answer comes on the channel.
func bulkWaiting(t *testing.T, ctx context.Context) (*pacing.Pacer, chan error) {
	t.Helper()
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	p := newPacer(t, r, budgetSet(t, 8, 1), 0, nil)
	if _, err := p.Acquire(ctx, "push", 1, 1); err != nil {
		t.Fatal(err)
	}
	bulk := make(chan error, 1)
	go func() {
		_, err := p.Acquire(ctx, "push", 1, 1)
		bulk <- err
	}()
	time.Sleep(30 * time.Millisecond)
	return p, bulk
}

// TestRetryBeforeItsLane: a record of a lane's retry topic (a throttled
// send handed back) takes the bucket's next token before the lane's own
// record that asked first, as a higher lane would.
func TestRetryBeforeItsLane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, bulk := bulkWaiting(t, ctx)
	if k, _, err := p.ReleaseRetry(ctx, "push", 1, 1, false); err != nil || k != 1 {
		t.Fatalf("retry: %d, %v", k, err)
	}
	select {
	case err := <-bulk:
		t.Fatalf("the lane's own record went first (%v): the retry did not", err)
	default:
	}
	if err := <-bulk; err != nil {
		t.Fatalf("the lane's own record, after the retry: %v", err)
	}
}

// TestLowerLaneWokenAfterHigherLeaves: a bulk caller leasing a token not
// valid yet, an urgent caller of the same worker arriving meanwhile: the
// urgent caller takes the token, and the bulk caller, which gave way to it,
// is woken when it has gone and gets the next one (it was never woken
// again: the soak's bulk lanes stopped releasing after the last urgent
// release).
func TestLowerLaneWokenAfterHigherLeaves(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, bulk := bulkWaiting(t, ctx)
	if _, err := p.Acquire(ctx, "push", 0, 1); err != nil {
		t.Fatalf("urgent: %v", err)
	}
	if err := <-bulk; err != nil {
		t.Fatalf("bulk, after the urgent caller took its token and went: %v", err)
	}
}

// TestLeftoversStayWithTheirLane: the tokens one worker leased for its
// urgent lane (a lease grants at least a unit) are not spent by its bulk
// lane while the urgent lane's turn lasts, even when no urgent record
// waits at this moment (its reader is between fetches).
func TestLeftoversStayWithTheirLane(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	set := budgetSet(t, 1000, 500) // a unit is 50 tokens
	p := newPacer(t, r, set, 2*time.Second, nil)
	ctx, cancel0 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel0()
	if k, err := p.Acquire(ctx, "push", 0, 1); err != nil || k != 1 {
		t.Fatalf("urgent: %d tokens, %v", k, err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if k, err := p.Acquire(short, "push", 1, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("bulk got %d of the urgent lane's leftover tokens (%v) while its turn lasted", k, err)
	}
	if k, err := p.Acquire(ctx, "push", 0, 1); err != nil || k != 1 {
		t.Fatalf("urgent again: %d tokens, %v", k, err)
	}
}

// TestBacklogKeepsTheLanesTurn: an urgent lane whose partition holds more
// than it asked for keeps its turn for BacklogTTL (its reader hands the
// records out and fetches the next before it asks again); one with nothing
// behind its ask gives way after LaneTTL.
func TestBacklogKeepsTheLanesTurn(t *testing.T) {
	for _, more := range []bool{true, false} {
		t.Run(map[bool]string{true: "backlog", false: "last records"}[more], func(t *testing.T) {
			r := testenv.StartRedis(t, testenv.RedisOptions{})
			set := budgetSet(t, 1000, 500)
			mk := func() *pacing.Pacer {
				p, err := pacing.New(pacing.Options{Leaser: &pacing.RedisLeaser{Client: r.Client(), Prefix: "t"},
					LaneTTL: 50 * time.Millisecond, BacklogTTL: 3 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				p.SetBudgets(set)
				return p
			}
			a, b := mk(), mk()
			ctx, cancel0 := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel0()
			if k, _, err := a.Release(ctx, "push", 0, 1, more); err != nil || k != 1 {
				t.Fatalf("urgent: %d tokens, %v", k, err)
			}
			short, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
			defer cancel()
			k, err := b.Acquire(short, "push", 1, 1)
			switch {
			case more && !errors.Is(err, context.DeadlineExceeded):
				t.Fatalf("bulk on another worker got %d tokens (%v) while the urgent lane had a backlog", k, err)
			case !more && (err != nil || k != 1):
				t.Fatalf("bulk after the urgent lane's last records: %d tokens, %v", k, err)
			}
		})
	}
}
