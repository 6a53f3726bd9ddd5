package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/app"
)

// waitPolicy defers a user's second push within 10 minutes; a snooze
// waits at most an hour.
const waitPolicy = `
default_policy:
  limits:
    - {name: gap, window: 10m, max: 1, on_cap: defer, max_defer: 2h}
user_limits:
  max_defer: 1h
`

// TestSnoozeReachesWaitingIntents: a snooze reaches the user's intents
// wherever they wait. With two workers, intents deferred in the delay
// tiers are decided by it when they come back (a long snooze cancels them,
// a short one defers them to its end); and intents written while no
// worker ran, snoozed while none ran, are decided by it too: a worker
// applies the user-limits topic before its first decision.
func TestSnoozeReachesWaitingIntents(t *testing.T) {
	e := newE2E(t, "single")
	e.clock = newFastClock(60) // a real second is a minute
	e.publish(100, 7)
	cfg := e.userConfig(waitPolicy)
	a, b := e.start("a", cfg), e.start("b", cfg)

	// The delay tiers: each user's second push waits for the gap.
	var msgs []kafka.Message
	for u := 60; u < 70; u++ {
		msgs = append(msgs, userIntents("t", u, "push", "push")...)
	}
	e.produce(msgs)
	waitFor(t, 30*time.Second, func() bool { return len(e.read().deliveries) >= 10 })
	long, short := e.clock.Now().Add(30*24*time.Hour), e.clock.Now().Add(20*time.Minute)
	for u := uint64(60); u < 70; u++ {
		until := long
		if u >= 65 {
			until = short
		}
		e.setUser(cfg, u, app.UserChange{SnoozeUntil: until})
	}
	o := e.waitDrained(90*time.Second, a, b)
	for u := 60; u < 70; u++ {
		first, m0 := o.outcomeOf(fmt.Sprintf("t-%d-0", u))
		if first != tDel {
			t.Fatalf("user %d's first push: %s, want delivered before the snooze", u, first)
		}
		topic, m := o.outcomeOf(fmt.Sprintf("t-%d-1", u))
		switch {
		case u < 65 && (topic != tSup || header(m, "capper-reason") != "snooze-too-long"):
			t.Errorf("user %d's deferred push, snoozed for 30 days: %s %s %q, want cancelled (snooze-too-long)", u, topic, header(m, "capper-decision"), header(m, "capper-reason"))
		case u >= 65 && topic != tDel:
			t.Errorf("user %d's deferred push, snoozed for 20 minutes: %s %s %q, want delivered after the snooze", u, topic, header(m, "capper-decision"), header(m, "capper-reason"))
		case u >= 65 && decidedAt(t, m).Before(short.Truncate(time.Second)):
			t.Errorf("user %d's deferred push delivered at %s, before the snooze's end %s (first at %s)", u, header(m, "capper-decided-at"), short.Format(time.RFC3339), header(m0, "capper-decided-at"))
		}
	}

	// The input backlog: written and snoozed while no worker runs.
	for _, w := range []*worker{a, b} {
		if err := w.stop(t); err != nil {
			t.Fatal(err)
		}
	}
	msgs = nil
	for u := 70; u < 80; u++ {
		msgs = append(msgs, userIntents("b", u, "email")...)
	}
	e.produce(msgs)
	for u := uint64(70); u < 80; u++ {
		if _, err := app.SetUser(context.Background(), cfg, u, app.UserChange{SnoozeUntil: long}, app.SetUserOptions{}, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
	}
	c := e.start("c", cfg)
	o = e.waitDrained(60*time.Second, c)
	for u := 70; u < 80; u++ {
		if topic, m := o.outcomeOf(fmt.Sprintf("b-%d-0", u)); topic != tSup || header(m, "capper-reason") != "snooze-too-long" {
			t.Errorf("user %d's intent in the backlog, snoozed while no worker ran: %s %s %q, want cancelled (snooze-too-long)", u, topic, header(m, "capper-decision"), header(m, "capper-reason"))
		}
	}
}
