package app_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/policy"
)

// holdRules are the rules of a policy document (the audit's).
func holdRules(t *testing.T, policyYAML string) capping.Rules {
	t.Helper()
	d, err := policy.Parse([]byte(policyYAML))
	if err != nil {
		t.Fatal(err)
	}
	r, ps := d.Rules()
	if err := ps.Err(); err != nil {
		t.Fatal(err)
	}
	return r
}

// verifyHeld is verify with the rules of the policy file.
func (e *e2e) verifyHeld(o outputs, rules capping.Rules) {
	e.t.Helper()
	e.verifyOutcomes(o, false)
	sends, err := audit.Sends(o.deliveries)
	if err != nil {
		e.t.Fatal(err)
	}
	if v := audit.Check(rules, sends); len(v) > 0 {
		e.t.Fatalf("audit: %d violations, first: %s", len(v), v[0])
	}
}

// holdConfig is the e2e config with the policy from a file, the delay
// tiers and the delivery-status topic.
func (e *e2e) holdConfig(policyYAML string) *config.Config {
	e.t.Helper()
	file := filepath.Join(e.t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(policyYAML), 0o644); err != nil {
		e.t.Fatal(err)
	}
	cfg := e.config()
	cfg.Capping.Document = config.Default().Capping.Document
	cfg.Capping.InlinePolicy, cfg.Deprecations = nil, nil
	cfg.Policy.Source = "file://" + file
	cfg.Kafka.DelayTiers = []config.DelayTier{
		{Delay: config.Duration(time.Minute), Topic: tDelay1m},
		{Delay: config.Duration(10 * time.Minute), Topic: tDelay10m},
		{Delay: config.Duration(time.Hour), Topic: tDelay1h},
	}
	cfg.Kafka.Topics.DeliveryStatus = tStatus
	if err := cfg.Validate(); err != nil {
		e.t.Fatal(err)
	}
	return cfg
}

func decidedAt(t *testing.T, m kafka.Message) time.Time {
	t.Helper()
	at, err := time.Parse(dispatch.TimeLayout, header(m, "capper-decided-at"))
	if err != nil {
		t.Fatalf("capper-decided-at: %v", err)
	}
	return at
}

// idOf is the intent id of a record whose value was made by holdIntents.
func idOf(m kafka.Message) string {
	v := string(m.Value)
	i := strings.Index(v, `"id":"`) + len(`"id":"`)
	return v[i : i+strings.IndexByte(v[i:], '"')]
}

func holdIntents(wave, channel, category string, users, n int) []kafka.Message {
	var msgs []kafka.Message
	for u := range users {
		for i := range n {
			msgs = append(msgs, kafka.Message{Key: fmt.Appendf(nil, "%d", u),
				Value: fmt.Appendf(nil, `{"id":"%s-%d-%d","user_id":%d,"campaign_id":"c","channel":%q,"category":%q}`, wave, u, i, u, channel, category)})
		}
	}
	return msgs
}

// TestDeferDeliversWhenTheWindowFrees: with on_cap: defer, each user's
// second and third intent wait in the delay tiers and are delivered, in
// order, each once the window frees a slot: not before, and at most the
// shortest tier's delay (plus processing) after. The worker is stopped
// while they wait and another one finishes the job. Every input has
// exactly one outcome and the audit finds no cap broken. On a single
// Redis and on a 3-master cluster (the users' records on every master).
func TestDeferDeliversWhenTheWindowFrees(t *testing.T) {
	for _, mode := range []string{"single", "cluster"} {
		t.Run(mode, func(t *testing.T) { testDeferDelivers(t, mode) })
	}
}

