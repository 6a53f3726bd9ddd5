package app_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/demo"
)

func blast(users, intents int, seed uint64) demo.BlastOptions {
	return demo.BlastOptions{Users: users, Intents: intents, Seed: seed}
}

// TestEndToEnd: a snapshot published to S3 by the segment-builder's code, a
// campaign blast with repeated ids, malformed and transactional intents,
// one worker; every input ends in exactly one output topic and the audit of
// the deliveries finds no user above any limit in any window.
func TestEndToEnd(t *testing.T) {
	for _, mode := range []string{"single", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			e := newE2E(t, mode)
			e.publish(400, 1)
			cfg := e.config()
			w := e.start("w1", cfg)
			msgs := demo.Blast(blast(400, 3000, 7))
			// Waves 50-100 ms apart (8-17 virtual minutes): windows roll over
			// between them, so the caps meet logs with history and expiry.
			for i := 0; i < len(msgs); i += 300 {
				e.produce(msgs[i:min(i+300, len(msgs))])
				time.Sleep(time.Duration(50+i%100) * time.Millisecond)
			}
			o := e.waitDrained(90*time.Second, w)
			e.verify(o, cfg, false)

			// Every kind of outcome happened, and the metrics agree with the topics.
			allowed := count(o.deliveries, "capper-decision", "allowed")
			exempt := count(o.deliveries, "capper-decision", "exempt")
			capped := count(o.suppressed, "capper-decision", "capped")
			dups := count(o.deliveries, "capper-duplicate", "true")
			t.Logf("allowed %d (duplicates %d), exempt %d, capped %d, dead-lettered %d", allowed, dups, exempt, capped, len(o.dlq))
			if allowed == 0 || exempt == 0 || capped == 0 || dups == 0 || len(o.dlq) == 0 {
				t.Fatalf("the blast did not exercise every outcome")
			}
			// Every output record names the policy in use: a dead letter
			// the one in use when it was read (one version in this run).
			policy := header(o.deliveries[0], "capper-policy")
			if !strings.HasPrefix(policy, "inline-") {
				t.Fatalf("capper-policy %q on a delivery, want the inline policy's version", policy)
			}
			for _, m := range o.dlq {
				if header(m, "capper-error") == "" {
					t.Fatalf("dead-letter record without capper-error")
				}
			}
			for topic, list := range map[string][]kafka.Message{"deliveries": o.deliveries, "suppressed": o.suppressed, "dead-letter": o.dlq} {
				for _, m := range list {
					if got := header(m, "capper-policy"); got != policy {
						t.Fatalf("%s record with capper-policy %q, want %q (error %q)", topic, got, policy, header(m, "capper-error"))
					}
				}
			}
			for _, m := range o.suppressed {
				if header(m, "capper-limit") == "" || header(m, "capper-retry-after-ms") == "" {
					t.Fatalf("suppressed record without capper-limit/capper-retry-after-ms: %v", m.Headers)
				}
			}
			if got := metric(t, w, "capper_intents_total", "outcome", "invalid"); int(got) != len(o.dlq) {
				t.Errorf("capper_intents_total{outcome=invalid} = %v, dead-letter topic holds %d", got, len(o.dlq))
			}
			if err := w.stop(t); err != nil {
				t.Fatalf("worker stopped with %v", err)
			}
		})
	}
}

// TestRebalance: two workers in one consumer group, the second joining and
// the first leaving mid-stream. Caps hold and nothing is lost, including
// across kafka-go committing offsets of partitions it no longer owns
// (segmentio/kafka-go#1308): every offset a worker commits was fully
// processed by it, so a stale commit can only cause redelivery.
func TestRebalance(t *testing.T) {
	e := newE2E(t, "single")
	e.publish(300, 2)
	cfg := e.config()
	msgs := demo.Blast(blast(300, 4000, 11))
	a := e.start("a", cfg)
	e.produce(msgs[:1000])
	time.Sleep(500 * time.Millisecond)
	b := e.start("b", cfg)
	e.produce(msgs[1000:2500])
	time.Sleep(2 * time.Second)
	if err := a.stop(t); err != nil {
		t.Fatalf("worker a: %v", err)
	}
	e.produce(msgs[2500:])
	o := e.waitDrained(120*time.Second, a, b)
	e.verify(o, cfg, true)
	batchesB := metric(t, b, "capper_batch_size")
	if batchesB == 0 {
		t.Fatalf("worker b never got a partition")
	}
}

