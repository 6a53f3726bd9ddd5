package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
)

const tUserLimits = "capper-user-limits"

// userPolicy lets a user choose the tier fewer (one send a day) and turn
// sms and push down; everyone gets three sends a day.
const userPolicy = `
default_policy:
  limits:
    - {name: daily, window: 24h, max: 3}
user_limits:
  tiers:
    - name: fewer
      limits:
        - {name: one-a-day, window: 24h, max: 1}
  channels: [sms, push]
  max_defer: 1h
`

// userConfig is holdConfig with the user-limits topic (compacted, as
// capper topics create makes it).
func (e *e2e) userConfig(pol string) *config.Config {
	e.t.Helper()
	if err := e.kafka.Cluster.CreateTopic(tUserLimits, 4, map[string]string{"cleanup.policy": "compact"}); err != nil {
		e.t.Fatal(err)
	}
	cfg := e.holdConfig(pol)
	cfg.Kafka.Topics.UserLimits = tUserLimits
	if err := cfg.Validate(); err != nil {
		e.t.Fatal(err)
	}
	return cfg
}

// setUser is `capper user set|snooze`: it fails the test unless a
// worker applied the change within 10 s.
func (e *e2e) setUser(cfg *config.Config, uid uint64, c app.UserChange) *app.UserSet {
	e.t.Helper()
	r, err := app.SetUser(context.Background(), cfg, uid, c, app.SetUserOptions{Wait: 10 * time.Second}, slog.New(slog.DiscardHandler))
	if err != nil {
		e.t.Fatalf("set user %d: %v", uid, err)
	}
	if !r.Applied {
		e.t.Fatalf("user %d's limits not applied after %s", uid, r.Waited)
	}
	return r
}

// userLimits is `capper user show`.
func (e *e2e) userLimits(cfg *config.Config, uid uint64) capping.UserLimits {
	e.t.Helper()
	r, err := app.ShowUser(context.Background(), cfg, uid, slog.New(slog.DiscardHandler))
	if err != nil {
		e.t.Fatal(err)
	}
	return r.Limits
}

// userIntents are one intent per channel given, in order, of user uid.
func userIntents(wave string, uid int, channels ...string) []kafka.Message {
	var msgs []kafka.Message
	for i, ch := range channels {
		msgs = append(msgs, kafka.Message{Key: fmt.Appendf(nil, "%d", uid),
			Value: fmt.Appendf(nil, `{"id":"%s-%d-%d","user_id":%d,"campaign_id":"c","channel":%q,"category":"marketing"}`, wave, uid, i, uid, ch)})
	}
	return msgs
}

// outcomeOf is the outcome of intent id: the topic and the record.
func (o outputs) outcomeOf(id string) (string, kafka.Message) {
	for _, x := range []struct {
		topic string
		msgs  []kafka.Message
	}{{tDel, o.deliveries}, {tSup, o.suppressed}, {tDLQ, o.dlq}} {
		for _, m := range x.msgs {
			if idOf(m) == id {
				return x.topic, m
			}
		}
	}
	return "", kafka.Message{}
}

