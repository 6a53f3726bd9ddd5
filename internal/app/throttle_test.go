package app_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/pacing"
)

// TestPacingThrottleFeedback: two workers drain a 1000-push blast over a
// budget of 200/s while the delivery service reports sends its provider
// throttled (status throttled, with the delivery's capper-lane). The
// budget's effective rate, one in Redis for every worker, drops below the
// rate, and the workers show it (capper_pacing_rate_effective): also a
// worker started in place of a stopped one, and through a Redis outage.
// A status passing on a 2 s Retry-After stops every release about that
// long. Every input still has one outcome, no second of releases goes
// above the rate, and the throttled sends stay counted (no refund).
func TestPacingThrottleFeedback(t *testing.T) {
	e := newE2E(t, "single")
	e.publish(3000, 3)
	cfg := e.paceConfig(pacePolicy)
	w1, w2 := e.start("w1", cfg), e.start("w2", cfg)
	e.produce(paceIntents(0, 1000, "blast", "push", "marketing", "normal"))

	var mu sync.Mutex
	statuses := 0
	throttle := func(from, n int, retryAfter string) {
		var ds []kafka.Message
		deadline := time.Now().Add(30 * time.Second)
		for len(ds) < from+n {
			if time.Now().After(deadline) {
				t.Errorf("%d deliveries in 30 s, want %d", len(ds), from+n)
				return
			}
			time.Sleep(50 * time.Millisecond)
			ds = e.read().deliveries
		}
		var st []kafka.Message
		for _, m := range ds[from : from+n] {
			st = append(st, kafka.Message{Key: m.Key, Value: fmt.Appendf(nil, `{"id":%q,"user_id":%s,"status":"throttled","at":%q,"lane":%q%s}`,
				idOf(m), m.Key, time.Now().UTC().Format(time.RFC3339), header(m, dispatch.HeaderLane), retryAfter)})
		}
		e.kafka.Produce(t, tStatus, st)
		mu.Lock()
		statuses += n
		mu.Unlock()
	}
	// A wave of 10 throttled answers every 1.1 s while the rest runs: the
	// rate is cut a tenth a wave (at most once a second), to 20/s at least
	// (min_rate's default).
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for wave := 0; ; wave++ {
			throttle(10*wave, 10, "")
			select {
			case <-done:
				return
			case <-time.After(1100 * time.Millisecond):
			}
		}
	})
	lowered := func(ws ...*worker) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for _, w := range ws {
			for {
				if g := metric(t, w, "capper_pacing_rate_effective", "budget", "push-fcm"); g > 0 && g < paceRate*0.9 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: capper_pacing_rate_effective %g, want below 0.9 x %d", w.name, metric(t, w, "capper_pacing_rate_effective"), paceRate)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	lowered(w1, w2)
	leaser := &pacing.RedisLeaser{Client: e.redis.Client(), Prefix: cfg.Capping.KeyPrefix}
	effective := func() float64 {
		eff, err := leaser.Effective(context.Background(), &pacing.Budget{Name: "push-fcm", Rate: paceRate})
		if err != nil {
			t.Fatal(err)
		}
		return eff.Rate
	}
	if eff := effective(); eff >= paceRate*0.9 {
		t.Fatalf("the effective rate in Redis: %g, want below 0.9 x %d", eff, paceRate)
	}
	// A worker stopped and another started in its place: the new one
	// leases at the lowered rate (no worker holds it).
	if err := w1.stop(t); err != nil {
		t.Fatal(err)
	}
	w3 := e.start("w3", cfg)
	lowered(w3)
	// A Redis outage while it is lowered: it stays lowered after.
	e.pauseRedis()
	time.Sleep(2 * time.Second)
	e.resumeRedis()
	if eff := effective(); eff >= paceRate*0.9 {
		t.Fatalf("the effective rate after a Redis outage: %g, want still below 0.9 x %d", eff, paceRate)
	}
	close(done)
	wg.Wait()
	// A Retry-After of 2 s: no release for about that long.
	retryFrom := time.Now()
	throttle(0, 1, `,"retry_after":2`)
	o := e.waitDrained(90*time.Second, w2, w3)
	e.verify(o, cfg, false)

	var released []time.Time
	for _, m := range o.deliveries {
		released = append(released, headerTime(t, m, dispatch.HeaderReleasedAt))
	}
	slices.SortFunc(released, time.Time.Compare)
	if most, _ := audit.BusiestSecond(released); most > int(paceRate*1.01)+paceBurst {
		t.Errorf("%d releases within one second; the budget allows %d", most, int(paceRate*1.01)+paceBurst)
	}
	var gap time.Duration
	for i := 1; i < len(released); i++ {
		if released[i].After(retryFrom) {
			gap = max(gap, released[i].Sub(released[i-1]))
		}
	}
	// (Tokens leased ahead before the report, at most 150 ms of them, are
	// still released.)
	if gap < 1500*time.Millisecond {
		t.Errorf("the longest pause between releases after the Retry-After was reported: %s, want about 2 s", gap)
	}
	sum := func(name string, labels ...string) float64 {
		return metric(t, w1, name, labels...) + metric(t, w2, name, labels...) + metric(t, w3, name, labels...)
	}
	if n := sum("capper_refunds_total", "result", "throttled"); n != float64(statuses) {
		t.Errorf("capper_refunds_total{result=throttled} = %v, want the %d statuses", n, statuses)
	}
	if n := sum("capper_pacing_throttled_total"); n != float64(statuses) {
		t.Errorf("capper_pacing_throttled_total = %v, want %d", n, statuses)
	}
	if n := sum("capper_refunds_total", "result", "applied"); n != 0 {
		t.Errorf("%v throttled sends refunded; they stay counted", n)
	}
}
