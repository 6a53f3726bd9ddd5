package soak

// The generated workload: skewed users, bursts of several intents per user
// (so that a batch holds a user's intents in a row), every field of the
// event contract, producer retries (the same id again), bad records (marked
// by the header soak-bad, which capper passes on), planned sends of the
// campaign plan, delivery statuses that refund sends, and pushes routed
// through fcm, which the policies' budget paces (the plan's high-priority
// campaign in its urgent lane, the rest mostly in its bulk lane).

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
)

// hBad marks a record the soak made invalid on purpose: its outcome must be
// the dead-letter topic, and no valid record's may be.
const hBad = "soak-bad"

// refundStatus is the delivery status the workload sends to refund (one of
// refunds.statuses' defaults); ignoredStatus is not a refund.
const (
	refundStatus  = "failed"
	ignoredStatus = "delivered"
	// throttledStatus: the provider throttled a paced send (it slows the
	// budget, down to paceMinRate; sometimes with a Retry-After).
	throttledStatus = "throttled"
)

type sent struct {
	user  uint64
	id    string
	value []byte
	paced bool // the budget holds it (a push routed through fcm, not exempt)
}

type workload struct {
	rng *rand.Rand
	// routes draws the pushes' routes: a stream of its own, so that the
	// rest of a seed's workload is what it was before the budget.
	routes *rand.Rand
	users  int
	plan   *plan
	n      int
	sent   []sent // every valid intent so far, for retries and refunds
	// refunded: the ids a refund status was produced for, per user.
	refunded map[uint64]map[string]bool
	intents  int
	bad      int
	statuses int
	fresh    int // fresh users so far
	// paced counts the intents written that the budget holds (retries
	// included): what the drain waits for at the budget's rate.
	paced int
	// throttles (nil: a build without throttle feedback) draws which
	// statuses of paced sends say throttled: a stream of its own, so that
	// the rest of a seed's workload is what it was before.
	throttles *rand.Rand
	throttled int
}

func newWorkload(seed uint64, users int, p *plan) *workload {
	return &workload{rng: rand.New(rand.NewPCG(seed, 0x50a)), routes: rand.New(rand.NewPCG(seed, 0x7a7e)), users: users, plan: p,
		refunded: map[uint64]map[string]bool{}}
}

// user picks a user, skewed: low ids get most intents.
func (g *workload) user() uint64 {
	return 1 + uint64(math.Pow(g.rng.Float64(), 3)*float64(g.users-1))
}

func (g *workload) pick(options ...string) string { return options[g.rng.IntN(len(options))] }

// tick is one burst of records at now: a few users, each with 1-4 intents
// in a row; now and then a retry of an earlier intent, a bad record or a
// delivery status.
func (g *workload) tick(now time.Time) (intents, statuses []kafka.Message) {
	for range 3 + g.rng.IntN(6) {
		u := g.user()
		for range 1 + g.rng.IntN(4) {
			intents = append(intents, g.intent(u, now, "", ""))
		}
	}
	// A fresh user (the upper half, in turn): an sms, capped by a max 0
	// limit (the refusal cache now knows the user and its ids), then two
	// or three emails of one campaign in a row: the first allowed, the
	// next capped by it, in the same batch. Where the first's answer fails
	// (a replica that does not acknowledge it), the rest must wait, and
	// the cache must not answer its retry from what followed.
	if g.rng.IntN(10) < 4 {
		u := uint64(g.users/2 + g.fresh%(g.users/2))
		g.fresh++
		campaign := g.pick("c1", "c2", "c3", "c4", "c5")
		intents = append(intents, g.intent(u, now, campaign, "sms"))
		for range 2 + g.rng.IntN(2) {
			intents = append(intents, g.intent(u, now, campaign, "email"))
		}
	}
	if g.rng.IntN(100) < 30 && len(g.sent) > 0 {
		s := g.sent[g.rng.IntN(len(g.sent))]
		status := ignoredStatus
		refund := g.rng.IntN(3) > 0
		st := map[string]any{"id": s.id, "user_id": s.user, "at": now.UTC().Format(time.RFC3339)}
		switch {
		case s.paced && g.throttles != nil && g.throttles.IntN(4) == 0:
			// Throttled: counted, and its sender sends it again (not
			// the soak's business: the statuses are about earlier ids).
			status, st["lane"] = throttledStatus, paceBudget+"/"+paceLanes[1]
			if g.throttles.IntN(5) == 0 {
				st["retry_after"] = 1
			}
			g.throttled++
		case refund:
			status = refundStatus
			if g.refunded[s.user] == nil {
				g.refunded[s.user] = map[string]bool{}
			}
			g.refunded[s.user][s.id] = true
		}
		st["status"] = status
		v, _ := json.Marshal(st)
		statuses = append(statuses, kafka.Message{Key: []byte(strconv.FormatUint(s.user, 10)), Value: v})
		g.statuses++
	}
	return intents, statuses
}

