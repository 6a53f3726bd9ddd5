package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/control"
	"github.com/capper-dev/capper/internal/objstore"
)

// controlPolicy: one slot per user per 10 minutes, deferring; sms held by
// quiet hours from 16:00 to 16:10 (the test clock starts at 16:00).
const controlPolicy = `
default_policy:
  quiet_hours: {from: "16:00", to: "16:10", channels: [sms], jitter: 1m}
  limits:
    - {name: per-10m, window: 10m, max: 1, on_cap: defer, max_defer: 2h}
`

// TestCampaignControl: campaign control reaches every intent capper holds,
// with two workers, on a single Redis and on a 3-master cluster:
//
//	(f) F is stopped before the workers start: its backlog is cancelled,
//	    none delivered, and its users' next intents get the slots (not
//	    counted);
//	(b) B's second intents wait in a delay tier (on_cap: defer) when B is
//	    stopped: they come back cancelled;
//	(c) C's sms wait for quiet hours when C is stopped: cancelled too;
//	(e) E's low-priority pushes are held for the plan of vip (high) when
//	    vip is stopped: its plan books nothing from then on, so E's next
//	    pushes go at once (not at the end of vip's window), and the held
//	    ones are delivered when they come back;
//	(d) D is paused before its intents come: they wait (capper-reason:
//	    paused, uncounted) and are delivered after the resume, caps
//	    checked then;
//	(g) G3's slot would free after its send_by: cancelled at once; G2's
//	    intents wait in a tier when G2 gets a send-by that passes meanwhile:
//	    cancelled, expired;
//	(a) A's backlog piles up while Redis is stopped (a batch being
//	    decided included) when A is stopped: none is delivered after the
//	    stop was applied.
//
// Every input has exactly one outcome; no delivery of a stopped campaign
// is decided after the workers applied the stop (compared on the
// workers' clock: an order, not a duration); the audit finds no cap
// broken.
func TestCampaignControl(t *testing.T) {
	for _, mode := range []string{"single", "cluster"} {
		t.Run(mode, func(t *testing.T) { testCampaignControl(t, mode) })
	}
}