func testDeferDelivers(t *testing.T, mode string) {
	e := newE2E(t, mode)
	e.clock = newFastClock(60) // 10 minutes = 10 s
	e.publish(100, 7)
	const pol = `
default_policy:
  limits:
    - {name: per-10m, window: 10m, max: 1, on_cap: defer, max_defer: 2h}
`
	cfg := e.holdConfig(pol)
	const users = 30
	w1 := e.start("w1", cfg)
	e.produce(holdIntents("d", "push", "marketing", users, 3))
	for deadline := time.Now().Add(30 * time.Second); metric(t, w1, "capper_deferred_total", "reason", "cap") < 2*users; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("deferred %v of %d", metric(t, w1, "capper_deferred_total", "reason", "cap"), 2*users)
		}
	}
	if err := w1.stop(t); err != nil {
		t.Fatalf("w1: %v", err)
	}
	w2 := e.start("w2", cfg)
	o := e.waitDrained(120*time.Second, w2)
	e.verifyHeld(o, holdRules(t, pol))
	if len(o.deliveries) != 3*users || len(o.suppressed) != 0 {
		t.Fatalf("%d delivered, %d suppressed; want all %d delivered", len(o.deliveries), len(o.suppressed), 3*users)
	}
	byUser := map[string][]kafka.Message{}
	for _, m := range o.deliveries {
		byUser[string(m.Key)] = append(byUser[string(m.Key)], m)
	}
	for u, ms := range byUser {
		slices.SortStableFunc(ms, func(a, b kafka.Message) int { return decidedAt(t, a).Compare(decidedAt(t, b)) })
		for i, m := range ms {
			if want := fmt.Sprintf("d-%s-%d", u, i); idOf(m) != want {
				t.Fatalf("user %s: delivery %d is %s, want %s (a user's deferred intents keep their order)", u, i, idOf(m), want)
			}
			if i == 0 {
				continue
			}
			prev, at := decidedAt(t, ms[i-1]), decidedAt(t, m)
			free := prev.Truncate(time.Second).Add(10*time.Minute + time.Second)
			if at.Before(free) || at.After(free.Add(time.Minute+time.Minute)) {
				t.Errorf("user %s: %s decided at %s; its slot freed at %s (want within the 1m tier, plus 1m of processing)", u, idOf(m), at, free)
			}
			if header(m, "capper-deferred-count") == "" || header(m, "capper-deferred-since") == "" {
				t.Errorf("user %s: %s came through the tiers without capper-deferred-count/-since: %v", u, idOf(m), m.Headers)
			}
		}
	}
	if n := metric(t, w2, "capper_defer_due_lag_seconds"); n == 0 {
		t.Fatal("capper_defer_due_lag_seconds observed nothing")
	}
}

