package app_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/plans"
)

// TestCampaignPlans: a day with two high-priority plans, daily max 1 per
// channel, two workers. cart-rescue (push, 17:00-17:30, users 0-19) and
// flash-sale (email, 20:00-21:00, users 40-59) are published before a
// low-priority push blast (users 0-39) and newsletter (users 20-59) come
// at 16:00. The blast's pushes for cart-rescue's users are deferred past
// its window (on_cap: defer), the newsletter's emails for flash-sale's
// users capped, both with capper-held-for; everyone else gets them at
// once. cart-rescue's own sends (users 0-9) go through; at 17:30 the
// deferred pushes come back: users 10-19, whose planned push never came,
// get the blast's, users 0-9 have had their push. flash-sale is withdrawn:
// a second newsletter then reaches its users. Every input has one
// outcome and the audit finds no user above a cap. On a single Redis with
// the plan store in a directory, and on a 3-master cluster with it on S3.
func TestCampaignPlans(t *testing.T) {
	for _, c := range []struct{ mode, store string }{{"single", "dir"}, {"cluster", "s3"}} {
		t.Run(c.mode+"/"+c.store, func(t *testing.T) { testCampaignPlans(t, c.mode, c.store) })
	}
}

const plansPolicy = `
default_policy:
  limits:
    - {name: daily-push, calendar: day, max: 1, channel: push, on_cap: defer, max_defer: 2h}
    - {name: daily-email, calendar: day, max: 1, channel: email}
`

