package dispatch

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capper-dev/capper/internal/capping"
)

// These tests run the intent's policy fields (capping, tags, priority,
// time_zone) through a real worker, redis-server and kfake to the engine
// and back into the output headers.

// outcome is where an intent went and as what.
type outcome struct {
	topic string // tDel, tSup or tDLQ
	m     kafka.Message
}

// byID indexes the outputs by the intent id in their value.
func (o outs) byID(t *testing.T) map[string]outcome {
	t.Helper()
	out := map[string]outcome{}
	for topic, list := range map[string][]kafka.Message{tDel: o.del, tSup: o.sup, tDLQ: o.dlq} {
		for _, m := range list {
			var v struct{ ID string }
			if err := json.Unmarshal(m.Value, &v); err != nil {
				t.Fatalf("output on %s: %v", topic, err)
			}
			if _, dup := out[v.ID]; dup {
				t.Fatalf("intent %s has two outcomes", v.ID)
			}
			out[v.ID] = outcome{topic, m}
		}
	}
	return out
}

// want is an expected outcome: topic, capper-decision, capper-limit and
// capper-override ("" for none).
type want struct{ topic, decision, limit, override string }

func checkOutcomes(t *testing.T, got map[string]outcome, wants map[string]want) {
	t.Helper()
	for id, w := range wants {
		g, ok := got[id]
		if !ok {
			t.Errorf("%s: no outcome", id)
			continue
		}
		if g.topic != w.topic || headerValue(g.m, HeaderDecision) != w.decision ||
			headerValue(g.m, HeaderLimit) != w.limit || headerValue(g.m, HeaderOverride) != w.override {
			t.Errorf("%s: on %s, decision %q, limit %q, override %q; want on %s, %q, %q, %q", id, g.topic,
				headerValue(g.m, HeaderDecision), headerValue(g.m, HeaderLimit), headerValue(g.m, HeaderOverride),
				w.topic, w.decision, w.limit, w.override)
		}
	}
}

// clock is a decision clock a test sets.
type clock struct{ ns atomic.Int64 }

func (c *clock) set(t time.Time) { c.ns.Store(t.UnixNano()) }
func (c *clock) now() time.Time  { return time.Unix(0, c.ns.Load()) }

func keyed(user int, value []byte) kafka.Message {
	return kafka.Message{Key: []byte(strconv.Itoa(user)), Value: value}
}

// TestOverrides: a bypass of a campaign the policy lists is delivered past
// a full cap and counted; one of a campaign it does not list is refused and
// capped; bypass-uncounted is exempt and not counted; the same campaign
// without asking is capped as usual.
func TestOverrides(t *testing.T) {
	e := newEnv(t)
	rules := capping.Rules{
		Default: capping.Policy{Limits: []capping.Limit{
			{Name: "push-daily", Window: 24 * time.Hour, Max: 1, Where: capping.Where{Channels: []string{"push"}}},
			{Name: "weekly", Window: 7 * 24 * time.Hour, Max: 5},
		}},
		Channels: testChannels, Categories: testCategories, ExemptCategories: []string{"transactional"},
		Overrides: capping.Overrides{Campaigns: []string{"outage"}},
		TimeZone:  time.UTC,
	}
	e.engine = e.newEngineWith(t, rules)
	in := []kafka.Message{
		keyed(1, intentOf("p1", 1, "spring", "push", "")),
		keyed(1, intentOf("p2", 1, "spring", "push", "")),
		keyed(1, intentOf("p3", 1, "outage", "push", `,"capping":"bypass"`)),
		keyed(1, intentOf("p4", 1, "spring", "push", `,"capping":"bypass"`)),
		keyed(1, intentOf("p5", 1, "outage", "push", `,"capping":"bypass-uncounted"`)),
		keyed(1, intentOf("p6", 1, "outage", "push", "")),
		keyed(1, intentOf("p7", 1, "spring", "push", `,"capping":"bypass-uncounted"`)),
	}
	e.kafka.Produce(t, tIn, in)
	r := e.start(nil)
	o := e.waitOutcomes(len(in))
	checkOutcomes(t, o.byID(t), map[string]want{
		"p1": {tDel, DecisionAllowed, "", ""},
		"p2": {tSup, DecisionCapped, "push-daily", ""},
		"p3": {tDel, DecisionAllowed, "", "bypass"},
		"p4": {tSup, DecisionCapped, "push-daily", "refused"},
		"p5": {tDel, DecisionExempt, "", "bypass-uncounted"},
		"p6": {tSup, DecisionCapped, "push-daily", ""},
		"p7": {tSup, DecisionCapped, "push-daily", "refused"},
	})
	// p1 and the bypass p3 are counted; bypass-uncounted p5 is not. (The
	// full push-daily keeps only its max, the latest.)
	st, err := e.engine.Inspect(context.Background(), 1, "none", capping.InspectOptions{At: time.Now()})
	if err != nil || len(st) != 2 || st[1].Limit.Name != "weekly" || st[1].Count != 2 {
		t.Fatalf("user 1's limits: %+v (%v), want weekly at 2", st, err)
	}
	for result, n := range map[string]float64{"bypass": 1, "bypass-uncounted": 1, "refused": 2} {
		if got := testutil.ToFloat64(r.w.m.overrides.WithLabelValues(result)); got != n {
			t.Errorf("capper_overrides_total{result=%q} = %v, want %v", result, got, n)
		}
	}
}

