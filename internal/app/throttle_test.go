package app_test

import (
	"context"
	"fmt"
	"slices"
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
// budget's effective rate, one in Redis for both workers, drops below
// the rate, and both workers show it (capper_pacing_rate_effective); a
// status passing on a 2 s Retry-After stops every release about that
// long. Every input still has one outcome, no second of releases goes
// above the rate, and the throttled sends stay counted (no refund).
func TestPacingThrottleFeedback(t *testing.T) {
	e := newE2E(t, "single")
	e.publish(3000, 3)
	cfg := e.paceConfig(pacePolicy)
	w1, w2 := e.start("w1", cfg), e.start("w2", cfg)
	e.produce(paceIntents(0, 1000, "blast", "push", "marketing", "normal"))

	throttle := func(from, n int, retryAfter string) {
		var ds []kafka.Message
		deadline := time.Now().Add(30 * time.Second)
		for len(ds) < from+n {
			if time.Now().After(deadline) {
				t.Fatalf("%d deliveries in 30 s, want %d", len(ds), from+n)
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
	}
	// Three waves a second apart: three cuts of a tenth (the rate drops
	// at most once a second), 200 -> about 146/s, climbing 4/s after.
	for wave := range 3 {
		throttle(20*wave, 20, "")
		time.Sleep(1100 * time.Millisecond)
	}
	lowered := func(w *worker) bool {
		g := metric(t, w, "capper_pacing_rate_effective", "budget", "push-fcm")
		return g > 0 && g < paceRate*0.9
	}
	deadline := time.Now().Add(20 * time.Second)
	for !lowered(w1) || !lowered(w2) {
		if time.Now().After(deadline) {
			t.Fatalf("capper_pacing_rate_effective: w1 %g, w2 %g; want both below 0.9 x %d", metric(t, w1, "capper_pacing_rate_effective"),
				metric(t, w2, "capper_pacing_rate_effective"), paceRate)
		}
		time.Sleep(20 * time.Millisecond)
	}
	leaser := &pacing.RedisLeaser{Client: e.redis.Client(), Prefix: cfg.Capping.KeyPrefix}
	if eff, err := leaser.Effective(context.Background(), &pacing.Budget{Name: "push-fcm", Rate: paceRate}); err != nil || eff.Rate >= paceRate*0.9 {
		t.Fatalf("the effective rate in Redis: %+v %v, want below 0.9 x %d", eff, err, paceRate)
	}
	// A Retry-After of 2 s: no release for about that long.
	retryFrom := time.Now()
	throttle(60, 1, `,"retry_after":2`)
	o := e.waitDrained(90*time.Second, w1, w2)
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
	if n := metric(t, w1, "capper_refunds_total", "result", "throttled") + metric(t, w2, "capper_refunds_total", "result", "throttled"); n != 61 {
		t.Errorf("capper_refunds_total{result=throttled} = %v, want the 61 statuses", n)
	}
	if n := metric(t, w1, "capper_pacing_throttled_total") + metric(t, w2, "capper_pacing_throttled_total"); n != 61 {
		t.Errorf("capper_pacing_throttled_total = %v, want 61", n)
	}
	if n := metric(t, w1, "capper_refunds_total", "result", "applied") + metric(t, w2, "capper_refunds_total", "result", "applied"); n != 0 {
		t.Errorf("%v throttled sends refunded; they stay counted", n)
	}
}