func testCampaignControl(t *testing.T, mode string) {
	e := newE2E(t, mode)
	e.clock = newFastClock(30) // 16:00 UTC; a real second is 30 s
	e.publish(100, 7)
	cfg := e.holdConfig(controlPolicy)
	cfg.Kafka.Topics.Control = tControl
	cfg.Plans.Source = t.TempDir()
	cfg.Plans.PollInterval = config.Duration(200 * time.Millisecond)
	st, err := objstore.Open(context.Background(), cfg.Plans.Source, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	day := func(hh, mm int) time.Time { return time.Date(2026, 11, 21, hh, mm, 0, 0, time.UTC) }
	publishPlan(t, st, cfg, "vip", "high", day(16, 0), day(16, 20), "push", 0, 20, e.clock.Now())
	c := newController(e, cfg)

	// (f) Stopped before any worker runs; its intents already wait.
	stopF := c.set("F", control.Stopped, "wrong price")
	e.produce(ctlIntents("f", "F", "push", "", 0, 50, 1, ""))
	a, b := e.start("a", cfg), e.start("b", cfg)
	c.workers = []*worker{a, b}
	appliedF := c.applied(stopF)

	c.set("D", control.Paused, "copy review")
	sendBy := func(d time.Duration) string { return e.clock.Now().Add(d).UTC().Format(time.RFC3339) }
	e.produce(ctlIntents("b", "B", "email", "", 50, 70, 2, ""))  // the second of each defers (per-10m)
	e.produce(ctlIntents("c", "C", "sms", "", 70, 90, 1, ""))    // quiet hours
	e.produce(ctlIntents("e", "E", "push", "low", 0, 20, 1, "")) // held for vip's plan
	e.produce(ctlIntents("d", "D", "inapp", "", 20, 30, 1, ""))  // paused
	e.produce(ctlIntents("g1", "G1", "email", "", 90, 100, 1, ""))
	e.produce(ctlIntents("g2", "G2", "email", "", 90, 100, 1, sendBy(30*time.Minute)))
	e.produce(ctlIntents("g3", "G3", "email", "", 90, 95, 1, sendBy(5*time.Minute)))
	// Everything has an outcome but what waits: B's second intents (20),
	// C (20), E (20), D (10) and G2 (10).
	e.waitOutcomes(e.inputs-80, a, b)
	if held := metric(t, a, "capper_held_for_plan_total") + metric(t, b, "capper_held_for_plan_total"); held != 20 {
		t.Fatalf("%v intents held for vip's plan, want 20", held)
	}
	if waiting := metric(t, a, "capper_paused_waiting") + metric(t, b, "capper_paused_waiting"); waiting < 10 {
		t.Fatalf("capper_paused_waiting = %v, want D's 10 intents", waiting)
	}

	// (b), (c), (e) stopped while their intents wait; (g) G2 gets a
	// send-by that passes while its intents wait.
	stopB, stopC, stopVIP := c.set("B", control.Stopped, "broken link"), c.set("C", control.Stopped, "outage"), c.set("vip", control.Stopped, "cancelled")
	g2 := c.setSendBy("G2", e.clock.Now().Add(time.Minute))
	appliedB, appliedC, appliedVIP := c.applied(stopB), c.applied(stopC), c.applied(stopVIP)
	c.applied(g2)
	// (h) F's users get their next intents: F's were not counted.
	e.produce(ctlIntents("h", "H", "push", "", 20, 50, 1, ""))
	// (e) vip's users get E's pushes at once now: vip books nothing.
	e.produce(ctlIntents("e2", "E", "push", "low", 0, 20, 1, ""))

	// (a) A's backlog while Redis cannot decide, then the stop.
	e.pauseRedis()
	e.produce(ctlIntents("a", "A", "email", "", 30, 50, 3, ""))
	stopA := c.set("A", control.Stopped, "wrong audience")
	appliedA := c.applied(stopA)
	e.resumeRedis()

	// (d) Resumed: the paused intents are decided again, caps checked.
	resumeD := c.set("D", control.Active, "")
	appliedD := c.applied(resumeD)

	o := e.waitDrained(3*time.Minute, a, b)
	e.verifyHeld(o, holdRules(t, controlPolicy))
	e.verifyOrder(o)

	want := func(wave, outcome, reason string, n int) {
		t.Helper()
		got := 0
		for _, m := range append(append([]kafka.Message{}, o.deliveries...), o.suppressed...) {
			if strings.HasPrefix(idOf(m), wave+"-") && header(m, "capper-decision") == outcome && header(m, "capper-reason") == reason {
				got++
			}
		}
		if got != n {
			t.Errorf("wave %s: %d %s (reason %q), want %d", wave, got, outcome, reason, n)
		}
	}
	notAfter := func(campaign string, applied time.Time) {
		t.Helper()
		for _, m := range o.deliveries {
			if campaignOf(m) == campaign && decidedAt(t, m).After(applied) {
				t.Errorf("%s of stopped campaign %s delivered, decided at %s, after the stop was applied (%s)",
					idOf(m), campaign, decidedAt(t, m).Format(time.RFC3339Nano), applied.Format(time.RFC3339Nano))
			}
		}
	}
	want("f", "cancelled", "campaign-stopped", 50)
	notAfter("F", appliedF)
	want("h", "allowed", "", 30)
	want("b", "allowed", "", 20)
	want("b", "cancelled", "campaign-stopped", 20)
	notAfter("B", appliedB)
	want("c", "cancelled", "campaign-stopped", 20)
	notAfter("C", appliedC)
	want("e", "allowed", "", 20)
	want("e2", "allowed", "", 20)
	for _, m := range o.deliveries {
		if strings.HasPrefix(idOf(m), "e2-") && !decidedAt(t, m).Before(day(16, 20)) {
			t.Errorf("%s delivered at %s, at the end of vip's window: its booking held the slot after vip was stopped", idOf(m), decidedAt(t, m))
		}
		if campaignOf(m) == "E" && !decidedAt(t, m).After(appliedVIP) {
			t.Errorf("%s delivered at %s, before vip was stopped: its booking held the slot", idOf(m), decidedAt(t, m))
		}
	}
	d := 0
	for _, m := range o.deliveries {
		if campaignOf(m) == "D" {
			d++
			if !decidedAt(t, m).After(appliedD) {
				t.Errorf("%s of paused campaign D decided at %s, before the resume", idOf(m), decidedAt(t, m))
			}
		}
	}
	if d != 10 {
		t.Errorf("%d of D's 10 paused intents delivered after the resume", d)
	}
	want("g1", "allowed", "", 10)
	want("g2", "cancelled", "expired", 10)
	want("g3", "cancelled", "expired", 5)
	notAfter("A", appliedA)
	if n := countCampaign(o.suppressed, "A", "cancelled"); n == 0 {
		t.Errorf("no intent of A was cancelled: the stop did not reach the backlog")
	}
	for _, m := range o.suppressed {
		if header(m, "capper-decision") == "cancelled" && header(m, "capper-reason") == "campaign-stopped" &&
			!strings.HasPrefix(header(m, "capper-control"), tControl+"/") {
			t.Errorf("%s cancelled without a capper-control naming the record: %q", idOf(m), header(m, "capper-control"))
		}
	}
	stopped := metric(t, a, "capper_cancelled_total", "reason", "campaign-stopped") + metric(t, b, "capper_cancelled_total", "reason", "campaign-stopped")
	if want := float64(50 + 20 + 20 + countCampaign(o.suppressed, "A", "cancelled")); stopped != want {
		t.Errorf("capper_cancelled_total{reason=campaign-stopped} = %v, want %v", stopped, want)
	}
	if waiting := metric(t, a, "capper_paused_waiting") + metric(t, b, "capper_paused_waiting"); waiting != 0 {
		t.Errorf("capper_paused_waiting = %v after the resume, want 0", waiting)
	}
	if n := metric(t, a, "capper_control_campaigns", "state", "stopped"); n != 5 {
		t.Errorf("capper_control_campaigns{state=stopped} = %v, want 5 (F, B, C, vip, A)", n)
	}
}

// controller writes control records as `capper campaign` does, on the
// test's clock, and finds when the workers applied them.
type controller struct {
	e       *e2e
	cfg     *config.Config
	workers []*worker
}

func newController(e *e2e, cfg *config.Config) *controller { return &controller{e: e, cfg: cfg} }

func (c *controller) set(campaign string, st control.State, reason string) control.Position {
	c.e.t.Helper()
	return c.write(app.CampaignChange{Campaign: campaign, State: st, Reason: reason, By: "test"})
}

func (c *controller) setSendBy(campaign string, at time.Time) control.Position {
	c.e.t.Helper()
	return c.write(app.CampaignChange{Campaign: campaign, State: control.Active, By: "test", SendBy: at})
}

func (c *controller) write(ch app.CampaignChange) control.Position {
	c.e.t.Helper()
	ch.Now = c.e.clock.Now()
	w, err := app.SetCampaign(context.Background(), c.cfg, ch, slog.New(slog.DiscardHandler))
	if err != nil {
		c.e.t.Fatalf("campaign %s %s: %v", ch.Campaign, ch.State, err)
	}
	return w.Position
}

// applied waits until every worker applied the record at pos and returns
// the latest time one reported applying it (its decision clock): a batch
// decided after that time saw the record.
func (c *controller) applied(pos control.Position) time.Time {
	c.e.t.Helper()
	var latest time.Time
	for _, w := range c.workers {
		deadline := time.Now().Add(30 * time.Second)
		for metric(c.e.t, w, "capper_control_applied_offset", "partition", strconv.Itoa(pos.Partition)) < float64(pos.Offset) ||
			len(seriesOf(c.e.t, w, "capper_control_applied_offset", strconv.Itoa(pos.Partition))) == 0 {
			if time.Now().After(deadline) {
				c.e.t.Fatalf("worker %s did not apply %s in 30s\n%s", w.name, pos, tail(w.log.String(), 3000))
			}
			time.Sleep(20 * time.Millisecond)
		}
		sec := metric(c.e.t, w, "capper_control_applied_timestamp_seconds")
		at := time.UnixMilli(int64(math.Round(sec * 1000))).UTC()
		if at.After(latest) {
			latest = at
		}
	}
	return latest
}

// seriesOf lists the values of name{partition=p} in w's registry.
func seriesOf(t *testing.T, w *worker, name, p string) []float64 {
	t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "partition" && l.GetValue() == p {
					out = append(out, m.GetGauge().GetValue())
				}
			}
		}
	}
	return out
}