// TestIntentFieldsReachTheEngine: tags select the limits that count an
// intent (escapes decoded), priority uses reserved slots, and time_zone
// places calendar days: an hour after 15:30 UTC is the next day in
// Singapore but the same day in UTC. Bad ones are dead-lettered, named.
func TestIntentFieldsReachTheEngine(t *testing.T) {
	e := newEnv(t)
	rules := capping.Rules{
		Default: capping.Policy{Limits: []capping.Limit{
			{Name: "email-day", Calendar: capping.Day, Max: 1, Where: capping.Where{Channels: []string{"email"}}},
			{Name: "promo", Window: 24 * time.Hour, Max: 1, Where: capping.Where{Tags: []string{"promo"}}},
			{Name: "inapp-week", Window: 7 * 24 * time.Hour, Max: 2, Where: capping.Where{Channels: []string{"inapp"}},
				Reserve: capping.Reserve{Slots: 1, Below: capping.High}},
		}},
		Channels: testChannels, Categories: testCategories, ExemptCategories: []string{"transactional"},
		TimeZone: time.UTC,
	}
	e.engine = e.newEngineWith(t, rules)
	// Yesterday 15:30 UTC (23:30 in Singapore), then an hour later (00:30
	// the next day in Singapore, the same day in UTC and New York).
	t0 := time.Now().UTC().Truncate(24 * time.Hour).Add(-24*time.Hour + 15*time.Hour + 30*time.Minute)
	t1 := t0.Add(time.Hour)
	var c clock
	c.set(t0)
	first := []kafka.Message{
		keyed(10, intentValue("z10a", 10, "email", `,"time_zone":"Asia/Singapore"`)),
		keyed(11, intentValue("z11a", 11, "email", "")),
		keyed(12, intentValue("z12a", 12, "email", `,"time_zone":"UTC"`)),
		keyed(13, intentValue("z13a", 13, "email", `,"time_zone":"America/New_York"`)),

		keyed(20, intentValue("t20a", 20, "sms", `,"tags":["promo"]`)),
		keyed(20, intentValue("t20b", 20, "sms", `,"tags":["spring","promo"]`)),
		keyed(20, intentValue("t20c", 20, "sms", `,"tags":["spring"]`)),
		keyed(20, intentValue("t20d", 20, "sms", "")),
		keyed(21, intentValue("t21a", 21, "sms", `,"tags":["caf\u00e9","pro\u006do"]`)),
		keyed(21, intentValue("t21b", 21, "sms", `,"tags":["promo"]`)),

		keyed(30, intentValue("r30a", 30, "inapp", "")),
		keyed(30, intentValue("r30b", 30, "inapp", `,"priority":"normal"`)),
		keyed(30, intentValue("r30c", 30, "inapp", `,"priority":"high"`)),
		keyed(30, intentValue("r30d", 30, "inapp", `,"priority":"high"`)),
		keyed(31, intentValue("r31a", 31, "inapp", `,"priority":"low"`)),
		keyed(31, intentValue("r31b", 31, "inapp", `,"priority":"low"`)),
		keyed(32, intentValue("r32a", 32, "inapp", `,"priority":"high"`)),
		keyed(32, intentValue("r32b", 32, "inapp", `,"priority":"high"`)),

		keyed(40, intentValue("x40a", 40, "push", `,"tags":["a",3]`)),
		keyed(40, intentValue("x40b", 40, "push", `,"time_zone":"Mars/Olympus"`)),
	}
	e.kafka.Produce(t, tIn, first)
	r := e.start(func(o *Options) { o.Now = c.now })
	e.waitOutcomes(len(first))
	c.set(t1)
	second := []kafka.Message{
		keyed(10, intentValue("z10b", 10, "email", `,"time_zone":"Asia/Singapore"`)),
		keyed(11, intentValue("z11b", 11, "email", "")),
		keyed(12, intentValue("z12b", 12, "email", `,"time_zone":"UTC"`)),
		keyed(13, intentValue("z13b", 13, "email", `,"time_zone":"America/New_York"`)),
	}
	e.kafka.Produce(t, tIn, second)
	o := e.waitOutcomes(len(first) + len(second))
	got := o.byID(t)
	checkOutcomes(t, got, map[string]want{
		"z10a": {tDel, DecisionAllowed, "", ""},
		"z10b": {tDel, DecisionAllowed, "", ""}, // a new day in Singapore
		"z11a": {tDel, DecisionAllowed, "", ""},
		"z11b": {tSup, DecisionCapped, "email-day", ""}, // the policy's zone: UTC
		"z12a": {tDel, DecisionAllowed, "", ""},
		"z12b": {tSup, DecisionCapped, "email-day", ""},
		"z13a": {tDel, DecisionAllowed, "", ""},
		"z13b": {tSup, DecisionCapped, "email-day", ""},

		"t20a": {tDel, DecisionAllowed, "", ""},
		"t20b": {tSup, DecisionCapped, "promo", ""}, // any of its tags
		"t20c": {tDel, DecisionAllowed, "", ""},     // promo does not count it
		"t20d": {tDel, DecisionAllowed, "", ""},
		"t21a": {tDel, DecisionAllowed, "", ""},
		"t21b": {tSup, DecisionCapped, "promo", ""}, // pro\u006do was promo

		"r30a": {tDel, DecisionAllowed, "", ""},
		"r30b": {tSup, DecisionCapped, "inapp-week", ""}, // the last slot is for high
		"r30c": {tDel, DecisionAllowed, "", ""},
		"r30d": {tSup, DecisionCapped, "inapp-week", ""},
		"r31a": {tDel, DecisionAllowed, "", ""},
		"r31b": {tSup, DecisionCapped, "inapp-week", ""},
		"r32a": {tDel, DecisionAllowed, "", ""},
		"r32b": {tDel, DecisionAllowed, "", ""},

		"x40a": {tDLQ, "", "", ""},
		"x40b": {tDLQ, "", "", ""},
	})
	for id, msg := range map[string]string{"x40a": "tags[1]: must be a JSON string, got a number", "x40b": `time_zone: "Mars/Olympus" is not an IANA time zone`} {
		if v := headerValue(got[id].m, HeaderError); v != msg {
			t.Errorf("%s: capper-error %q, want %q", id, v, msg)
		}
	}
	for field, n := range map[string]float64{"tags": 1, "time_zone": 1} {
		if v := testutil.ToFloat64(r.w.m.invalid.WithLabelValues(field)); v != n {
			t.Errorf("capper_invalid_intents_total{field=%q} = %v, want %v", field, v, n)
		}
	}
	// A capped day frees at the next midnight of the intent's zone: 7.5
	// hours later in UTC, 11.5 or 12.5 (daylight saving) in New York.
	for id, zone := range map[string]*time.Location{"z11b": time.UTC, "z13b": mustZone(t, "America/New_York")} {
		y, m, d := t1.In(zone).Date()
		wantMs := time.Date(y, m, d+1, 0, 0, 0, 0, zone).Sub(t1).Milliseconds()
		if v := headerValue(got[id].m, HeaderRetryAfter); v != strconv.FormatInt(wantMs, 10) {
			t.Errorf("%s: capper-retry-after-ms %s, want %d", id, v, wantMs)
		}
	}
}