// intent is one record for user u: mostly valid, with every field of the
// contract chosen at random (its campaign and channel too, unless set).
func (g *workload) intent(u uint64, now time.Time, campaign, channel string) kafka.Message {
	key := []byte(strconv.FormatUint(u, 10))
	g.intents++
	switch r := g.rng.IntN(100); {
	case r < 3 && len(g.sent) > 0:
		// A producer's retry: an earlier intent again, same id.
		s := g.sent[g.rng.IntN(len(g.sent))]
		if s.paced {
			g.paced++
		}
		return kafka.Message{Key: []byte(strconv.FormatUint(s.user, 10)), Value: s.value}
	case r < 4:
		return g.badRecord(u, key, now)
	}
	g.n++
	id := fmt.Sprintf("i-%d", g.n)
	if campaign == "" {
		campaign = g.pick("c1", "c2", "c3", "c4", "c5")
	}
	if channel == "" {
		channel = g.pick("email", "push", "push", "sms", "inapp")
	}
	v := map[string]any{"id": id, "user_id": u, "campaign_id": campaign,
		"channel": channel, "created_at": now.UTC().Format(time.RFC3339), "payload": map[string]any{"n": g.n}}
	if g.rng.IntN(10) == 0 {
		v["user_id"] = strconv.FormatUint(u, 10) // a decimal string
	}
	switch r := g.rng.IntN(100); {
	case r < 8:
		v["category"] = "transactional"
	case r < 11:
		v["category"] = ""
	case r < 40:
		v["category"] = "marketing"
	}
	switch r := g.rng.IntN(100); {
	case r < 30:
		v["tags"] = []string{"promo"}
	case r < 40:
		v["tags"] = []string{"news", "promo"}
	}
	switch r := g.rng.IntN(100); {
	case r < 15:
		v["priority"] = "low"
	case r < 25:
		v["priority"] = "high"
	case r < 35:
		v["priority"] = g.rng.IntN(101) // a number
	case r < 40:
		v["priority"] = strconv.Itoa(g.rng.IntN(101))
	case r < 50:
		v["priority"] = "normal"
	}
	switch r := g.rng.IntN(100); {
	case r < 25:
		v["time_zone"] = "UTC"
	case r < 40:
		v["time_zone"] = "Asia/Kolkata"
	}
	switch r := g.rng.IntN(100); {
	case r < 3:
		v["campaign_id"], v["capping"] = "urgent", "bypass" // honoured
	case r < 4:
		v["capping"] = "bypass" // refused: c1-c5 may not bypass
	case r < 5:
		v["campaign_id"], v["capping"] = "urgent", "bypass-uncounted"
	}
	// The plan's own sends: high-priority pushes to its audience, in its
	// window.
	if g.plan.has(u) && !now.Before(g.plan.starts) && now.Before(g.plan.ends) && g.rng.IntN(4) == 0 {
		v["campaign_id"], v["priority"], v["channel"], v["category"] = g.plan.campaign, "high", g.plan.channel, g.plan.categ
		delete(v, "capping")
	}
	paced := g.route(v)
	if paced {
		g.paced++
	}
	b, _ := json.Marshal(v)
	g.sent = append(g.sent, sent{u, id, b, paced})
	return kafka.Message{Key: key, Value: b}
}

