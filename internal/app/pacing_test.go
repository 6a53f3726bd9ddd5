package app_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/control"
	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/pacing"
)

// The pacing tests' budget: 200 pushes a second with a burst of 20, an
// urgent lane for high priorities and a bulk lane for the rest.
const (
	tLanes     = "capper-lanes"
	paceRate   = 200
	paceBurst  = 20
	pacePolicy = `
default_policy:
  limits:
    - {name: per-minute, window: 1m, max: 5}
budgets:
  - name: push-fcm
    rate: 200
    burst: 20
    channels: [push]
    lanes:
      - {name: urgent, min_priority: high}
      - {name: bulk}
`
)

// paceConfig is holdConfig with the lanes, on the wall clock (a budget's
// tokens come at Redis' pace).
func (e *e2e) paceConfig(policyYAML string) *config.Config {
	e.t.Helper()
	e.now = time.Now
	for _, lane := range []string{"urgent", "bulk"} {
		for _, topic := range []string{pacing.Topic(tLanes, "push-fcm", lane), pacing.RetryTopic(tLanes, "push-fcm", lane)} {
			if err := e.kafka.Cluster.CreateTopic(topic, 4, nil); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	cfg := e.holdConfig(policyYAML)
	cfg.Kafka.Topics.Lanes = tLanes
	cfg.Kafka.LagInterval = config.Duration(200 * time.Millisecond) // the lanes' waiting, for send-by
	if err := cfg.Validate(); err != nil {
		e.t.Fatal(err)
	}
	return cfg
}

func paceIntents(from, n int, campaign, channel, category, priority string) []kafka.Message {
	var msgs []kafka.Message
	for u := from; u < from+n; u++ {
		msgs = append(msgs, kafka.Message{Key: fmt.Appendf(nil, "%d", u),
			Value: fmt.Appendf(nil, `{"id":"%s-%d","user_id":%d,"campaign_id":%q,"channel":%q,"category":%q,"priority":%q}`,
				campaign, u, u, campaign, channel, category, priority)})
	}
	return msgs
}

// mostInOneSecond is the most of times within any one second.
func mostInOneSecond(times []time.Time) int {
	most, _ := audit.BusiestSecond(times)
	return most
}

func headerTime(t *testing.T, m kafka.Message, key string) time.Time {
	t.Helper()
	at, err := time.Parse(dispatch.TimeLayout, header(m, key))
	if err != nil {
		t.Fatalf("%s of %s: %v", key, header(m, "capper-source"), err)
	}
	return at
}

// redeliveries counts the deliveries that are a redelivery, not a
// decision: marked capper-duplicate, of an input also delivered without the
// mark (at least once: a commit refused after a rebalance; its
// capper-decided-at is the first decision's, its capper-released-at its
// own). An input delivered twice without the mark, or only marked, is an
// error.
func redeliveries(t *testing.T, deliveries []kafka.Message) int {
	t.Helper()
	unmarked, marked := map[string]int{}, map[string]int{}
	for _, m := range deliveries {
		if src := header(m, "capper-source"); header(m, "capper-duplicate") == "true" {
			marked[src]++
		} else {
			unmarked[src]++
		}
	}
	n := 0
	for src, k := range unmarked {
		if k > 1 {
			t.Errorf("input %s delivered %d times without capper-duplicate: decided more than once", src, k)
		}
	}
	for src, k := range marked {
		if unmarked[src] == 0 {
			t.Errorf("input %s delivered only as a duplicate (%d times): its first decision is missing", src, k)
		}
		n += k
	}
	return n
}

// TestPacingReleasesAtTheBudgetsRate: two workers, a 1000-push blast
// (normal priority) over a budget of 200/s, transactional pushes and
// emails beside it, then 100 high-priority pushes. Every input has one
// outcome; the blast waits in the bulk lane and is decided when released
// (capper-decided-at is at or after capper-released-at), never more than
// the rate plus the burst in any second of releases; the urgent pushes
// overtake what is left of the blast; exempt and email intents are never
// held. A redelivery (a lane's commit refused as the second worker joins)
// is decided again as a duplicate: not a second decision.
func TestPacingReleasesAtTheBudgetsRate(t *testing.T) {
	e := newE2E(t, "single")
	e.publish(3000, 3)
	cfg := e.paceConfig(pacePolicy)
	w1, w2 := e.start("w1", cfg), e.start("w2", cfg)
	// The blast with 50 high-priority pushes among it: batches hold
	// intents of both lanes in turn.
	blast, early := paceIntents(0, 1000, "blast", "push", "marketing", "normal"), paceIntents(2500, 50, "early", "push", "marketing", "high")
	var first []kafka.Message
	for i := range blast {
		if first = append(first, blast[i]); i%20 == 0 {
			first = append(first, early[i/20])
		}
	}
	e.produce(append(append(first,
		paceIntents(1000, 40, "receipt", "push", "transactional", "normal")...),
		paceIntents(1100, 100, "news", "email", "marketing", "normal")...))
	time.Sleep(1500 * time.Millisecond)
	e.produce(paceIntents(2000, 100, "flash", "push", "marketing", "high"))
	// Behind some 700 waiting intents (3.5 s at the rate), a send-by 1.5 s
	// away cannot be met: cancelled at once, not when it comes due.
	late := paceIntents(2200, 20, "late", "push", "marketing", "normal")
	lateBy := time.Now().Add(1500 * time.Millisecond).UTC()
	for i := range late {
		late[i].Value = fmt.Appendf(late[i].Value[:len(late[i].Value)-1], `,"send_by":%q}`, lateBy.Format(time.RFC3339Nano))
	}
	e.produce(late)
	o := e.waitDrained(60*time.Second, w1, w2)
	e.verify(o, cfg, false)
	for _, m := range o.suppressed {
		if campaignOf(m) != "late" {
			continue
		}
		if header(m, "capper-reason") != "expired" || header(m, dispatch.HeaderLane) != "" || !headerTime(t, m, "capper-decided-at").Before(lateBy) {
			t.Errorf("late intent %s: %s %s in lane %q at %s; want cancelled (expired) before its send-by %s, never held", idOf(m),
				header(m, "capper-decision"), header(m, "capper-reason"), header(m, dispatch.HeaderLane), header(m, "capper-decided-at"), lateBy.Format(time.RFC3339Nano))
		}
	}
	if n := countCampaign(o.suppressed, "late", "cancelled"); n != len(late) {
		t.Errorf("%d of the %d late intents cancelled", n, len(late))
	}
	// A held intent is counted once, when it is decided, not when held; a
	// redelivery is counted again, as a duplicate.
	redelivered := redeliveries(t, o.deliveries)
	n := metric(t, w1, "capper_intents_total") + metric(t, w2, "capper_intents_total")
	dups := metric(t, w1, "capper_intents_total", "outcome", "duplicate") + metric(t, w2, "capper_intents_total", "outcome", "duplicate")
	if n-dups != float64(e.inputs) || dups != float64(redelivered) {
		t.Errorf("capper_intents_total = %v over the workers (%v duplicate), want one per input (%d) and one duplicate per redelivery (%d)",
			n, dups, e.inputs, redelivered)
	}

	var released []time.Time
	last := map[string]time.Time{}
	for _, m := range o.deliveries {
		lane := header(m, dispatch.HeaderLane)
		id := idOf(m)
		campaign := id[:len(id)-len(m.Key)-1]
		switch campaign {
		case "receipt", "news":
			if lane != "" {
				t.Errorf("%s: %s waited in lane %s; exempt and unpaced intents are never held", id, campaign, lane)
			}
			continue
		case "blast":
			if lane != "push-fcm/bulk" {
				t.Errorf("%s: lane %q, want push-fcm/bulk", id, lane)
			}
		case "flash", "early":
			if lane != "push-fcm/urgent" {
				t.Errorf("%s: lane %q, want push-fcm/urgent", id, lane)
			}
		}
		if header(m, "capper-duplicate") == "true" {
			continue // a redelivery: decided (and released) as its first delivery was
		}
		rel, dec := headerTime(t, m, dispatch.HeaderReleasedAt), headerTime(t, m, "capper-decided-at")
		if dec.Before(rel.Add(-time.Millisecond)) {
			t.Errorf("%s: decided at %s, before its release at %s", id, dec.Format(time.RFC3339Nano), rel.Format(time.RFC3339Nano))
		}
		released = append(released, rel)
		if rel.After(last[campaign]) {
			last[campaign] = rel
		}
	}
	if len(released) != 1150 {
		t.Fatalf("%d paced deliveries, want 1150", len(released))
	}
	// Each lane counts what it held: every intent held in it, and an
	// input held again after a redelivery at most.
	for lane, want := range map[string]int{"bulk": 1000, "urgent": 150} {
		again := 0
		for _, m := range o.deliveries {
			if header(m, dispatch.HeaderLane) == "push-fcm/"+lane && header(m, "capper-duplicate") == "true" {
				again++
			}
		}
		n := metric(t, w1, "capper_pacing_held_total", "lane", lane) + metric(t, w2, "capper_pacing_held_total", "lane", lane)
		if n < float64(want) || n > float64(want+again) {
			t.Errorf("capper_pacing_held_total{lane=%q} = %v over the workers; want %d held (up to %d more: redelivered)", lane, n, want, again)
		}
	}
	most := mostInOneSecond(released)
	if limit := int(paceRate*1.01) + paceBurst; most > limit {
		t.Errorf("%d releases within one second; the budget allows %d (rate %d, burst %d)", most, limit, paceRate, paceBurst)
	}
	if !last["flash"].Before(last["blast"].Add(-time.Second)) {
		t.Errorf("the urgent lane's last release %s is not well before the bulk lane's last %s: it did not overtake",
			last["flash"].Format(time.RFC3339Nano), last["blast"].Format(time.RFC3339Nano))
	}
	checkLaneFields(t, e, o, "bulk", 1000)
	t.Logf("most releases in one second: %d (rate %d, burst %d); blast released until %s, flash until %s; %d redelivered",
		most, paceRate, paceBurst, last["blast"].Format(time.RFC3339Nano), last["flash"].Format(time.RFC3339Nano), redelivered)
}

// TestPacingThroughFaults: on a 3-master cluster, two workers drain two
// paced campaigns through a restart of one worker (another takes its
// place), a Redis outage and a stop of the blast. Every input has one
// outcome (nothing held is lost), no second of releases goes above the
// budget, nothing of the blast is decided after the stop took effect (the
// stop reached what was held), and the held intents of the other campaign
// are all delivered.
func TestPacingThroughFaults(t *testing.T) {
	e := newE2E(t, "cluster")
	e.publish(3000, 5)
	cfg := e.paceConfig(pacePolicy)
	cfg.Kafka.Topics.Control = tControl
	c := newController(e, cfg)
	cfg.Kafka.LaneRecords = "compact" // the stop reads capper-held's campaign
	w1, w2 := e.start("w1", cfg), e.start("w2", cfg)
	c.workers = []*worker{w1, w2}
	e.produce(append(paceIntents(0, 1200, "blast", "push", "marketing", "normal"),
		paceIntents(1200, 300, "promo", "push", "marketing", "normal")...))
	time.Sleep(time.Second)
	if err := w1.stop(t); err != nil {
		t.Fatalf("w1: %v", err)
	}
	w3 := e.start("w3", cfg)
	c.workers = []*worker{w2, w3}
	time.Sleep(time.Second)
	e.pauseRedis()
	time.Sleep(1500 * time.Millisecond)
	e.resumeRedis()
	time.Sleep(500 * time.Millisecond)
	stop := c.set("blast", control.Stopped, "wrong price")
	applied := c.applied(stop)
	o := e.waitDrained(90*time.Second, w2, w3)
	e.verifyOutcomes(o, true)

	var released []time.Time
	promo := 0
	for _, m := range o.deliveries {
		if header(m, "capper-duplicate") != "true" {
			released = append(released, headerTime(t, m, dispatch.HeaderReleasedAt))
		}
		switch campaignOf(m) {
		case "blast":
			// The workers' clock is the test's: a delivery decided after
			// the stop took effect broke it.
			if at := headerTime(t, m, "capper-decided-at"); at.After(applied) {
				t.Errorf("blast intent %s decided at %s, after the stop took effect at %s", idOf(m), at.Format(time.RFC3339Nano), applied.Format(time.RFC3339Nano))
			}
		case "promo":
			promo++
		}
	}
	if promo < 300 {
		t.Errorf("%d promo deliveries, want all 300", promo)
	}
	cancelled := countCampaign(o.suppressed, "blast", "cancelled")
	if cancelled == 0 {
		t.Errorf("no blast intent cancelled: the stop came too late to reach any held one (%d delivered)", len(released)-promo)
	}
	most := mostInOneSecond(released)
	if limit := int(paceRate*1.01) + paceBurst; most > limit {
		t.Errorf("%d releases within one second; the budget allows %d (rate %d, burst %d)", most, limit, paceRate, paceBurst)
	}
	if c, h := laneForms(t, e); c < 1500 || h != 0 {
		t.Errorf("lane records: %d compact, %d in headers; want every one compact (at least the 1500 held)", c, h)
	}
	t.Logf("%d delivered (%d promo), %d blast cancelled; most releases in one second: %d", len(o.deliveries), promo, cancelled, most)
}

// TestPacingPolicySwap: a budget added by a new policy version paces the
// intents that come after the swap, with no restart: before it, pushes are
// decided at once; after it, they wait in the budget's lanes. A version
// that drops the budget releases what waits for it, unpaced.
func TestPacingPolicySwap(t *testing.T) {
	e := newE2E(t, "single")
	e.publish(1000, 3)
	const without = `
default_policy:
  limits:
    - {name: per-minute, window: 1m, max: 5}
`
	cfg := e.paceConfig(without)
	cfg.Policy.PollInterval = config.Duration(200 * time.Millisecond)
	w := e.start("w", cfg)
	e.produce(paceIntents(0, 100, "before", "push", "marketing", "normal"))
	e.waitDrained(30*time.Second, w)
	if err := os.WriteFile(strings.TrimPrefix(cfg.Policy.Source, "file://"), []byte(pacePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool { return metric(t, w, "capper_pacing_budget_rate", "budget", "push-fcm") == paceRate })
	e.produce(paceIntents(100, 100, "after", "push", "marketing", "normal"))
	e.waitDrained(30*time.Second, w)
	// The budget dropped while 600 intents wait for it (3 s at its rate):
	// they drain unpaced.
	e.produce(paceIntents(200, 600, "dropped", "push", "marketing", "normal"))
	waitFor(t, 30*time.Second, func() bool { return metric(t, w, "capper_pacing_held_total") >= 700 })
	if err := os.WriteFile(strings.TrimPrefix(cfg.Policy.Source, "file://"), []byte(without), 0o644); err != nil {
		t.Fatal(err)
	}
	o := e.waitDrained(30*time.Second, w)
	e.verify(o, cfg, false)
	var released []time.Time
	seen := map[string]bool{}
	for _, m := range o.deliveries {
		// A redelivery (at least once) is counted once.
		if src := header(m, "capper-source"); campaignOf(m) == "dropped" && !seen[src] {
			seen[src] = true
			released = append(released, headerTime(t, m, dispatch.HeaderReleasedAt))
		}
	}
	slices.SortFunc(released, func(a, b time.Time) int { return a.Compare(b) })
	if len(released) != 600 || released[len(released)-1].Sub(released[0]) > 2500*time.Millisecond {
		t.Errorf("%d of the 600 intents held for the dropped budget delivered, released from %s to %s: want all, faster than the budget's 3 s",
			len(released), released[0].Format(time.RFC3339Nano), released[len(released)-1].Format(time.RFC3339Nano))
	}
	for _, m := range o.deliveries {
		lane := header(m, dispatch.HeaderLane)
		switch c := campaignOf(m); {
		case c == "before" && lane != "":
			t.Errorf("%s, decided before the budget existed, waited in %s", idOf(m), lane)
		case c == "after" && lane != "push-fcm/bulk":
			t.Errorf("%s, after the swap, waited in lane %q; want push-fcm/bulk", idOf(m), lane)
		}
	}
}

// TestPacingCampaignSendByTakesNoToken: a campaign's send-by set while its
// intents wait in a lane behind a backlog passes; they are cancelled
// (expired) when their lane's reader reaches them, without a token: no
// capper-released-at, and the backlog behind them is not held up.
func TestPacingCampaignSendByTakesNoToken(t *testing.T) {
	e := newE2E(t, "single")
	e.publish(3000, 3)
	cfg := e.paceConfig(pacePolicy)
	now := time.Now()
	e.clock = &fastClock{base: now, start: now, factor: 1} // control records on the wall clock too
	cfg.Kafka.Topics.Control = tControl
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	c := newController(e, cfg)
	w := e.start("w", cfg)
	c.workers = []*worker{w}
	// 600 pushes ahead: 3 s at the budget's rate.
	e.produce(paceIntents(0, 600, "blast", "push", "marketing", "normal"))
	e.produce(paceIntents(1000, 20, "late", "push", "marketing", "normal"))
	waitFor(t, 30*time.Second, func() bool {
		return e.topicLen(pacing.Topic(tLanes, "push-fcm", "bulk")) >= 620
	})
	by := time.Now().Add(300 * time.Millisecond)
	c.applied(c.setSendBy("late", by))
	o := e.waitDrained(60*time.Second, w)
	cancelled := map[string]bool{} // at least once: an outcome may be written twice
	for _, m := range o.suppressed {
		if campaignOf(m) == "late" && header(m, "capper-decision") == "cancelled" {
			cancelled[idOf(m)] = true
		}
	}
	if len(cancelled) != 20 {
		t.Fatalf("%d of the 20 late intents cancelled", len(cancelled))
	}
	for _, m := range o.suppressed {
		if campaignOf(m) != "late" {
			continue
		}
		if header(m, "capper-reason") != "expired" || header(m, dispatch.HeaderReleasedAt) != "" {
			t.Errorf("late %s: %s, capper-released-at %q; want expired, passed without a token", idOf(m),
				header(m, "capper-reason"), header(m, dispatch.HeaderReleasedAt))
		}
	}
}
