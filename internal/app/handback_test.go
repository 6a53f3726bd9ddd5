package app_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/kafka"
)

// handBackPolicy is pacePolicy with one push a user a day, so a send
// handed back and decided again while it still counted would be a
// (marked) duplicate, and a second push to a user capped.
var handBackPolicy = strings.Replace(pacePolicy, "{name: per-minute, window: 1m, max: 5}", "{name: per-day, window: 24h, max: 1}", 1)

// handBackStatuses are throttled statuses handing deliveries ds back.
func handBackStatuses(t *testing.T, ds []kafka.Message) []kafka.Message {
	t.Helper()
	var st []kafka.Message
	for _, d := range ds {
		v, err := audit.HandBackStatus(d, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		st = append(st, kafka.Message{Key: d.Key, Value: v})
	}
	return st
}

// TestPacingHandBack: two workers drain a 1000-push blast over a budget of
// 200/s (5 s of it) while the sender hands back the first 40 sends it gets
// (throttled, with the delivery record), one of them twice (a status read
// again). Each is given back and held again in its lane's retry topic,
// ahead of the lane: released again before the blast's last half, decided
// anew (allowed, not a duplicate: the throttled send no longer counts),
// and delivered once more; the status sent twice gives a marked duplicate.
// Every input and every status handing a send back has one outcome; the
// caps hold over what was delivered (a second push to each of those users
// is capped: the send counts once).
func TestPacingHandBack(t *testing.T) {
	if !strings.Contains(handBackPolicy, "per-day") {
		t.Fatalf("pacePolicy's limit changed: handBackPolicy is\n%s", handBackPolicy)
	}
	e := newE2E(t, "single")
	e.publish(3000, 3)
	cfg := e.paceConfig(handBackPolicy)
	cfg.Kafka.LaneRecords = "compact" // a hand-back's headers beside capper-held
	w1, w2 := e.start("w1", cfg), e.start("w2", cfg)
	e.produce(paceIntents(0, 1000, "blast", "push", "marketing", "normal"))

	// The sender: the first 40 deliveries are throttled and handed back.
	first := e.firstDeliveries(40, 30*time.Second)
	st := handBackStatuses(t, first)
	st = append(st, st[0]) // read again
	e.kafka.Produce(t, tStatus, st)

	// Drained: every input and every hand-back has an outcome.
	o := e.waitHandedBack(90*time.Second, w1, w2)
	e.verify(o, cfg, false)
	if dups := checkDeliveredAgain(t, first, o); dups != 1 {
		t.Errorf("%d marked duplicates after the hand-backs, want 1 (the status read twice)", dups)
	}
	sum := func(name string, labels ...string) float64 {
		return metric(t, w1, name, labels...) + metric(t, w2, name, labels...)
	}
	if n := sum("capper_handed_back_total", "result", "applied"); n != 40 {
		t.Errorf("capper_handed_back_total{result=applied} = %v, want 40 (the second copy gives back nothing)", n)
	}
	if n := sum("capper_handed_back_total"); n != 41 {
		t.Errorf("capper_handed_back_total = %v, want 41 statuses", n)
	}

	// The send counts once: a second push to each of those users is capped.
	var second []kafka.Message
	for _, d := range first {
		second = append(second, kafka.Message{Key: d.Key, Value: fmt.Appendf(nil,
			`{"id":"again-%s","user_id":%s,"campaign_id":"again","channel":"push","category":"marketing","priority":"normal"}`, d.Key, d.Key)})
	}
	e.produce(second)
	o = e.waitHandedBack(60*time.Second, w1, w2)
	if n := countCampaign(o.suppressed, "again", "capped"); n != len(second) {
		t.Errorf("%d of the %d second pushes capped, want all: the send handed back counts once", n, len(second))
	}
	if compact, headers := laneForms(t, e); compact < 1000 || headers != 0 {
		t.Errorf("lane records: %d compact, %d in headers; want every one compact (at least the 1000 held)", compact, headers)
	}
}

// firstDeliveries waits for the first n deliveries (within timeout).
func (e *e2e) firstDeliveries(n int, timeout time.Duration) []kafka.Message {
	e.t.Helper()
	var first []kafka.Message
	deadline := time.Now().Add(timeout)
	for len(first) < n {
		if time.Now().After(deadline) {
			e.t.Fatalf("%d deliveries in %s, want %d", len(first), timeout, n)
		}
		time.Sleep(20 * time.Millisecond)
		first = e.read().deliveries
	}
	return first[:n]
}

// checkDeliveredAgain: each send of first (handed back) is delivered once
// more, decided anew after the hand-back, released from its lane's retry
// topic ahead of the blast's last half. It returns how many marked
// duplicates came after the hand-backs.
func checkDeliveredAgain(t *testing.T, first []kafka.Message, o outputs) (dups int) {
	t.Helper()
	var releases []time.Time // the blast's first deliveries' releases
	byID := map[string][]kafka.Message{}
	for _, m := range o.deliveries {
		byID[idOf(m)] = append(byID[idOf(m)], m)
		if header(m, dispatch.HeaderHandedBack) == "" && header(m, "capper-duplicate") != "true" {
			releases = append(releases, headerTime(t, m, dispatch.HeaderReleasedAt))
		}
	}
	slices.SortFunc(releases, time.Time.Compare)
	half := releases[len(releases)/2]
	for _, d := range first {
		id := idOf(d)
		var again []kafka.Message
		for _, m := range byID[id] {
			if header(m, "capper-source") == header(d, "capper-source") {
				continue // the throttled delivery itself
			}
			if header(m, "capper-duplicate") == "true" {
				dups++
				continue
			}
			again = append(again, m)
		}
		if len(again) != 1 {
			t.Errorf("%s: delivered %d times after its hand-back, want once", id, len(again))
			continue
		}
		m := again[0]
		if header(m, dispatch.HeaderHandedBack) != header(d, "capper-source") {
			t.Errorf("%s: capper-handed-back %q, want the throttled delivery's input %q", id, header(m, dispatch.HeaderHandedBack), header(d, "capper-source"))
		}
		if lane := header(m, dispatch.HeaderLane); lane != header(d, dispatch.HeaderLane) {
			t.Errorf("%s: lane %q, want its first lane %q", id, lane, header(d, dispatch.HeaderLane))
		}
		if !decidedAt(t, m).After(decidedAt(t, d)) {
			t.Errorf("%s: decided again at %s, not after its throttled delivery's %s", id, header(m, "capper-decided-at"), header(d, "capper-decided-at"))
		}
		if rel := headerTime(t, m, dispatch.HeaderReleasedAt); !rel.Before(half) {
			t.Errorf("%s: released again at %s, after half the blast (%s): not ahead of its lane", id, rel.Format(time.RFC3339Nano), half.Format(time.RFC3339Nano))
		}
	}
	return dups
}

// waitHandedBack waits until every input and every status that hands a
// send back has an outcome.
func (e *e2e) waitHandedBack(timeout time.Duration, workers ...*worker) outputs {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	for deadline := time.Now().Add(timeout); ; time.Sleep(200 * time.Millisecond) {
		in, err := audit.ReadTopic(ctx, e.kafka.Addrs, tIn)
		if err != nil {
			e.t.Fatal(err)
		}
		o := e.read()
		c := audit.NewCopies(tIn, in, o.deliveries, o.suppressed, o.dlq)
		c.AddInputs(tStatus, audit.HandBacks(e.statuses(ctx)))
		missing := c.Missing()
		if len(missing) == 0 && len(in) == e.inputs {
			return o
		}
		if time.Now().After(deadline) {
			var logs []string
			for _, w := range workers {
				logs = append(logs, w.name+":\n"+tail(w.log.String(), 3000))
			}
			e.t.Fatalf("%d inputs without an outcome after %s, e.g. %v\n%s", len(missing), timeout, missing[:min(5, len(missing))], strings.Join(logs, "\n"))
		}
	}
}

// TestPacingHandBackWhileRedisIsDown: with on_redis_error: allow, a
// status handing a send back while Redis is down cannot give it back (the
// send stays counted); the intent is held again all the same, its lane
// record says when the throttled send was decided (capper-throttled-at),
// and once Redis is back its decision takes that send as its own:
// delivered once more, not a duplicate, decided at the throttled send's
// time, counted once (a second push to the user is capped).
func TestPacingHandBackWhileRedisIsDown(t *testing.T) {
	e := newE2E(t, "single")
	e.publish(3000, 3)
	cfg := e.paceConfig(handBackPolicy)
	cfg.Worker.OnRedisError = "allow"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	w := e.start("w1", cfg)
	e.produce(paceIntents(0, 100, "blast", "push", "marketing", "normal"))
	var first []kafka.Message
	for deadline := time.Now().Add(30 * time.Second); len(first) < 10; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries in 30 s, want 10", len(first))
		}
		first = e.read().deliveries
	}
	first = first[:10]
	e.pauseRedis()
	e.kafka.Produce(t, tStatus, handBackStatuses(t, first))
	for deadline := time.Now().Add(60 * time.Second); metric(t, w, "capper_handed_back_total", "result", "failed") < 10; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			e.resumeRedis()
			t.Fatalf("capper_handed_back_total{result=failed} = %v after 60 s, want 10\n%s", metric(t, w, "capper_handed_back_total", "result", "failed"), tail(w.log.String(), 3000))
		}
	}
	e.resumeRedis()
	o := e.waitHandedBack(90*time.Second, w)
	e.verify(o, cfg, false)
	for _, d := range first {
		var again []kafka.Message
		for _, m := range o.deliveries {
			if idOf(m) == idOf(d) && header(m, "capper-source") != header(d, "capper-source") {
				again = append(again, m)
			}
		}
		if len(again) != 1 {
			t.Errorf("%s: delivered %d times after its hand-back, want once", idOf(d), len(again))
			continue
		}
		m := again[0]
		if header(m, "capper-duplicate") != "" || header(m, "capper-decided-at") != header(d, "capper-decided-at") {
			t.Errorf("%s: delivered again with capper-duplicate %q at %s, want its own send (no mark) at %s", idOf(d),
				header(m, "capper-duplicate"), header(m, "capper-decided-at"), header(d, "capper-decided-at"))
		}
	}
	var second []kafka.Message
	for _, d := range first {
		second = append(second, kafka.Message{Key: d.Key, Value: fmt.Appendf(nil,
			`{"id":"again-%s","user_id":%s,"campaign_id":"again","channel":"push","category":"marketing","priority":"normal"}`, d.Key, d.Key)})
	}
	e.produce(second)
	o = e.waitHandedBack(60*time.Second, w)
	if n := countCampaign(o.suppressed, "again", "capped"); n != len(second) {
		t.Errorf("%d of the %d second pushes capped, want all: the send counts once", n, len(second))
	}
}