// TestQuietHoursDeferAndReleaseWithJitter: push intents decided inside
// quiet hours (16:00-16:30 UTC) wait until 16:30, spread by the jitter;
// email (not a quiet channel) and exempt intents go at once.
func TestQuietHoursDeferAndReleaseWithJitter(t *testing.T) {
	e := newE2E(t, "single")
	e.clock = newFastClock(120) // the clock starts at 16:00 UTC
	e.publish(100, 7)
	const pol = `
default_policy:
  quiet_hours: {from: "16:00", to: "16:30", channels: [push], jitter: 5m}
  limits:
    - {name: daily, window: 24h, max: 10}
`
	cfg := e.holdConfig(pol)
	const users = 40
	w := e.start("w", cfg)
	e.produce(holdIntents("q", "push", "marketing", users, 1))
	e.produce(holdIntents("e", "email", "marketing", users, 1))
	e.produce(holdIntents("t", "push", "transactional", users, 1))
	o := e.waitDrained(120*time.Second, w)
	e.verifyHeld(o, holdRules(t, pol))
	end := time.Date(2026, 11, 21, 16, 30, 0, 0, time.UTC)
	var first, last time.Time
	for _, m := range o.deliveries {
		at := decidedAt(t, m)
		if !strings.HasPrefix(idOf(m), "q-") {
			if !at.Before(end) {
				t.Errorf("%s (not held) decided at %s, after quiet hours", idOf(m), at)
			}
			continue
		}
		if at.Before(end) || at.After(end.Add(5*time.Minute+2*time.Minute)) {
			t.Errorf("%s decided at %s; want from %s to the end of the jitter, plus a tier and processing", idOf(m), at, end)
		}
		if header(m, "capper-deferred-count") != "1" {
			t.Errorf("%s: capper-deferred-count %q", idOf(m), header(m, "capper-deferred-count"))
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
		if at.After(last) {
			last = at
		}
	}
	if spread := last.Sub(first); spread < 2*time.Minute {
		t.Errorf("the held intents were released within %s: the jitter did not spread them", spread)
	}
	sends, err := audit.Sends(o.deliveries)
	if err != nil {
		t.Fatal(err)
	}
	if v := audit.Quiet(holdRules(t, pol), sends); len(v) > 0 {
		t.Fatalf("%d sends inside quiet hours, first: %s", len(v), v[0])
	}
	if got := metric(t, w, "capper_deferred_total", "reason", "quiet-hours"); got != users {
		t.Fatalf("capper_deferred_total{reason=quiet-hours} = %v, want %d", got, users)
	}
}

// TestRefundLetsTheNextIntentThrough: a failed delivery's status gives its
// slot back, so the user's next intent is allowed; other statuses, unknown
// ids and a second refund change nothing; a redelivered refunded intent is
// still a duplicate; an invalid status is dead-lettered naming its field.
func TestRefundLetsTheNextIntentThrough(t *testing.T) {
	e := newE2E(t, "single")
	e.publish(100, 7)
	const pol = `
default_policy:
  limits:
    - {name: per-10m, window: 10m, max: 1}
`
	cfg := e.holdConfig(pol)
	e.clock = newFastClock(1) // nothing may leave the window during the test
	const users = 20
	w := e.start("w", cfg)
	e.produce(holdIntents("a", "push", "marketing", users, 1))
	e.waitDrained(60*time.Second, w)

	var statuses []kafka.Message
	status := func(u int, id, st string) {
		statuses = append(statuses, kafka.Message{Key: fmt.Appendf(nil, "%d", u),
			Value: fmt.Appendf(nil, `{"id":%q,"user_id":%d,"status":%q,"at":"2026-11-21T16:00:05Z"}`, id, u, st)})
	}
	for u := range 10 {
		status(u, fmt.Sprintf("a-%d-0", u), "bounced")
	}
	status(0, "a-0-0", "failed") // a second refund of the same send
	for u := 10; u < 15; u++ {
		status(u, fmt.Sprintf("a-%d-0", u), "delivered")
	}
	status(15, "never-sent", "failed")
	statuses = append(statuses, kafka.Message{Key: []byte("16"), Value: []byte(`{"id":"a-16-0","user_id":16,"status":"failed"}`)})
	e.kafka.Produce(t, tStatus, statuses)
	e.inputs++ // the invalid status's dead letter is an outcome too
	for deadline := time.Now().Add(30 * time.Second); metric(t, w, "capper_refunds_total", "result", "unknown") < 1 ||
		metric(t, w, "capper_refunds_total", "result", "applied")+metric(t, w, "capper_refunds_total", "result", "nothing") < 11; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the statuses were not all read in 30s")
		}
	}
	for result, want := range map[string]float64{"applied": 10, "nothing": 1, "ignored": 5, "unknown": 1} {
		if got := metric(t, w, "capper_refunds_total", "result", result); got != want {
			t.Errorf("capper_refunds_total{result=%s} = %v, want %v", result, got, want)
		}
	}

	e.produce(holdIntents("b", "push", "marketing", users, 1))
	e.produce(holdIntents("a", "push", "marketing", 1, 1)) // user 0's refunded intent, redelivered
	o := e.waitDrained(60*time.Second, w)
	allowedB := map[string]bool{}
	for _, m := range o.deliveries {
		if strings.HasPrefix(idOf(m), "b-") {
			allowedB[string(m.Key)] = true
		}
	}
	for u := range users {
		if want := u < 10; allowedB[fmt.Sprint(u)] != want {
			t.Errorf("user %d: intent b allowed %v, want %v (refunded: %v)", u, allowedB[fmt.Sprint(u)], want, want)
		}
	}
	if n := count(o.deliveries, "capper-duplicate", "true"); n != 1 {
		t.Errorf("%d deliveries marked duplicate, want the redelivered refunded intent", n)
	}
	var dlq []string
	for _, m := range o.dlq {
		dlq = append(dlq, header(m, "capper-error"))
	}
	if len(dlq) != 1 || !strings.HasPrefix(dlq[0], "at:") {
		t.Fatalf("dead letters %q, want the status without at", dlq)
	}
	refunded := map[uint64]map[string]bool{}
	for u := range 10 {
		refunded[uint64(u)] = map[string]bool{fmt.Sprintf("a-%d-0", u): true}
	}
	sends, err := audit.Sends(o.deliveries)
	if err != nil {
		t.Fatal(err)
	}
	rules := holdRules(t, pol)
	if v := audit.Check(rules, audit.WithoutRefunded(sends, refunded)); len(v) > 0 {
		t.Fatalf("audit: %d violations, first: %s", len(v), v[0])
	}
	if v := audit.Check(rules, sends); len(v) != 10 {
		t.Fatalf("without the refunds, the audit sees %d users above the cap, want the 10 refunded", len(v))
	}
}