// TestUserLimitsApplied: `capper user set` writes a user's tier and a
// channel turned off; a worker applies them to Redis within the wait, and
// the user's intents are decided by them (another user's are not). A
// worker started later decides by them too: they live in Redis, nothing
// is loaded.
func TestUserLimitsApplied(t *testing.T) {
	e := newE2E(t, "single")
	e.clock = newFastClock(1)
	e.publish(100, 7)
	cfg := e.userConfig(userPolicy)
	a := e.start("a", cfg)
	want := capping.UserLimits{Tier: "fewer", Channels: map[string]int{"sms": 0}}
	fewer := "fewer"
	r := e.setUser(cfg, 42, app.UserChange{Tier: &fewer, Channels: map[string]int{"sms": 0}})
	if r.AppliedIn > 2*time.Second {
		t.Errorf("applied in %s, want well under 2 s", r.AppliedIn)
	}
	if got := e.userLimits(cfg, 42); got.Encode() != want.Encode() {
		t.Fatalf("Redis holds %s for user 42, want %s", got.Encode(), want.Encode())
	}
	if n := metric(t, a, "capper_user_limits_applied_total"); n != 1 {
		t.Errorf("capper_user_limits_applied_total = %v, want 1", n)
	}
	if n := metric(t, a, "capper_user_limits_apply_lag_seconds"); n != 1 {
		t.Errorf("apply lag observed %v times, want 1", n)
	}
	check := func(o outputs, want map[string]string) {
		t.Helper()
		for id, want := range want {
			topic, m := o.outcomeOf(id)
			if topic != want {
				t.Errorf("intent %s: in %q (%s %s), want %s", id, topic, header(m, "capper-decision"), header(m, "capper-limit"), want)
				continue
			}
			if topic == tSup && !strings.HasPrefix(header(m, "capper-limit"), "user-") {
				t.Errorf("intent %s capped by %q, want one of the user's own limits", id, header(m, "capper-limit"))
			}
		}
	}
	e.produce(append(userIntents("a", 42, "email", "email", "sms"), userIntents("a", 43, "email", "email", "sms")...))
	check(e.waitDrained(30*time.Second, a), map[string]string{
		"a-42-0": tDel, "a-42-1": tSup, "a-42-2": tSup, // the tier's one a day; sms off
		"a-43-0": tDel, "a-43-1": tDel, "a-43-2": tDel,
	})

	// A worker started after the write decides by the limits: they live in
	// Redis (its group has nothing left to apply).
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	b := e.start("b", cfg)
	e.produce(append(userIntents("b", 42, "email", "sms"), userIntents("b", 44, "email", "email", "sms")...))
	check(e.waitDrained(30*time.Second, b), map[string]string{
		"b-42-0": tSup, "b-42-1": tSup,
		"b-44-0": tDel, "b-44-1": tDel, "b-44-2": tDel,
	})
	if n := metric(t, b, "capper_user_limits_applied_total"); n != 0 {
		t.Errorf("worker b applied %v records: its group had committed the only one", n)
	}
}

// TestUserSnoozed: a snoozed user's intents are not delivered while the
// snooze lasts: one snoozed past user_limits.max_defer is cancelled
// (snooze-too-long), one snoozed for less waits in the delay tiers
// (snoozed) and is delivered once the snooze ends; the snooze covers
// only its channels.
func TestUserSnoozed(t *testing.T) {
	e := newE2E(t, "single")
	e.clock = newFastClock(60) // a real second is a minute
	e.publish(100, 7)
	cfg := e.userConfig(userPolicy)
	a := e.start("a", cfg)
	long, short := e.clock.Now().Add(30*24*time.Hour), e.clock.Now().Add(5*time.Minute)
	e.setUser(cfg, 42, app.UserChange{SnoozeUntil: long})
	e.setUser(cfg, 43, app.UserChange{SnoozeUntil: short, SnoozeChannels: []string{"push"}})
	if got := e.userLimits(cfg, 43); !got.SnoozeUntil.Equal(short.Truncate(time.Second)) || len(got.SnoozeChannels) != 1 {
		t.Fatalf("user 43's snooze in Redis: %+v", got)
	}
	e.produce(append(userIntents("s", 42, "push", "email"), userIntents("s", 43, "push", "email")...))
	o := e.waitDrained(60*time.Second, a)
	for id, want := range map[string]struct{ topic, decision, reason string }{
		"s-42-0": {tSup, "cancelled", "snooze-too-long"},
		"s-42-1": {tSup, "cancelled", "snooze-too-long"},
		"s-43-0": {tDel, "allowed", ""}, // after the snooze
		"s-43-1": {tDel, "allowed", ""}, // email: not snoozed
	} {
		topic, m := o.outcomeOf(id)
		if topic != want.topic || header(m, "capper-decision") != want.decision || header(m, "capper-reason") != want.reason {
			t.Errorf("intent %s: %q %s %q %s, want %s %s %q", id, topic, header(m, "capper-decision"), header(m, "capper-reason"), header(m, "capper-error"), want.topic, want.decision, want.reason)
		}
	}
	if _, m := o.outcomeOf("s-43-0"); header(m, "capper-deferred-count") == "" || decidedAt(t, m).Before(short.Truncate(time.Second)) {
		t.Errorf("user 43's push delivered at %s (deferred %q times), before the snooze's end %s", header(m, "capper-decided-at"),
			header(m, "capper-deferred-count"), short.Format(time.RFC3339))
	}
	deferred := 0
	for _, tier := range []string{tDelay1m, tDelay10m, tDelay1h} {
		for _, m := range e.readTopic(tier) {
			if header(m, "capper-reason") == "snoozed" && idOf(m) == "s-43-0" {
				deferred++
			}
		}
	}
	if deferred == 0 {
		t.Errorf("user 43's push never waited in a delay tier as snoozed")
	}
}

