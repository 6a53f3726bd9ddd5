package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/demo"
)

// TestSentinelFailover: a worker on Redis with Sentinel, a master and two
// replicas. Mid-stream the replicas are cut off (stuck, links closed), the
// master decides alone for a moment and is then killed; Sentinel promotes a
// replica and the worker follows it. No intent is lost (each input has
// exactly one outcome), and the audit counts the sends allowed beyond a cap:
// with asynchronous replication the master's last decisions die with it and
// some users can get more than their cap; with redis.wait_replicas 1 no
// outcome is written before a replica has its decision, and none do.
func TestSentinelFailover(t *testing.T) {
	for _, tc := range []struct {
		name string
		wait int
	}{
		{"async replication", 0},
		{"redis.wait_replicas 1", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newE2E(t, "sentinel")
			e.publish(300, 5)
			cfg := e.config()
			// Caps of a day: decisions lost in the failover still matter
			// when the new master serves (the clock runs 600 times fast).
			daily := func(max int) []config.Limit {
				return []config.Limit{{Name: "daily", Window: config.Duration(24 * time.Hour), Max: &max}}
			}
			for i := range cfg.Capping.Segments {
				cfg.Capping.Segments[i].Limits = daily(1)
			}
			cfg.Capping.DefaultPolicy.Limits = daily(1)
			cfg.Redis.WaitReplicas = tc.wait
			cfg.Redis.WaitTimeout = config.Duration(200 * time.Millisecond)
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			w := e.start("w", cfg)
			msgs := demo.Blast(blast(300, 3000, 21))
			e.produce(msgs[:1000])
			e.waitDrained(60*time.Second, w)

			for _, r := range e.replicas {
				r.Pause()
			}
			if err := e.redis.Client().Do(context.Background(), "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
				t.Fatal(err)
			}
			e.produce(msgs[1000:2000])
			time.Sleep(500 * time.Millisecond) // the master decides alone (or, with WAIT, waits)
			e.redis.Kill()
			for _, r := range e.replicas {
				r.Resume()
			}
			e.produce(msgs[2000:])
			o := e.waitDrained(120*time.Second, w)
			e.verifyOutcomes(o, false)
			v := e.violations(o, cfg)
			excess := 0
			for _, x := range v {
				excess += x.Count - x.Limit.Max
			}
			t.Logf("%s: %d sends allowed beyond a cap (%d windows over their limit) across the failover", tc.name, excess, len(v))
			if tc.wait > 0 && len(v) > 0 {
				t.Fatalf("with redis.wait_replicas, %d windows are over their limit; first: %s", len(v), v[0])
			}
		})
	}
}