// ctlIntents are n intents of campaign per user in [from, to), ids
// <wave>-<user>-<i>; prio and sendBy when not empty.
func ctlIntents(wave, campaign, channel, prio string, from, to, n int, sendBy string) []kafka.Message {
	var msgs []kafka.Message
	for u := from; u < to; u++ {
		for i := range n {
			extra := ""
			if prio != "" {
				extra += fmt.Sprintf(`,"priority":%q`, prio)
			}
			if sendBy != "" {
				extra += fmt.Sprintf(`,"send_by":%q`, sendBy)
			}
			msgs = append(msgs, kafka.Message{Key: fmt.Appendf(nil, "%d", u),
				Value: fmt.Appendf(nil, `{"id":"%s-%d-%d","user_id":%d,"campaign_id":%q,"channel":%q%s}`, wave, u, i, u, campaign, channel, extra)})
		}
	}
	return msgs
}

func campaignOf(m kafka.Message) string {
	v := string(m.Value)
	i := strings.Index(v, `"campaign_id":"`)
	if i < 0 {
		return ""
	}
	v = v[i+len(`"campaign_id":"`):]
	return v[:strings.IndexByte(v, '"')]
}

func countCampaign(msgs []kafka.Message, campaign, decision string) int {
	n := 0
	for _, m := range msgs {
		if campaignOf(m) == campaign && header(m, "capper-decision") == decision {
			n++
		}
	}
	return n
}

// pauseRedis stops every Redis node (SIGSTOP); resumeRedis continues them.
func (e *e2e) pauseRedis() {
	if e.redis != nil {
		e.redis.Pause()
		return
	}
	for _, n := range e.clus.Nodes {
		n.Pause()
	}
}

func (e *e2e) resumeRedis() {
	if e.redis != nil {
		e.redis.Resume()
		return
	}
	for _, n := range e.clus.Nodes {
		n.Resume()
	}
}