// Shares of the pushes routed through fcm (the budget's route): of the
// plan's own, and of the others; the rest go through apns or name no
// route, and are not paced.
const (
	fcmPlan  = 50
	fcmOther = 30
)

// route sets the route of a push v (through fcm, apns or none) and reports
// whether the budget holds it: routed through fcm and not of an exempt
// category (those are charged to the budget, never held).
func (g *workload) route(v map[string]any) bool {
	if v["channel"] != "push" {
		return false
	}
	fcm := fcmOther
	if v["campaign_id"] == g.plan.campaign {
		fcm = fcmPlan
	}
	switch r := g.routes.IntN(100); {
	case r < fcm:
		v["route"] = "fcm"
		return v["category"] != "transactional"
	case r < fcm+(100-fcm)/2:
		v["route"] = "apns"
	}
	return false
}

// badRecord is an intent capper must dead-letter.
func (g *workload) badRecord(u uint64, key []byte, now time.Time) kafka.Message {
	g.bad++
	g.n++
	id := fmt.Sprintf("bad-%d", g.n)
	good := func(mod func(map[string]any)) []byte {
		v := map[string]any{"id": id, "user_id": u, "campaign_id": "c1", "channel": "push", "created_at": now.UTC().Format(time.RFC3339)}
		mod(v)
		b, _ := json.Marshal(v)
		return b
	}
	m := kafka.Message{Key: key}
	kind := g.pick("not-json", "key", "channel", "time-zone", "empty")
	switch kind {
	case "not-json":
		m.Value = []byte(`{"id": "` + id + `", "user_id": `)
	case "key": // keyed by another user: it would lose its user's order
		m.Key, m.Value = []byte(strconv.FormatUint(u+1, 10)), good(func(map[string]any) {})
	case "channel":
		m.Value = good(func(v map[string]any) { v["channel"] = "fax" })
	case "time-zone":
		m.Value = good(func(v map[string]any) { v["time_zone"] = "Mars/Olympus" })
	case "empty":
		m.Value = []byte{}
	}
	m.Headers = []kafka.Header{{Key: hBad, Value: []byte(kind)}}
	return m
}

// producer writes records with acks=all, keyed by user (murmur2, as the
// Java client and kcat do), retrying a write that fails (a broker
// restart) until ctx ends.
type producer struct {
	w *kafka.Writer
}

func newProducer(addr string) *producer {
	return &producer{w: &kafka.Writer{Addr: kafka.TCP(addr), RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond,
		Balancer: &kafka.Murmur2Balancer{}, MaxAttempts: 3, WriteTimeout: 3 * time.Second}}
}

