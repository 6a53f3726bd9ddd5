package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/pacing"

	"github.com/capper-dev/capper/configs"
	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/policy"
)

// Each audit check of the demo fails on a crafted violation and passes
// without it: the verdict the demo prints comes from the records.

func testRules(t *testing.T) capping.Rules {
	t.Helper()
	dir := t.TempDir()
	cfg, err := demoConfig([]string{"127.0.0.1:9092"}, "127.0.0.1:6379", dir, dir)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := demoRules(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// rec is an output record: value, then header key/value pairs.
func rec(value string, headers ...string) kafka.Message {
	m := kafka.Message{Value: []byte(value)}
	for i := 0; i+1 < len(headers); i += 2 {
		m.Headers = append(m.Headers, kafka.Header{Key: headers[i], Value: []byte(headers[i+1])})
	}
	return m
}

var day = time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)

func at(hh, mm int) string {
	return stamp(day.Add(time.Duration(hh)*time.Hour + time.Duration(mm)*time.Minute))
}

func sends(t *testing.T, deliveries ...kafka.Message) []audit.Send {
	t.Helper()
	s, err := audit.Sends(deliveries)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func wantViolations(t *testing.T, r checkResult, want ...string) {
	t.Helper()
	if len(r.violations) != len(want) {
		t.Fatalf("%s: %d violations, want %d:\n%s", r.name, len(r.violations), len(want), strings.Join(r.violations, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(r.violations[i], w) {
			t.Errorf("%s: violation %d is %q, want it to say %q", r.name, i, r.violations[i], w)
		}
	}
}

// TestCheckCaps: two sends of a "new" user within a day (max 1) fail it,
// unless the first was refunded (its delivery failed).
func TestCheckCaps(t *testing.T) {
	rules := testRules(t)
	d := func(id, at string) kafka.Message {
		return rec(`{"id":"`+id+`","user_id":7,"campaign_id":"c","channel":"push"}`,
			"capper-decision", "allowed", "capper-segment", "new", "capper-decided-at", at)
	}
	ok := sends(t, d("a", at(16, 0)), d("b", at(16+24, 0)))
	wantViolations(t, checkCaps(rules, ok, nil))
	bad := sends(t, d("a", at(16, 0)), d("b", at(16+24, 0)), d("c", at(16+25, 0)))
	wantViolations(t, checkCaps(rules, bad, nil), `user 7 (segment new): 2 sends in the 24h0m0s window`)
	r := checkCaps(rules, bad, map[uint64]map[string]bool{7: {"b": true}})
	wantViolations(t, r)
	if !strings.Contains(r.ok, "2 counted sends (1 refunded ones left out)") {
		t.Errorf("caps: %q", r.ok)
	}
}

// TestCheckRefusals: a "new" user's intent capped by daily (max 1) after
// a send that day is explained; one capped with no send before it is not.
func TestCheckRefusals(t *testing.T) {
	rules := testRules(t)
	d := func(id, decision, at string) kafka.Message {
		return rec(`{"id":"`+id+`","user_id":7,"campaign_id":"c","channel":"push"}`,
			"capper-decision", decision, "capper-segment", "new", "capper-decided-at", at, "capper-limit", "daily")
	}
	refusals := func(ms ...kafka.Message) []audit.Refusal {
		t.Helper()
		r, err := audit.Refusals(ms)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	dels := sends(t, d("a", "allowed", at(9, 0)))
	r := checkRefusals(rules, dels, nil, refusals(d("b", "capped", at(10, 0)), d("x", "cancelled", at(10, 0))))
	wantViolations(t, r)
	if !strings.HasPrefix(r.ok, "1 capped intents, each explained") {
		t.Errorf("refusals: %q", r.ok)
	}
	wantViolations(t, checkRefusals(rules, dels, nil, refusals(d("b", "capped", at(10, 0)), d("c", "capped", at(8, 0)))),
		`user 7 (segment new): intent "c" capped by "daily" at 2026-11-24T08:00:00.000Z (policy ): its window held 0 sends at most, and the limit allows 1`)
	// A refunded send may or may not have counted: it still explains.
	wantViolations(t, checkRefusals(rules, dels, map[uint64]map[string]bool{7: {"a": true}}, refusals(d("b", "capped", at(10, 0)))))
}

// TestCheckQuiet: a subscriber's push decided at 04:00 in Berlin is
// inside quiet hours (21:00-08:00); at 11:00 it is not; an email is never.
func TestCheckQuiet(t *testing.T) {
	rules := testRules(t)
	d := func(id, channel, at string) kafka.Message {
		return rec(`{"id":"`+id+`","user_id":21500,"campaign_id":"c","channel":"`+channel+`","time_zone":"Europe/Berlin"}`,
			"capper-decision", "allowed", "capper-segment", segSubscribers, "capper-decided-at", at)
	}
	wantViolations(t, checkQuiet(rules, sends(t, d("a", "push", at(10, 0)), d("b", "email", at(3, 0)))))
	wantViolations(t, checkQuiet(rules, sends(t, d("a", "push", at(10, 0)), d("c", "push", at(3, 0)))),
		`user 21500 (segment subscribers): push send "c" decided at 04:00:00 local time, inside quiet hours`)
}

// TestCheckHolds: an intent held for a plan after its window ended, or
// until past its end, or deferred past it, or held for a campaign with no
// plan, is a violation; one held within the window is not.
func TestCheckHolds(t *testing.T) {
	plans := map[string]time.Time{campCart: day.Add(19 * time.Hour)}
	held := func(id, campaign, at, retryMs string) kafka.Message {
		return rec(`{"id":"`+id+`","user_id":20000,"campaign_id":"newsletter","channel":"email"}`,
			"capper-decision", "capped", "capper-held-for", campaign, "capper-decided-at", at, "capper-retry-after-ms", retryMs,
			"capper-source", "send-intents/0/1")
	}
	tier := func(id, notBefore string) kafka.Message {
		return rec(`{"id":"`+id+`","user_id":20000,"campaign_id":"newsletter","channel":"email"}`,
			"capper-decision", "deferred", "capper-held-for", campCart, "capper-not-before", notBefore)
	}
	good := outputs{suppressed: []kafka.Message{held("a", campCart, at(9, 0), "36000000"), rec(`{"id":"x"}`, "capper-decision", "capped")},
		tiers: []kafka.Message{tier("t", at(19, 0))}}
	r := checkHolds(plans, good)
	wantViolations(t, r)
	if !strings.HasPrefix(r.ok, "2 intents held for a plan") {
		t.Errorf("holds: %q", r.ok)
	}
	bad := good
	bad.suppressed = append(slices.Clone(good.suppressed), held("late", campCart, at(19, 30), "0"), held("long", campCart, at(9, 0), "40000000"),
		held("vip", "vip", at(9, 0), "1000"))
	bad.tiers = append(slices.Clone(good.tiers), tier("t2", at(20, 0)))
	wantViolations(t, checkHolds(plans, bad),
		`late (input send-intents/0/1): held for cart-rescue at 2026-11-24T19:30:00.000Z, when its plan's window had ended (2026-11-24T19:00:00.000Z)`,
		`long (input send-intents/0/1): held for cart-rescue until 2026-11-24T20:06:40.000Z, past its plan's end`,
		`vip (input send-intents/0/1): held for vip, which has no plan`,
		`t2 (input ): deferred for cart-rescue until 2026-11-24T20:00:00.000Z, past its plan's end`)
}

// TestCheckOutcomes: an input without an outcome, one with two, an
// output naming no input and an input that waited in a tier then was
// dead-lettered are violations; a dead-lettered delivery status is not an
// intent's outcome.
func TestCheckOutcomes(t *testing.T) {
	in := func(p int, offs ...int64) []kafka.Message {
		var out []kafka.Message
		for _, o := range offs {
			out = append(out, kafka.Message{Partition: p, Offset: o})
		}
		return out
	}
	src := func(s string) kafka.Message { return rec(`{}`, "capper-source", s) }
	in2 := func(topic, s string) kafka.Message { m := src(s); m.Topic = topic; return m }
	del := func(s string) kafka.Message { return in2(topicDel, s) }
	sup := func(s string) kafka.Message { return in2(topicSup, s) }
	dlq := func(s string) kafka.Message { return in2(topicDLQ, s) }
	good := outputs{input: in(0, 0, 1, 2), deliveries: []kafka.Message{del("send-intents/0/0"), del("send-intents/0/2")},
		suppressed: []kafka.Message{sup("send-intents/0/1")}, dlq: []kafka.Message{dlq("delivery-status/1/5")},
		tiers: []kafka.Message{src("send-intents/0/2"), src("send-intents/0/2")}}
	r := checkOutcomes(topicIn, good)
	wantViolations(t, r)
	if r.ok != "3 inputs, each with exactly one outcome (1 of them after waiting in the delay tiers)" {
		t.Errorf("outcomes: %q", r.ok)
	}
	// A status handing a push back is an input: its outcome names it.
	handBack := rec(`{"id":"p1","user_id":1,"status":"throttled","at":"2026-11-21T16:00:05Z","delivery":{"value":{},"headers":{}}}`)
	handBack.Topic, handBack.Partition, handBack.Offset = topicStatus, 0, 7
	good.statuses = []kafka.Message{handBack, rec(`{"id":"p2","user_id":1,"status":"bounced","at":"2026-11-21T16:00:05Z"}`)}
	good.deliveries = append(good.deliveries, del("delivery-status/0/7"))
	r = checkOutcomes(topicIn, good)
	wantViolations(t, r)
	if !strings.HasSuffix(r.ok, "; so has each of the 1 delivery statuses that handed a throttled push back") {
		t.Errorf("outcomes with a hand-back: %q", r.ok)
	}
	good.deliveries = good.deliveries[:len(good.deliveries)-1]
	wantViolations(t, checkOutcomes(topicIn, good), "input delivery-status/0/7 has no outcome: lost")
	good.statuses = nil
	bad := outputs{input: in(0, 0, 1, 2, 3), deliveries: []kafka.Message{del("send-intents/0/0"), del("send-intents/0/9")},
		suppressed: []kafka.Message{sup("send-intents/0/1")}, dlq: []kafka.Message{dlq("send-intents/0/1"), dlq("send-intents/0/3")},
		tiers: []kafka.Message{src("send-intents/0/3")}}
	wantViolations(t, checkOutcomes(topicIn, bad),
		"an output names input send-intents/0/9, which the input topic does not hold",
		"input send-intents/0/2 has no outcome: lost",
		"input send-intents/0/1 ("+topicSup+", "+topicDLQ+") has several outcomes",
		"input send-intents/0/3 waited in a delay tier and ended in ["+topicDLQ+"], not one delivery or suppressed record")
}

// TestCheckStop: a delivery of the stopped campaign decided after the
// stop was applied is a violation; one before it, or of another
// campaign, is not.
func TestCheckStop(t *testing.T) {
	applied := day.Add(9*time.Hour + 2*time.Second)
	d := func(id, campaign string, at time.Time) kafka.Message {
		return rec(`{"id":"`+id+`","user_id":22500,"campaign_id":"`+campaign+`","channel":"push"}`,
			"capper-decision", "allowed", "capper-decided-at", stamp(at))
	}
	stops := []stopFact{{campFlash, applied}, {campDigest, applied.Add(time.Minute)}}
	good := []kafka.Message{d("a", campFlash, applied.Add(-time.Millisecond)), d("b", campFlash, applied), d("c", "other", applied.Add(time.Hour)),
		d("d", campDigest, applied.Add(time.Minute))}
	r := checkStop(stops, good)
	wantViolations(t, r)
	if want := "no delivery of flash-sale decided after 2026-11-24T09:00:02.000Z, nor of weekly-digest after 2026-11-24T09:01:02.000Z, when the worker applied their stops"; r.ok != want {
		t.Errorf("ok: %q, want %q", r.ok, want)
	}
	wantViolations(t, checkStop(stops, append(good, d("late", campFlash, applied.Add(time.Millisecond)), d("later", campDigest, applied.Add(time.Hour)))),
		"late of stopped campaign flash-sale delivered, decided at 2026-11-24T09:00:02.001Z, after the stop was applied (2026-11-24T09:00:02.000Z)",
		"later of stopped campaign weekly-digest delivered, decided at 2026-11-24T10:00:02.000Z, after the stop was applied (2026-11-24T09:01:02.000Z)")
}

// pacedDelivery is a delivery of a push through FCM, held in lane
// (none: not held), released and decided at the times given.
func pacedDelivery(id, category, lane string, released, decided time.Time) kafka.Message {
	h := []string{"capper-decision", "allowed", "capper-decided-at", stamp(decided)}
	if lane != "" {
		h = append(h, "capper-lane", lane, "capper-released-at", stamp(released))
	}
	return rec(`{"id":"`+id+`","user_id":23000,"campaign_id":"c","channel":"push","category":"`+category+`","route":"fcm"}`, h...)
}

var testBudgets = []budgetFact{{name: budgetName, rate: 10, burst: 2, where: pacing.Where{Channels: []string{"push"}, Routes: []string{paceRoute}}}}

// TestCheckBudgets: 12 releases within a second (1.01 x 10 + 2 = 12.1)
// pass; a 13th within the same second is a violation; releases a second
// apart are not in the same window.
func TestCheckBudgets(t *testing.T) {
	t0 := day.Add(9 * time.Hour)
	var dels []kafka.Message
	for i := range 12 {
		at := t0.Add(time.Duration(i) * 80 * time.Millisecond)
		dels = append(dels, pacedDelivery(fmt.Sprint(i), "marketing", "push-fcm/bulk", at, at))
	}
	late := t0.Add(time.Second) // the window of the first closed: the second one's
	dels = append(dels, pacedDelivery("12", "marketing", "push-fcm/bulk", late, late))
	r := checkBudgets(testBudgets, dels)
	wantViolations(t, r)
	if !strings.Contains(r.ok, "push-fcm at most 12 releases in any one second of its 13 (1.01 x 10 + 2 = 12.1)") {
		t.Errorf("ok: %q", r.ok)
	}
	early := t0.Add(999 * time.Millisecond)
	wantViolations(t, checkBudgets(testBudgets, append(dels, pacedDelivery("13", "marketing", "push-fcm/urgent", early, early))),
		"budget push-fcm: 13 releases from 2026-11-24T09:00:00.000Z to 2026-11-24T09:00:01.000Z, above 1.01 x 10 + 2 = 12.1 in one second")
	// Deliveries of other lanes' prefixes and never held ones are not its
	// releases.
	wantViolations(t, checkBudgets(testBudgets, append(dels, pacedDelivery("14", "transactional", "", early, early),
		pacedDelivery("15", "marketing", "push-fcm-2/bulk", early, early))))
}

// TestCheckReleases: a paced push decided at or after its release passes;
// one decided before it, one delivered without being held, and an exempt
// one that was held are violations; an email is not paced.
func TestCheckReleases(t *testing.T) {
	rules := testRules(t)
	t0 := day.Add(9 * time.Hour)
	good := []kafka.Message{pacedDelivery("a", "marketing", "push-fcm/bulk", t0, t0), pacedDelivery("b", "", "push-fcm/urgent", t0, t0.Add(time.Second)),
		pacedDelivery("r", "transactional", "", t0, t0),
		rec(`{"id":"e","user_id":23000,"campaign_id":"c","channel":"email","route":"fcm"}`, "capper-decided-at", stamp(t0))}
	r := checkReleases(rules, testBudgets, good)
	wantViolations(t, r)
	if want := "2 deliveries of paced intents, each held and decided at or after its release; 1 exempt ones a budget covers, none held"; r.ok != want {
		t.Errorf("ok: %q, want %q", r.ok, want)
	}
	wantViolations(t, checkReleases(rules, testBudgets, append(good, pacedDelivery("early", "marketing", "push-fcm/bulk", t0, t0.Add(-time.Millisecond)),
		pacedDelivery("unheld", "marketing", "", t0, t0), pacedDelivery("held", "transactional", "push-fcm/bulk", t0, t0))),
		"early (input ): decided at 2026-11-24T08:59:59.999Z, before its release at 2026-11-24T09:00:00.000Z",
		`unheld (input ): covered by budget push-fcm, delivered from lane ""`,
		"held (input ): exempt (transactional), held in lane push-fcm/bulk")
}

// TestCheckSnoozes: a delivery to a snoozed user decided while the snooze
// was in force is a violation, one before it was applied or after its end
// is not; a cancellation for a snooze must be of a snoozed user, decided
// before its end; a deferral for it must wait for its end.
func TestCheckSnoozes(t *testing.T) {
	applied, until := day.Add(9*time.Hour+2*time.Second), day.Add(13*time.Hour)
	users := map[uint64]userFact{5: {limits: capping.UserLimits{SnoozeUntil: until}, applied: applied},
		6: {limits: capping.UserLimits{Tier: tierFewer}, applied: applied}}
	out := func(id string, user int, headers ...string) kafka.Message {
		m := rec(fmt.Sprintf(`{"id":%q,"user_id":%d,"campaign_id":"c","channel":"push"}`, id, user), headers...)
		m.Key = []byte(strconv.Itoa(user))
		return m
	}
	del := func(id string, user int, at time.Time) kafka.Message {
		return out(id, user, "capper-decision", "allowed", "capper-decided-at", stamp(at))
	}
	cancel := func(id string, user int, at time.Time) kafka.Message {
		return out(id, user, "capper-decision", "cancelled", "capper-reason", "snooze-too-long", "capper-decided-at", stamp(at))
	}
	wait := func(id string, user int, nb time.Time) kafka.Message {
		return out(id, user, "capper-decision", "deferred", "capper-reason", "snoozed", "capper-not-before", stamp(nb))
	}
	good := outputs{deliveries: []kafka.Message{del("a", 5, applied.Add(-time.Millisecond)), del("b", 5, until), del("c", 6, applied.Add(time.Hour))},
		suppressed: []kafka.Message{cancel("d", 5, applied.Add(-time.Second))}, tiers: []kafka.Message{wait("e", 5, until)}}
	r := checkSnoozes(users, good)
	wantViolations(t, r)
	if want := "no delivery to the 1 snoozed users decided while their snooze was in force (from 2026-11-24T09:00:02.000Z, when the worker applied it); 1 intents cancelled for it (snooze-too-long), 1 deferred to its end (snoozed)"; r.ok != want {
		t.Errorf("ok: %q, want %q", r.ok, want)
	}
	bad := good
	bad.deliveries = append(slices.Clone(good.deliveries), del("f", 5, applied))
	bad.suppressed = append(slices.Clone(good.suppressed), cancel("g", 6, applied), cancel("h", 5, until))
	bad.tiers = append(slices.Clone(good.tiers), wait("i", 5, until.Add(time.Hour)))
	wantViolations(t, checkSnoozes(users, bad),
		"f (input ) to user 5: delivered, decided at 2026-11-24T09:00:02.000Z, while their snooze was in force (applied at 2026-11-24T09:00:02.000Z, until 2026-11-24T13:00:00.000Z)",
		"g (input ) to user 6: cancelled for a snooze (snooze-too-long), but the user has none",
		"h (input ) to user 5: cancelled for a snooze (snooze-too-long), decided at 2026-11-24T13:00:00.000Z, not before its end (2026-11-24T13:00:00.000Z)",
		"i (input ) to user 5: deferred for a snooze (snoozed) until 2026-11-24T14:00:00.000Z, not to the snooze's end (2026-11-24T13:00:00.000Z)")
}

// TestCheckTiers: a user on the tier fewer (1 a day) with two sends a day
// after the tier was applied is a violation, sends before it are not
// checked; a refusal by the tier's daily limit after a send is explained,
// one before any send, one of a user not on the tier and one by a channel
// limit the user has not are not.
func TestCheckTiers(t *testing.T) {
	rules := testRules(t)
	applied := day.Add(9 * time.Hour)
	users := map[uint64]userFact{9: {limits: capping.UserLimits{Tier: tierFewer}, applied: applied}, 10: {limits: capping.UserLimits{Tier: tierFewer}, applied: applied}}
	d := func(id string, user int, decision, limit string, at time.Time) kafka.Message {
		return rec(fmt.Sprintf(`{"id":%q,"user_id":%d,"campaign_id":"c","channel":"push"}`, id, user),
			"capper-decision", decision, "capper-segment", segReaders, "capper-decided-at", stamp(at), "capper-limit", limit)
	}
	refusals := func(ms ...kafka.Message) []audit.Refusal {
		t.Helper()
		r, err := audit.Refusals(ms)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	dels := sends(t, d("a", 9, "allowed", "", applied.Add(-2*time.Hour)), d("b", 9, "allowed", "", applied.Add(-time.Hour)), d("c", 10, "allowed", "", applied.Add(time.Hour)))
	capped := refusals(d("x", 10, "capped", "user-tier/fewer/daily", applied.Add(2*time.Hour)))
	r := checkTiers(rules, users, dels, capped)
	wantViolations(t, r)
	if want := "no user above their tier: 2 users on a tier, their 1 sends since checked against every limit of it; 1 intents capped by a user's own limit, each explained by a full one"; r.ok != want {
		t.Errorf("ok: %q, want %q", r.ok, want)
	}
	more := append(slices.Clone(dels), sends(t, d("e", 10, "allowed", "", applied.Add(3*time.Hour)))...)
	wantViolations(t, checkTiers(rules, users, more, append(capped, refusals(d("y", 9, "capped", "user-tier/fewer/weekly", applied.Add(time.Minute)),
		d("z", 11, "capped", "user-tier/fewer/daily", applied), d("w", 10, "capped", "user-channel/sms", applied))...)),
		"user 10 (tier fewer): 2 sends in the 24h0m0s up to 2026-11-24T12:00:00.000Z, above daily's max 1",
		`user 9: intent "y" capped by "user-tier/fewer/weekly" at 2026-11-24T09:01:00.000Z: 2 sends in its window, below its max 3: not full`,
		`user 11: intent "z" capped by "user-tier/fewer/daily" at 2026-11-24T09:00:00.000Z: the user is not on tier fewer ("")`,
		`user 10: intent "w" capped by "user-channel/sms" at 2026-11-24T09:00:00.000Z: the user has no limit of channel sms`)
}

// TestWriteAudit: a violation is printed under its check, the verdict
// counts it and the error is ErrAudit; without one, "audit: ok, ...".
func TestWriteAudit(t *testing.T) {
	var out bytes.Buffer
	ok := []checkResult{{name: "caps", ok: "fine"}, {name: "one outcome", ok: "3 inputs"}}
	if err := writeAudit(&out, ok, 2, 3); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "  caps         ok: fine\n") || !strings.HasSuffix(out.String(), "(2 delivery records, 3 inputs checked)\n") ||
		!strings.Contains(out.String(), "\naudit: ok, ") {
		t.Fatalf("verdict:\n%s", out.String())
	}
	out.Reset()
	var many []string
	for i := range 25 {
		many = append(many, fmt.Sprintf("input %d lost", i))
	}
	bad := []checkResult{{name: "caps", violations: []string{"user 7 above"}}, {name: "one outcome", violations: many}}
	err := writeAudit(&out, bad, 2, 3)
	if !errors.Is(err, ErrAudit) {
		t.Fatalf("error %v, want ErrAudit", err)
	}
	for _, want := range []string{"  caps         1 violations\n                 user 7 above\n", "input 19 lost\n", "... and 5 more\n",
		"audit: 26 violations (caps 1, one outcome 25)\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "input 20 lost") || strings.Contains(out.String(), "audit: ok") {
		t.Errorf("output:\n%s", out.String())
	}
}

// TestWithSections: the demo's policy is configs/policy.yaml with the
// sections' segments added (quiet hours, a deferring limit), its own
// segments and default policy unchanged.
func TestWithSections(t *testing.T) {
	data, err := withSections(configs.ExamplePolicy())
	if err != nil {
		t.Fatal(err)
	}
	rulesOf := func(data []byte) capping.Rules {
		t.Helper()
		d, err := policy.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		r, ps := d.Rules()
		if err := ps.Err(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	demo, example := rulesOf(data), rulesOf(configs.ExamplePolicy())
	for _, seg := range []string{"new", "active", "dormant", "none"} {
		if !reflect.DeepEqual(demo.PolicyOf(seg), example.PolicyOf(seg)) {
			t.Errorf("segment %s: the demo's policy differs from configs/policy.yaml", seg)
		}
	}
	sub := demo.PolicyOf(segSubscribers)
	if sub.QuietHours == nil || len(sub.Limits) != 1 || sub.Limits[0].OnCap != capping.Defer {
		t.Errorf("subscribers: %+v, want quiet hours and a deferring limit", sub)
	}
	if shop := demo.PolicyOf(segShoppers); len(shop.Limits) != 1 || shop.Limits[0].Name != "daily" || shop.Limits[0].Max != 1 {
		t.Errorf("shoppers: %+v, want one message a day", shop)
	}
	if r := demo.PolicyOf(segReaders); r.QuietHours == nil || len(r.Limits) != 1 || r.Limits[0].Max != 4 {
		t.Errorf("readers: %+v, want quiet hours and four messages a day", r)
	}
	if demo.Users == nil || demo.Users.MaxDefer != userMaxDefer {
		t.Fatalf("user_limits: %+v, want the section, max_defer %s", demo.Users, userMaxDefer)
	}
	if fewer, ok := demo.Users.Tier(tierFewer); !ok || len(fewer.Limits) != 2 || fewer.Limits[0].Max != 1 {
		t.Errorf("tier fewer: %+v, want 1 a day, 3 a week", fewer)
	}
	if _, err := withSections([]byte("segments: []\n")); err == nil {
		t.Error("a policy without a top-level default_policy: no error")
	}
	if _, err := withSections([]byte("budgets: []\ndefault_policy: {limits: []}\n")); err == nil || !strings.Contains(err.Error(), "user_limits: null") {
		t.Errorf("a policy without user_limits: null: %v", err)
	}
}

// TestClockSkipsAhead: the demo's clock follows its base, moves on by a
// skip, and a Sleep ends when a skip passes its end (not at the wall
// clock's pace) or when its context ends.
func TestClockSkipsAhead(t *testing.T) {
	t0 := time.Now()
	c := newClock(func() time.Time { return DefaultStart.Add(time.Since(t0)) })
	if d := c.Now().Sub(DefaultStart); d < 0 || d > time.Minute {
		t.Fatalf("now %s, start %s", c.Now(), DefaultStart)
	}
	slept := make(chan error, 1)
	go func() { slept <- c.Sleep(context.Background(), time.Hour) }()
	time.Sleep(20 * time.Millisecond)
	c.advance(DefaultStart.Add(30 * time.Minute)) // not yet
	select {
	case err := <-slept:
		t.Fatalf("Sleep(1h) ended after a 30m skip: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	c.advance(DefaultStart.Add(2 * time.Hour))
	select {
	case err := <-slept:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Sleep(1h) still sleeping after a 2h skip")
	}
	before := c.Now()
	c.advance(DefaultStart) // never back
	if c.Now().Before(before) {
		t.Fatalf("the clock went back: %s, then %s", before, c.Now())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep with an ended context: %v", err)
	}
}

// TestInterleave: every record of both, each in its order, spread.
func TestInterleave(t *testing.T) {
	m := func(s ...string) []kafka.Message {
		var out []kafka.Message
		for _, x := range s {
			out = append(out, kafka.Message{Value: []byte(x)})
		}
		return out
	}
	var got []string
	for _, x := range interleave(m("a", "b", "c", "d"), m("1", "2")) {
		got = append(got, string(x.Value))
	}
	if want := []string{"1", "a", "b", "2", "c", "d"}; !slices.Equal(got, want) {
		t.Fatalf("interleave: %v, want %v", got, want)
	}
}

// TestCheckThrottle: the effective rate must have come within 10% of what
// FCM accepted and back within 10% of the budget's rate, after throttled
// answers.
func TestCheckThrottle(t *testing.T) {
	good := throttleRun{answered: 3200, throttled: 200, lowest: 117, downIn: 4 * time.Second, backIn: 15 * time.Second, done: true,
		once: 3000, members: 3000}
	wantViolations(t, checkThrottle(good))
	for _, c := range []struct {
		r    throttleRun
		want string
	}{
		{throttleRun{}, "the throttle feedback part did not run"},
		{throttleRun{answered: 3000, done: true}, "FCM throttled none of 3000 answers: nothing to follow"},
		{throttleRun{answered: 3000, throttled: 5, lowest: 180, done: true}, "the effective rate fell to 180/s, never within 10% of 120/s"},
		{throttleRun{answered: 3000, throttled: 5, lowest: 110, downIn: time.Second, done: true}, "the effective rate never came back within 10% of 200/s"},
		{throttleRun{answered: 3000, throttled: 5, lowest: 110, downIn: time.Second, backIn: time.Second, done: true, once: 2990, twice: 2, members: 3000},
			"FCM accepted 2990 of the 3000 pushes once and 2 more than once"},
	} {
		wantViolations(t, checkThrottle(c.r), c.want)
	}
}
