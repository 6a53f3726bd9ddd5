package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/control"
)

const tParked = "send-intents-parked"

// topicLen is how many records a topic holds.
func (e *e2e) topicLen(topic string) int {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	msgs, err := audit.ReadTopic(ctx, e.kafka.Addrs, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(msgs)
}

// TestParkedWaitsOnce: a paused campaign's intents wait in the parked
// topic, written once, however many first-tier delays the pause lasts
// (without it they would come back every minute); a resume hands them
// back and they are delivered; an intent still paused when another
// campaign is resumed is written once more, and that is all. Two workers.
func TestParkedWaitsOnce(t *testing.T) {
	e := newE2E(t, "single")
	e.clock = newFastClock(60) // the first tier's minute is a second
	e.publish(1000, 7)
	if err := e.kafka.Cluster.CreateTopic(tParked, 4, nil); err != nil {
		t.Fatal(err)
	}
	const pol = `
default_policy:
  limits:
    - {name: per-minute, window: 1m, max: 5}
`
	cfg := e.holdConfig(pol)
	cfg.Kafka.Topics.Control, cfg.Kafka.Topics.Parked = tControl, tParked
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c := newController(e, cfg)
	a, b := e.start("a", cfg), e.start("b", cfg)
	c.workers = []*worker{a, b}
	c.applied(c.set("P", control.Paused, "copy review"))
	e.produce(ctlIntents("p", "P", "email", "", 0, 200, 1, ""))
	waitFor(t, 30*time.Second, func() bool { return e.topicLen(tParked) >= 200 })
	time.Sleep(3 * time.Second) // three first-tier delays on the workers' clock
	if n, tier := e.topicLen(tParked), e.topicLen(tDelay1m); n != 200 || tier != 0 {
		t.Fatalf("after three tier delays the parked topic holds %d records and the first tier %d; want the 200 paused intents once, and none", n, tier)
	}
	c.applied(c.set("Q", control.Paused, "legal"))
	e.produce(ctlIntents("q", "Q", "email", "", 200, 300, 1, ""))
	waitFor(t, 30*time.Second, func() bool { return e.topicLen(tParked) >= 300 })
	c.applied(c.set("P", control.Active, ""))
	e.waitOutcomes(e.inputs-100, a, b)
	waitFor(t, 30*time.Second, func() bool { return e.topicLen(tParked) >= 400 })
	c.applied(c.set("Q", control.Active, ""))
	o := e.waitDrained(60*time.Second, a, b)
	e.verifyHeld(o, holdRules(t, pol))
	if p, q := countCampaign(o.deliveries, "P", "allowed"), countCampaign(o.deliveries, "Q", "allowed"); p != 200 || q != 100 {
		t.Errorf("delivered %d of P's 200 and %d of Q's 100", p, q)
	}
	time.Sleep(time.Second)
	if n := e.topicLen(tParked); n != 400 {
		t.Errorf("the parked topic holds %d records; want 400: P's 200 once, Q's 100 twice (parked, then again when P was resumed)", n)
	}
	if n := metric(t, a, "capper_paused_waiting") + metric(t, b, "capper_paused_waiting"); n != 0 {
		t.Errorf("capper_paused_waiting = %v after both resumed", n)
	}
}

// TestPacedParkedKeepsItsDeferral: a paused campaign's paced pushes pass
// their lane's gate without a token (no capper-released-at, no unused
// token), are decided paused and parked, deferred once; when another
// campaign is stopped the parked reader hands them over, they are held in
// their lane again and parked again, still deferred once; once resumed
// they are released with a token and delivered, deferred once.
func TestPacedParkedKeepsItsDeferral(t *testing.T) {
	e := newE2E(t, "single")
	e.publish(1000, 7)
	if err := e.kafka.Cluster.CreateTopic(tParked, 4, nil); err != nil {
		t.Fatal(err)
	}
	cfg := e.paceConfig(pacePolicy)
	// The wall clock for the control records too (a budget's tokens come
	// at Redis' pace, and a pause's age is read against the decisions').
	now := time.Now()
	e.clock = &fastClock{base: now, start: now, factor: 1}
	cfg.Kafka.Topics.Control, cfg.Kafka.Topics.Parked = tControl, tParked
	cfg.Kafka.LaneRecords = "compact" // the deferral's headers beside capper-held
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c := newController(e, cfg)
	a, b := e.start("a", cfg), e.start("b", cfg)
	c.workers = []*worker{a, b}
	c.applied(c.set("P", control.Paused, "copy review"))
	e.produce(ctlIntents("p", "P", "push", "", 0, 50, 1, ""))
	waitFor(t, 30*time.Second, func() bool { return e.topicLen(tParked) >= 50 })
	c.applied(c.set("Q", control.Stopped, "another campaign"))
	waitFor(t, 30*time.Second, func() bool { return e.topicLen(tParked) >= 100 })
	c.applied(c.set("P", control.Active, ""))
	o := e.waitDrained(60*time.Second, a, b)
	delivered := map[string]bool{} // at least once: a redelivery is marked duplicate
	for _, m := range o.deliveries {
		if campaignOf(m) == "P" {
			delivered[idOf(m)] = true
		}
	}
	if len(delivered) != 50 {
		t.Fatalf("delivered %d of P's 50", len(delivered))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	parked, err := audit.ReadTopic(ctx, e.kafka.Addrs, tParked)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range append(parked, o.deliveries...) {
		if n := header(m, "capper-deferred-count"); n != "1" {
			t.Errorf("%s (%s): capper-deferred-count %q, want 1: a paused intent looked at again while still paused is the same wait",
				idOf(m), header(m, "capper-decision"), n)
		}
	}
	for _, m := range parked {
		if v := header(m, "capper-released-at"); v != "" {
			t.Errorf("parked %s carries capper-released-at %s: it passed its gate without a token", idOf(m), v)
		}
	}
	for _, m := range o.deliveries {
		if header(m, "capper-released-at") == "" {
			t.Errorf("delivered %s has no capper-released-at: it took a token", idOf(m))
		}
	}
	if compact, headers := laneForms(t, e); compact < 50 || headers != 0 {
		t.Errorf("lane records: %d compact, %d in headers; want every one compact (at least P's 50)", compact, headers)
	}
}