// readTopic is every record of topic.
func (e *e2e) readTopic(topic string) []kafka.Message {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	msgs, err := audit.ReadTopic(ctx, e.kafka.Addrs, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	return msgs
}

// TestUserLimitsRefused: records the worker cannot apply (not JSON, a
// tier the policy does not name, a key that is no user id) are refused,
// counted by reason, applied in no part, and skipped: a good record after
// them is applied.
func TestUserLimitsRefused(t *testing.T) {
	e := newE2E(t, "single")
	e.clock = newFastClock(1)
	e.publish(100, 7)
	cfg := e.userConfig(userPolicy)
	a := e.start("a", cfg)
	// All on the partition of key 42, ahead of the good record.
	e.kafka.Produce(t, tUserLimits, []kafka.Message{
		{Key: []byte("42"), Value: []byte(`{"user_id": 42, "tier": "fewer"`)},
		{Key: []byte("42"), Value: []byte(`{"user_id": 42, "tier": "most", "channels": {"sms": 0}}`)},
		{Key: []byte("42"), Value: []byte(`{"user_id": 42, "quiet_hours": {"from": "25:00", "to": "07:00"}}`)},
		{Key: []byte("user-42"), Value: []byte(`{"user_id": 42}`)},
	})
	fewer := "fewer"
	e.setUser(cfg, 42, app.UserChange{Tier: &fewer})
	for reason, want := range map[string]float64{"json": 1, "policy": 1, "field": 1, "key": 1} {
		if got := metric(t, a, "capper_user_limits_refused_total", "reason", reason); got != want {
			t.Errorf("capper_user_limits_refused_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	if got := e.userLimits(cfg, 42); got.Encode() != (capping.UserLimits{Tier: "fewer"}).Encode() {
		t.Errorf("user 42: %s in Redis, want only the good record's tier", got.Encode())
	}
	if n := metric(t, a, "capper_user_limits_applied_total"); n != 1 {
		t.Errorf("capper_user_limits_applied_total = %v, want 1", n)
	}
	if log := a.log.String(); !strings.Contains(log, `quiet_hours.from: \"25:00\" is not HH:MM`) {
		t.Errorf("the refusal's field is not logged:\n%s", tail(log, 3000))
	}
	// The CLI refuses what the policy refuses, naming the field, and
	// writes nothing.
	most := "most"
	_, err := app.SetUser(context.Background(), cfg, 42, app.UserChange{Tier: &most}, app.SetUserOptions{}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), `tier: "most" is not one of the policy's tiers`) {
		t.Errorf("set --tier most: %v", err)
	}
}

// TestUserForget: `capper user forget` leaves nothing of the user in
// Redis (neither their record nor their limits in their bucket), the
// topic's latest record of the user is a tombstone, and the worker's
// refusal cache, which held the user, drops them: the next intent is
// decided by Redis, which knows no send of theirs, and delivered.
func TestUserForget(t *testing.T) {
	e := newE2E(t, "single")
	e.clock = newFastClock(1) // the refusal cache's TTL is in real seconds
	e.publish(100, 7)
	const pol = `
default_policy:
  limits:
    - {name: daily, window: 24h, max: 1}
user_limits:
  channels: [sms, push]
`
	cfg := e.userConfig(pol)
	cfg.Worker.BatchSize = 10 // the cache's window: two batches past a partition's start
	a := e.start("a", cfg)
	e.setUser(cfg, 42, app.UserChange{Channels: map[string]int{"push": 2}})
	// The cache answers nothing of the first two batches of a partition
	// the worker took over (they may be redeliveries): other users' first.
	for w := range 3 {
		var msgs []kafka.Message
		for u := 50; u < 100; u++ {
			msgs = append(msgs, userIntents(fmt.Sprintf("w%d", w), u, "email")...)
		}
		e.produce(msgs)
		e.waitDrained(30*time.Second, a)
	}
	// i0 delivered, i1 capped by Redis (the cache learns it), i2 capped
	// by the cache.
	for i := range 3 {
		e.produce([]kafka.Message{userIntents(fmt.Sprintf("f%d", i), 42, "email")[0]})
		e.waitDrained(30*time.Second, a)
	}
	if hits := metric(t, a, "capper_refusal_cache_hits_total"); hits == 0 {
		t.Fatal("the refusal cache answered nothing: the test proves nothing about it")
	}
	// A changed record: only the follower drops the user from the cache
	// (the applier writes Redis and leaves the cache alone).
	e.setUser(cfg, 42, app.UserChange{Channels: map[string]int{"push": 3}})
	waitFor(t, 10*time.Second, func() bool { return metric(t, a, "capper_user_limits_cache_dropped_total") >= 1 })
	// i3 capped by Redis again, i4 by the cache.
	hits := metric(t, a, "capper_refusal_cache_hits_total")
	for i := 3; i < 5; i++ {
		e.produce([]kafka.Message{userIntents(fmt.Sprintf("f%d", i), 42, "email")[0]})
		e.waitDrained(30*time.Second, a)
	}
	if metric(t, a, "capper_refusal_cache_hits_total") == hits {
		t.Fatal("the refusal cache did not learn the user again")
	}
	r, err := app.ForgetUser(context.Background(), cfg, 42, app.ForgetUserOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if r.Forgotten.Limits.Channels["push"] != 3 || r.Forgotten.RecordBytes == 0 {
		t.Errorf("forget removed %+v, want the limits and a record", r.Forgotten)
	}
	ctx := context.Background()
	bucket := cfg.Capping.KeyPrefix + ":{b1}" // 42/32
	fields, err := e.redis.Client().HGetAll(ctx, bucket).Result()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := fields["10"]; ok {
		t.Errorf("bucket %s still holds user 42's record: %v", bucket, fields)
	}
	if _, ok := fields["u10"]; ok {
		t.Errorf("bucket %s still holds user 42's limits: %v", bucket, fields)
	}
	var latest *kafka.Message
	for _, m := range e.readTopic(tUserLimits) {
		if string(m.Key) == "42" {
			latest = &m
		}
	}
	if latest == nil || len(latest.Value) != 0 {
		t.Errorf("the topic's latest record of user 42: %v, want a tombstone", latest)
	}
	waitFor(t, 10*time.Second, func() bool { return metric(t, a, "capper_user_limits_cache_dropped_total") >= 2 })
	waitFor(t, 10*time.Second, func() bool { return metric(t, a, "capper_user_limits_erased_total") == 1 })
	e.produce(userIntents("f5", 42, "email"))
	o := e.waitDrained(30*time.Second, a)
	if topic, m := o.outcomeOf("f5-42-0"); topic != tDel {
		t.Errorf("the intent after forget: in %q (%s by %s), want delivered: the cache still held the user", topic,
			header(m, "capper-decision"), header(m, "capper-limit"))
	}
}
