package app_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/config"
)

// TestRefusalCacheWithDeferredSends: two workers, quiet hours that defer
// every push through the delay tiers, and a user's sends made by both
// paths. Each user's second email is capped by gap (ten is not full: the
// worker's refusal cache remembers both); the user's push, held by quiet
// hours, comes back from its tier and is allowed, which fills ten; the
// third and fourth emails must be capped by ten (first in policy order)
// with its retry-after, as Redis answers, and never by the remembered gap.
// The worker that deferred a push is the one that decides it when due, so
// its cache sees the send. On a single Redis and on a 3-master cluster.
func TestRefusalCacheWithDeferredSends(t *testing.T) {
	for _, mode := range []string{"single", "cluster"} {
		t.Run(mode, func(t *testing.T) { testCacheWithDeferred(t, mode) })
	}
}

func testCacheWithDeferred(t *testing.T, mode string) {
	e := newE2E(t, mode)
	e.clock = newFastClock(60) // 16:00 UTC; a real second is a minute
	e.publish(100, 7)
	const pol = `
default_policy:
  quiet_hours: {from: "16:00", to: "16:10", channels: [push], jitter: 5m}
  limits:
    - {name: ten, window: 1h, max: 2}
    - {name: gap, window: 30m, max: 1, where: {channels: [email]}}
`
	cfg := e.holdConfig(pol)
	// Tiers with more partitions than the input: a tier partition of the
	// same index as a user's input partition is still the user's (an
	// earlier version put a deferred intent by its key's hash, and the
	// tiers' group gave its partitions out on its own).
	for i, d := range cfg.Kafka.DelayTiers {
		cfg.Kafka.DelayTiers[i].Topic = d.Topic + "-8"
		e.createTopic(cfg.Kafka.DelayTiers[i].Topic, 8)
	}
	// Long enough that what the cache learned from the second email would
	// still be believed when the third comes.
	cfg.Capping.RefusalCache.TTL = config.Duration(time.Hour)
	// Small batches: the cache answers records past two batches after
	// where a worker took their partition over, and these partitions
	// hold a few dozen each.
	cfg.Worker.BatchSize = 10
	const users = 40
	a, b := e.start("a", cfg), e.start("b", cfg)
	wave := func(name, channel string) {
		t.Helper()
		e.produce(holdIntents(name, channel, "marketing", users, 1))
	}
	at := func(hh, mm, ss int) time.Time { return time.Date(2026, 11, 21, hh, mm, ss, 0, time.UTC) }
	// 16:00: e1 delivered; the pushes held until 16:10, spread over 5
	// minutes by the jitter.
	wave("e1", "email")
	wave("p1", "push")
	for e.clock.Now().Before(at(16, 10, 30)) {
		time.Sleep(50 * time.Millisecond)
	}
	// 16:10:30: e2 is capped by gap while ten is not full (its push has not
	// come back yet), else by ten.
	wave("e2", "email")
	// Once every push is delivered, ten is full: e3 and e4 are capped by it.
	o := e.waitDrained(60*time.Second, a, b)
	if n := count(o.deliveries, "capper-deferred-count", "1"); n != users {
		t.Fatalf("%d of %d held pushes delivered", n, users)
	}
	wave("e3", "email")
	wave("e4", "email")
	o = e.waitDrained(60*time.Second, a, b)
	e.verifyHeld(o, holdRules(t, pol))

	e1, p1 := map[string]time.Time{}, map[string]time.Time{} // by user
	for _, m := range o.deliveries {
		switch id := idOf(m); {
		case strings.HasPrefix(id, "e1-"):
			e1[userOf(id)] = decidedAt(t, m).Truncate(time.Second)
		case strings.HasPrefix(id, "p1-"):
			p1[userOf(id)] = decidedAt(t, m)
		}
	}
	checked, stale := 0, 0
	for _, m := range o.suppressed {
		id := idOf(m)
		u := userOf(id)
		// ten frees when e1, its older send, leaves the hour.
		want, free := "ten", e1[u].Add(time.Hour+time.Second)
		switch {
		case strings.HasPrefix(id, "e2-"):
			if p1[u].After(decidedAt(t, m)) {
				want, free = "gap", e1[u].Add(30*time.Minute+time.Second)
				stale++ // what the cache knows of u when the push comes back
			}
		case strings.HasPrefix(id, "e3-"), strings.HasPrefix(id, "e4-"):
		default:
			t.Fatalf("%s suppressed (%s)", id, header(m, "capper-limit"))
		}
		if got := header(m, "capper-limit"); got != want {
			t.Errorf("%s capped by %s, want %s (decided by Redis: the first full limit in policy order)", id, got, want)
			continue
		}
		ms, err := strconv.ParseInt(header(m, "capper-retry-after-ms"), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if got := decidedAt(t, m).Add(time.Duration(ms) * time.Millisecond); got.Sub(free).Abs() > time.Second {
			t.Errorf("%s: retry-after frees at %s, want %s", id, got.Format(time.TimeOnly), free.Format(time.TimeOnly))
		}
		checked++
	}
	if checked != 3*users || stale == 0 {
		t.Fatalf("%d emails checked, want %d; %d capped by gap before their push came back (want some)", checked, 3*users, stale)
	}
	if hits := metric(t, a, "capper_refusal_cache_hits_total") + metric(t, b, "capper_refusal_cache_hits_total"); hits == 0 {
		t.Fatalf("no intent was answered from the refusal cache: the test proves nothing about it")
	}
}

// createTopic adds a topic with n partitions.
func (e *e2e) createTopic(topic string, n int) {
	e.t.Helper()
	c := &kafka.Client{Addr: kafka.TCP(e.kafka.Addrs...), Timeout: 10 * time.Second}
	resp, err := c.CreateTopics(context.Background(), &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: n, ReplicationFactor: 1}}})
	if err == nil {
		err = resp.Errors[topic]
	}
	if err != nil {
		e.t.Fatalf("create topic %s: %v", topic, err)
	}
}

// userOf is the user of an id made by holdIntents (<wave>-<user>-<n>).
func userOf(id string) string { return strings.Split(id, "-")[1] }