// TestRedisRestart: Redis is killed mid-run (and comes back from its
// append-only file). Meanwhile the worker forwards nothing undecided,
// commits nothing and /readyz fails; then it continues; nothing is lost and
// the caps hold.
func TestRedisRestart(t *testing.T) {
	e := newE2E(t, "single", "--appendonly", "yes", "--appendfsync", "always")
	e.publish(300, 3)
	cfg := e.config()
	w := e.start("w", cfg)
	msgs := demo.Blast(blast(300, 2000, 13))
	e.produce(msgs[:1000])
	e.waitDrained(60*time.Second, w)

	e.redis.Kill()
	errs0 := metric(t, w, "capper_redis_errors_total")
	e.produce(msgs[1000:])
	// Not ready from the first failed attempt on: every poll that finds a
	// Redis error counted finds /readyz failing (an order, not a time).
	deadline := time.Now().Add(30 * time.Second)
	for seen := 0; seen < 10; time.Sleep(50 * time.Millisecond) {
		counted := metric(t, w, "capper_redis_errors_total") > errs0
		code, body := w.get("/readyz")
		if counted {
			if code != 503 || !strings.Contains(body, "redis") {
				t.Fatalf("/readyz = %d %q after a Redis error was counted, with Redis down", code, body)
			}
			seen++
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Redis error counted in 30s with Redis down (/readyz = %d %q)", code, body)
		}
	}
	// Nothing of the second wave gets an outcome while Redis is down
	// (except the dead-lettered ones, which need no decision).
	stuck := e.read()
	for _, m := range stuck.deliveries {
		if header(m, "capper-decision") == "allowed" && header(m, "capper-unchecked") != "" {
			t.Fatalf("an undecided intent was forwarded")
		}
	}
	before := len(stuck.deliveries) + len(stuck.suppressed)
	time.Sleep(time.Second)
	if after := e.read(); len(after.deliveries)+len(after.suppressed) != before {
		t.Fatalf("outcomes written while Redis was down: %d -> %d", before, len(after.deliveries)+len(after.suppressed))
	}

	e.redis.Restart()
	o := e.waitDrained(90*time.Second, w)
	e.verify(o, cfg, false)
	if code, body := w.get("/readyz"); code != 200 {
		t.Fatalf("/readyz = %d %q after Redis came back", code, body)
	}
	if got := metric(t, w, "capper_redis_retries_total"); got == 0 {
		t.Fatalf("capper_redis_retries_total = 0 after an outage")
	}
}

// TestSnapshotSwap: a new snapshot published mid-run is picked up without
// stopping consumption, and decisions follow it; a corrupt snapshot after it
// is ignored (the good one keeps serving) and counted as a load failure.
func TestSnapshotSwap(t *testing.T) {
	e := newE2E(t, "single")
	m1 := e.publish(200, 4)
	cfg := e.config()
	w := e.start("w", cfg)
	msgs := demo.Blast(blast(200, 1200, 17))
	e.produce(msgs[:600])
	e.waitDrained(60*time.Second, w)

	time.Sleep(1100 * time.Millisecond) // a different second: a different version name
	m2 := e.publish(200, 5)             // other seed: users move between segments
	if m2.Version == m1.Version {
		t.Fatalf("second snapshot has the first's version %s", m1.Version)
	}
	waitFor(t, 20*time.Second, func() bool {
		return metric(t, w, "capper_snapshot_info", "version", m2.Version) == 1
	})
	e.produce(msgs[600:])
	o := e.waitDrained(60*time.Second, w)
	e.verify(o, cfg, false)
	late := 0
	for _, r := range append(o.deliveries, o.suppressed...) {
		if header(r, "capper-snapshot") == m2.Version {
			late++
		}
	}
	if late == 0 {
		t.Fatalf("no decision used the new snapshot %s", m2.Version)
	}

	// A corrupt third snapshot: LATEST names a version whose object is
	// damaged. The worker keeps m2.
	corruptLatest(t, e, m2.Version)
	waitFor(t, 20*time.Second, func() bool {
		return metric(t, w, "capper_snapshot_load_failures_total") > 0
	})
	if got := metric(t, w, "capper_snapshot_info", "version", m2.Version); got != 1 {
		t.Fatalf("snapshot in use changed after a corrupt publish")
	}
	if code, _ := w.get("/readyz"); code != 200 {
		t.Fatalf("a corrupt new snapshot made the worker unready")
	}
}

func waitFor(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met in %s", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// corruptLatest publishes a copy of version v with one byte of an object
// flipped under a new version name, and points LATEST at it.
func corruptLatest(t *testing.T, e *e2e, v string) {
	t.Helper()
	ctx := context.Background()
	bad := v[:len(v)-1] + "x"
	copyObject := func(name string, mutate bool) {
		rc, _, err := e.store.Get(ctx, "snapshots/"+v+"/"+name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if mutate {
			b[len(b)/2] ^= 0xff
		}
		if err := e.store.Put(ctx, "snapshots/"+bad+"/"+name, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
	copyObject("manifest.json", false)
	copyObject("active.roaring", true)
	copyObject("new.roaring", false)
	copyObject("dormant.roaring", false)
	if err := e.store.Put(ctx, "LATEST", strings.NewReader(bad+"\n")); err != nil {
		t.Fatal(err)
	}
}
