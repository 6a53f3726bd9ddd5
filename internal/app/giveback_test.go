package app_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/control"
)

// stallPolicy: one send a day, whatever the campaign.
const stallPolicy = `
default_policy:
  limits:
    - {name: daily, window: 24h, max: 1}
`

// TestStopWhileRedisStalls: a batch is being decided when Redis stalls
// (SIGSTOP); campaign S is stopped while the batch waits; Redis resumes and
// runs what was queued. S's intents are cancelled and none stays counted:
// T's intents, right behind S's for a third of its users in the same
// batch, are delivered under the one-a-day limit (they wait for S's
// give-back), and so is every other S user's next intent later. K's intents, in the same batch and not stopped, are
// delivered once, without capper-duplicate (their first delivery, though
// Redis had recorded them in an attempt whose answer was lost).
func TestStopWhileRedisStalls(t *testing.T) {
	e := newE2E(t, "single")
	e.clock = newFastClock(1)
	e.publish(200, 7)
	cfg := e.holdConfig(stallPolicy)
	cfg.Kafka.Topics.Control = tControl
	c := newController(e, cfg)
	a := e.start("a", cfg)
	c.workers = []*worker{a}
	c.applied(c.set("warm", control.Active, "")) // the worker follows the control topic

	e.pauseRedis()
	var msgs []kafka.Message
	for u := range 60 { // S, then T for users 0-19: in one batch
		msgs = append(msgs, ctlIntents("s", "S", "email", "", u, u+1, 1, "")...)
		if u < 20 {
			msgs = append(msgs, ctlIntents("t", "T", "email", "", u, u+1, 1, "")...)
		}
	}
	e.produce(msgs)
	e.produce(ctlIntents("k", "K", "email", "", 60, 90, 1, ""))
	deadline := time.Now().Add(30 * time.Second)
	for metric(t, a, "capper_redis_retries_total") == 0 {
		if time.Now().After(deadline) {
			e.resumeRedis()
			t.Fatalf("no attempt failed in 30s with Redis stopped\n%s", tail(a.log.String(), 3000))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t0 := time.Now()
	stop := c.set("S", control.Stopped, "wrong audience")
	c.applied(stop)
	t.Logf("stop applied %s after the first failed attempt", time.Since(t0))
	// The attempt in flight when the stop was applied may still deliver
	// S (the documented exception); the next one, begun after it (a
	// backoff after that one failed), cancels S's intents.
	// (That attempt cancels S's intents, and their give-back, tried at
	// once, waits for Redis too: /readyz says so.)
	seen := metric(t, a, "capper_redis_retries_total")
	for metric(t, a, "capper_redis_retries_total") == seen {
		if _, body := a.get("/readyz"); strings.Contains(body, "give-backs") {
			break
		}
		if time.Now().After(deadline) {
			e.resumeRedis()
			t.Fatalf("attempts stopped failing with Redis stopped\n%s", tail(a.log.String(), 3000))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Duration(cfg.Worker.RetryMax) + 200*time.Millisecond)
	e.resumeRedis()
	t.Logf("redis resumed %s after the first failed attempt", time.Since(t0))
	o := e.waitDrained(2*time.Minute, a)
	if n := countCampaign(o.suppressed, "S", "cancelled"); n != 60 {
		t.Fatalf("%d of S's 60 intents cancelled, want all (the stop was applied before Redis answered)", n)
	}
	if n := countCampaign(o.deliveries, "K", "allowed"); n != 30 {
		t.Fatalf("%d of K's 30 intents delivered as allowed, want 30", n)
	}
	if n := countCampaign(o.deliveries, "T", "allowed"); n != 20 {
		t.Fatalf("%d of T's 20 intents delivered, want 20: S's cancelled intent before each must not count", n)
	}
	for _, m := range o.deliveries {
		if header(m, "capper-duplicate") != "" {
			t.Errorf("%s delivered with capper-duplicate %q: never delivered before", idOf(m), header(m, "capper-duplicate"))
		}
	}
	// Redis ran the queued scripts when it resumed: those it ran before
	// the give-back counted S's intents (given back: applied), those it
	// ran after it were voided and recorded nothing (unknown).
	applied, unknown := metric(t, a, "capper_given_back_total", "result", "applied"), metric(t, a, "capper_given_back_total", "result", "unknown")
	t.Logf("given back: %v applied, %v unknown", applied, unknown)
	if applied+unknown == 0 {
		t.Errorf("capper_given_back_total = 0: S's intents had attempts whose answers were lost, and were not given back")
	}

	// S's users: nothing of S counts, so N's intents are delivered, but to
	// those T reached; K's users: K's sends count, so N's are capped.
	e.produce(ctlIntents("n", "N", "email", "", 0, 90, 1, ""))
	o = e.waitDrained(2*time.Minute, a)
	allowed, capped := 0, 0
	for _, m := range append(o.deliveries, o.suppressed...) {
		id := idOf(m)
		if !strings.HasPrefix(id, "n-") {
			continue
		}
		var u, i int
		if _, err := fmt.Sscanf(id, "n-%d-%d", &u, &i); err != nil {
			t.Fatal(err)
		}
		switch d := header(m, "capper-decision"); {
		case u >= 20 && u < 60 && d != "allowed":
			t.Errorf("%s (a user of stopped S) was %s: an S intent that was never delivered stays counted", id, d)
		case (u < 20 || u >= 60) && d == "allowed":
			t.Errorf("%s (a user of T or K) was allowed: that delivery was not counted", id)
		case d == "allowed":
			allowed++
		default:
			capped++
		}
	}
	if allowed != 40 || capped != 50 {
		t.Errorf("N: %d allowed, %d not, want 40 and 50", allowed, capped)
	}
	e.verifyOrder(o)
}
