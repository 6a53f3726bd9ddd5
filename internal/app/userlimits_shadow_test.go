package app_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/capping"
)

// shadowPolicy: a daily push cap that suppresses, an hourly email cap that
// defers; users may choose the tier fewer (one sms a day) and turn sms,
// push and inapp down.
const shadowPolicy = `
default_policy:
  limits:
    - {name: push-daily, window: 24h, max: 1, channel: push}
    - {name: email-gap, window: 1h, max: 1, channel: email, on_cap: defer, max_defer: 2h}
user_limits:
  tiers:
    - name: fewer
      limits:
        - {name: sms-one, window: 24h, max: 1, channel: sms}
  channels: [sms, push, inapp]
  max_defer: 1h
`

// TestShadowModeKeepsUsersLimits: with worker.enforce: false, what the
// policy would hold back is delivered marked shadow-capped (a full cap, a
// deferral for a cap, and a deferral cancelled past its send-by), while a
// user's own limits hold as when enforcing: a snooze defers (or cancels
// past user_limits.max_defer), their quiet hours defer, their tier and a
// channel they turned off cap, into the suppressed topic.
func TestShadowModeKeepsUsersLimits(t *testing.T) {
	e := newE2E(t, "single")
	e.clock = newFastClock(60) // a real second is a minute
	e.publish(100, 7)
	cfg := e.userConfig(shadowPolicy)
	cfg.Worker.Enforce = false
	a := e.start("a", cfg)

	now := e.clock.Now()
	fewer := "fewer"
	e.setUser(cfg, 41, app.UserChange{Tier: &fewer})
	e.setUser(cfg, 42, app.UserChange{Channels: map[string]int{"sms": 0}})
	snoozeEnd := now.Add(10 * time.Minute).Truncate(time.Second)
	e.setUser(cfg, 43, app.UserChange{SnoozeUntil: snoozeEnd})
	e.setUser(cfg, 44, app.UserChange{SnoozeUntil: now.Add(30 * 24 * time.Hour)})
	// Quiet hours from an hour ago to 10 minutes from now (whole minutes,
	// UTC: the policy's zone).
	from, to := now.Add(-time.Hour).UTC(), now.Add(10*time.Minute).UTC()
	quietEnd := to.Truncate(time.Minute)
	e.setUser(cfg, 45, app.UserChange{Quiet: &capping.UserQuiet{From: from.Hour()*60 + from.Minute(), To: to.Hour()*60 + to.Minute()}})

	msgs := append(userIntents("s", 40, "push", "push"), userIntents("s", 41, "sms", "sms")...)
	msgs = append(msgs, userIntents("s", 42, "sms")...)
	msgs = append(msgs, userIntents("s", 43, "push")...)
	msgs = append(msgs, userIntents("s", 44, "push")...)
	msgs = append(msgs, userIntents("s", 45, "inapp")...)
	sendBy := now.Add(30 * time.Minute).UTC().Format(time.RFC3339)
	for i := range 2 { // the second waits an hour for email-gap: past its send-by
		msgs = append(msgs, kafka.Message{Key: []byte("46"),
			Value: fmt.Appendf(nil, `{"id":"s-46-%d","user_id":46,"campaign_id":"c","channel":"email","category":"marketing","send_by":%q}`, i, sendBy)})
	}
	e.produce(msgs)
	o := e.waitDrained(90*time.Second, a)
	type want struct{ topic, decision, reason, limit string }
	for id, w := range map[string]want{
		"s-40-0": {tDel, "allowed", "", ""},
		"s-40-1": {tDel, "shadow-capped", "", "push-daily"}, // the policy's cap: marked
		"s-41-0": {tDel, "allowed", "", ""},
		"s-41-1": {tSup, "capped", "", "user-tier/fewer/sms-one"}, // the user's tier holds
		"s-42-0": {tSup, "capped", "", "user-channel/sms"},        // the user turned sms off
		"s-43-0": {tDel, "allowed", "", ""},                       // after the snooze
		"s-44-0": {tSup, "cancelled", "snooze-too-long", ""},
		"s-45-0": {tDel, "allowed", "", ""}, // after the user's quiet hours
		"s-46-0": {tDel, "allowed", "", ""},
		"s-46-1": {tDel, "shadow-capped", "expired", "email-gap"}, // the policy's deferral past the send-by: marked
	} {
		topic, m := o.outcomeOf(id)
		got := want{topic, header(m, "capper-decision"), header(m, "capper-reason"), header(m, "capper-limit")}
		if got != w {
			t.Errorf("intent %s: %+v, want %+v", id, got, w)
		}
	}
	for id, end := range map[string]time.Time{"s-43-0": snoozeEnd, "s-45-0": quietEnd} {
		if _, m := o.outcomeOf(id); header(m, "capper-deferred-count") == "" || decidedAt(t, m).Before(end) {
			t.Errorf("intent %s delivered at %s (deferred %q times), before the end %s of the user's limit", id,
				header(m, "capper-decided-at"), header(m, "capper-deferred-count"), end.Format(time.RFC3339))
		}
	}
	for _, tier := range []string{tDelay1m, tDelay10m, tDelay1h} {
		for _, m := range e.readTopic(tier) {
			if r := header(m, "capper-reason"); r != "snoozed" && r != "user-quiet-hours" {
				t.Errorf("a delay tier holds %s (%s %q): shadow mode defers only for a user's own limits", idOf(m), header(m, "capper-decision"), r)
			}
		}
	}
	if n := metric(t, a, "capper_intents_total", "outcome", "shadow_capped"); n != 2 {
		t.Errorf("capper_intents_total{outcome=shadow_capped} = %v, want 2", n)
	}
}