func testCampaignPlans(t *testing.T, mode, store string) {
	e := newE2E(t, mode)
	e.clock = newFastClock(300) // 16:00 UTC; a real second is 5 minutes
	e.publish(60, 7)
	cfg := e.holdConfig(plansPolicy)
	cfg.Plans.Source = t.TempDir()
	if store == "s3" {
		cfg.Plans.Source = "s3://" + e2eS3 + "/plans"
	}
	cfg.Plans.PollInterval = config.Duration(200 * time.Millisecond)
	ctx := context.Background()
	st, err := objstore.Open(ctx, cfg.Plans.Source, objstore.Options{S3: objstore.S3Options{
		Region: e.s3.Region, Endpoint: e.s3.URL, UsePathStyle: true}})
	if err != nil {
		t.Fatal(err)
	}
	day := func(hh, mm int) time.Time { return time.Date(2026, 11, 21, hh, mm, 0, 0, time.UTC) }
	publishPlan(t, st, cfg, "cart-rescue", "high", day(17, 0), day(17, 30), "push", 0, 20, e.clock.Now())
	publishPlan(t, st, cfg, "flash-sale", "high", day(20, 0), day(21, 0), "email", 40, 60, e.clock.Now())

	a, b := e.start("a", cfg), e.start("b", cfg)
	for _, w := range []*worker{a, b} {
		if n := metric(t, w, "capper_plans_active"); n != 2 {
			t.Fatalf("worker %s: %v plans active, want 2", w.name, n)
		}
	}
	e.produce(planIntents("promo", "promo", "push", "low", 0, 40))
	e.produce(planIntents("news", "news", "email", "low", 20, 60))
	// Everything but the 20 deferred pushes has an outcome.
	e.waitOutcomes(e.inputs-20, a, b)
	e.produce(planIntents("cart", "cart-rescue", "push", "high", 0, 10))
	e.waitOutcomes(e.inputs-20, a, b)

	if err := plans.Withdraw(ctx, st, "flash-sale", e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool {
		return metric(t, a, "capper_plans_active") == 1 && metric(t, b, "capper_plans_active") == 1
	})
	e.produce(planIntents("news2", "news", "email", "low", 40, 60))
	o := e.waitDrained(60*time.Second, a, b)
	e.verifyHeld(o, holdRules(t, plansPolicy))

	outcome := map[string]kafka.Message{}
	delivered := map[string]bool{}
	for _, m := range o.deliveries {
		outcome[idOf(m)], delivered[idOf(m)] = m, true
	}
	for _, m := range o.suppressed {
		outcome[idOf(m)] = m
	}
	check := func(id string, wantDelivered bool, wantHeader ...string) {
		t.Helper()
		m, ok := outcome[id]
		switch {
		case !ok:
			t.Fatalf("%s has no outcome", id)
		case delivered[id] != wantDelivered:
			t.Errorf("%s: delivered %v, want %v (%s, %s)", id, delivered[id], wantDelivered,
				header(m, "capper-decision"), header(m, "capper-limit"))
			return
		}
		for i := 0; i+1 < len(wantHeader); i += 2 {
			if got := header(m, wantHeader[i]); got != wantHeader[i+1] {
				t.Errorf("%s: %s is %q, want %q", id, wantHeader[i], got, wantHeader[i+1])
			}
		}
	}
	for u := range 60 {
		id := func(wave string) string { return fmt.Sprintf("%s-%d-0", wave, u) }
		switch {
		case u < 10: // cart-rescue's users who got its push
			check(id("cart"), true)
			check(id("promo"), false, "capper-limit", "daily-push", "capper-reason", "defer-expired", "capper-held-for", "")
		case u < 20: // cart-rescue's users it did not send to
			check(id("promo"), true, "capper-deferred-count", "1", "capper-held-for", "")
			if at := decidedAt(t, outcome[id("promo")]); at.Before(day(17, 30)) {
				t.Errorf("%s delivered at %s, inside cart-rescue's window", id("promo"), at.Format(time.TimeOnly))
			}
		case u < 40: // in no audience: nothing held
			check(id("promo"), true, "capper-deferred-count", "")
			check(id("news"), true)
		default: // flash-sale's users, until it was withdrawn
			check(id("news"), false, "capper-limit", "daily-email", "capper-held-for", "flash-sale")
			m := outcome[id("news")]
			ms, err := strconv.ParseInt(header(m, "capper-retry-after-ms"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if free := decidedAt(t, m).Add(time.Duration(ms) * time.Millisecond); !free.Equal(day(21, 0)) {
				t.Errorf("%s: retry-after frees at %s, want flash-sale's end 21:00", id("news"), free.Format(time.TimeOnly))
			}
			check(id("news2"), true)
		}
	}
	held := func(limit string) float64 {
		return metric(t, a, "capper_held_for_plan_total", "limit", limit) + metric(t, b, "capper_held_for_plan_total", "limit", limit)
	}
	if p, m := held("daily-push"), held("daily-email"); p != 20 || m != 20 {
		t.Errorf("capper_held_for_plan_total: daily-push %v, daily-email %v; want 20 and 20", p, m)
	}
	if n := count(o.deliveries, "capper-held-for", "cart-rescue") + count(o.suppressed, "capper-held-for", "cart-rescue"); n != 0 {
		t.Errorf("%d final outcomes held for cart-rescue: its held pushes were deferred, not capped", n)
	}
	// The deferred pushes waited in the tiers marked with the plan.
	tiered := map[string]bool{}
	for _, topic := range []string{tDelay1m, tDelay10m, tDelay1h} {
		recs, err := audit.ReadTopic(ctx, e.kafka.Addrs, topic)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range recs {
			if header(m, "capper-held-for") == "cart-rescue" && header(m, "capper-reason") == "cap" {
				tiered[idOf(m)] = true
			}
		}
	}
	if len(tiered) != 20 {
		t.Errorf("%d deferred pushes carry capper-held-for: cart-rescue in the tiers, want 20", len(tiered))
	}
}

// publishPlan publishes a plan of campaign for users [from, to).
func publishPlan(t *testing.T, st objstore.Store, cfg *config.Config, campaign, prio string, starts, ends time.Time, channel string, from, to uint32, now time.Time) {
	t.Helper()
	spec := &plans.Spec{Campaign: campaign, Priority: prio, Starts: starts, Ends: ends,
		Message: plans.Message{Channel: channel}, Audience: []string{"(test)"}}
	p, ps := spec.Check(holdRules(t, plansPolicy))
	if err := ps.Err(); err != nil {
		t.Fatal(err)
	}
	bm := roaring.New()
	bm.AddRange(uint64(from), uint64(to))
	data, err := bm.ToBytes()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plans.Publish(context.Background(), st, spec, p, data, bm.GetCardinality(), now); err != nil {
		t.Fatal(err)
	}
}

// planIntents is one intent per user in [from, to), ids <wave>-<user>-0.
func planIntents(wave, campaign, channel, prio string, from, to int) []kafka.Message {
	var msgs []kafka.Message
	for u := from; u < to; u++ {
		msgs = append(msgs, kafka.Message{Key: fmt.Appendf(nil, "%d", u),
			Value: fmt.Appendf(nil, `{"id":"%s-%d-0","user_id":%d,"campaign_id":%q,"channel":%q,"priority":%q}`,
				wave, u, u, campaign, channel, prio)})
	}
	return msgs
}

// waitOutcomes waits until n inputs have an outcome.
func (e *e2e) waitOutcomes(n int, workers ...*worker) {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for len(e.read().sources()) < n {
		if time.Now().After(deadline) {
			var logs []string
			for _, w := range workers {
				logs = append(logs, w.name+":\n"+tail(w.log.String(), 3000))
			}
			e.t.Fatalf("fewer than %d inputs have an outcome after 60s\n%s", n, strings.Join(logs, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