func (p *producer) write(ctx context.Context, topic string, msgs []kafka.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	for i := range msgs {
		msgs[i].Topic = topic
	}
	for {
		err := p.w.WriteMessages(ctx, msgs...)
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// The soak's budget: pushes routed through fcm, released at most paceRate
// a second (all workers together) with paceBurst above it, well below the
// rate the workload sends them at (about 15 a second), so that they wait
// in its lanes: urgent for high priorities (the plan's campaign), bulk for
// the rest. Both policy versions have it.
const (
	paceBudget = "push-fcm"
	paceRate   = 8
	paceBurst  = 4
	paceRoute  = "fcm"
	// paceMinRate: throttled statuses slow the budget down to it, no lower.
	paceMinRate = 6
)

// paceLanes are the budget's lanes, in precedence order.
var paceLanes = []string{"urgent", "bulk"}

// laneTopics are the topics of the budget's lanes (<lanes>.<budget>.<lane>)
// and their retry topics (<lane topic>.retry: an earlier build reads them
// as a dropped budget's lanes, empty).
func laneTopics() []string {
	var out []string
	for _, l := range paceLanes {
		out = append(out, tLanes+"."+paceBudget+"."+l, tLanes+"."+paceBudget+"."+l+".retry")
	}
	return out
}

// budgetsYAML is the policies' budgets section.
func budgetsYAML(rate, minRate float64) string {
	floor := ""
	if minRate > 0 {
		floor = fmt.Sprintf("\n    min_rate: %v", minRate)
	}
	return fmt.Sprintf(`budgets:
  - name: %s
    rate: %v
    burst: %d%s
    channels: [push]
    routes: [%s]
    lanes:
      - {name: %s, min_priority: high}
      - {name: %s}
`, paceBudget, rate, paceBurst, floor, paceRoute, paceLanes[0], paceLanes[1])
}

// policies are the two policy versions a soak swaps between: v1 defers
// for active users and has quiet hours for dormant ones (in UTC, from
// quietFrom to quietTo, "HH:MM"); v2 tightens one limit, loosens another
// and has no quiet hours. Both have the budget, unless paced is false (a
// build without send pacing), with its min_rate when throttles is true (a
// build with throttle feedback), and the same user_limits section, unless
// users is false (a build without users' own limits).
func policies(quietFrom, quietTo string, paced, throttles, users bool) (v1, v2 []byte) {
	budgets := ""
	switch {
	case paced && throttles:
		budgets = budgetsYAML(paceRate, paceMinRate)
	case paced:
		budgets = budgetsYAML(paceRate, 0)
	}
	if users {
		budgets += userLimitsYAML
	}
	head := budgets + `channels: [email, push, sms, inapp]
categories: [marketing, transactional]
default_category: marketing
exempt_categories: [transactional]
overrides:
  campaigns: [urgent]
time_zone: UTC
segments:
  - name: new
    limits:
      - {name: no-sms, window: 1m, max: 0, where: {channels: [sms]}}
      - {name: n-1m, window: 1m, max: 1}
      - {name: n-2m, window: 2m, max: 3}
  - name: active
    on_cap: defer
    max_defer: 1m
    limits:
      - {name: no-sms, window: 1m, max: 0, where: {channels: [sms]}}
`
	v1 = []byte(head + `      - {name: a-1m, window: 1m, max: 2, reserve: {slots: 1, below: high}}
      - {name: a-camp, window: 1m, max: 1, per: campaign}
      - {name: a-push, window: 90s, max: 1, where: {channels: [push]}, on_cap: suppress}
      - {name: a-day, calendar: day, max: 12}
  - name: dormant
    quiet_hours: {from: "` + quietFrom + `", to: "` + quietTo + `", channels: [push, sms], jitter: 5s}
    limits:
      - {name: no-sms, window: 1m, max: 0, where: {channels: [sms]}}
      - {name: d-1m, window: 1m, max: 1}
      - {name: d-promo, window: 5m, max: 2, where: {tags: [promo]}}
default_policy:
  limits:
    - {name: no-sms, window: 1m, max: 0, where: {channels: [sms]}}
    - {name: x-1m, window: 1m, max: 2}
    - {name: x-sms, window: 2m, max: 1, where: {channels: [sms]}}
`)
	v2 = []byte(head + `      - {name: a-1m, window: 1m, max: 1}
      - {name: a-camp, window: 1m, max: 1, per: campaign}
      - {name: a-push, window: 90s, max: 1, where: {channels: [push]}, on_cap: suppress}
      - {name: a-day, calendar: day, max: 12}
  - name: dormant
    limits:
      - {name: no-sms, window: 1m, max: 0, where: {channels: [sms]}}
      - {name: d-1m, window: 1m, max: 1}
      - {name: d-promo, window: 5m, max: 2, where: {tags: [promo]}}
default_policy:
  limits:
    - {name: no-sms, window: 1m, max: 0, where: {channels: [sms]}}
    - {name: x-1m, window: 1m, max: 3}
    - {name: x-sms, window: 2m, max: 1, where: {channels: [sms]}}
`)
	return v1, v2
}
