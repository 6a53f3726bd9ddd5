package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/demo"
	"github.com/capper-dev/capper/internal/testenv"
)

// TestCrashStall: three `capper run` processes (dynamic members, the
// cooperative protocol) share a stream; one is killed with SIGKILL, then a
// fourth joins. It checks that every partition moves again after each
// and that every input ends with an outcome (nothing lost, caps held), and
// logs the longest stop of a partition (the dead worker's wait for
// kafka.session_timeout); BenchmarkRestarts measures each case against
// its goal.
func TestCrashStall(t *testing.T) {
	s := newStack(t)
	def := config.Default().Kafka
	s.cfg.Kafka.SessionTimeout, s.cfg.Kafka.HeartbeatInterval = def.SessionTimeout, def.HeartbeatInterval
	s.cfg.Kafka.RebalanceTimeout = def.RebalanceTimeout
	var procs []*proc
	for range 3 {
		s.cfg.HTTP.Address = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		s.path = filepath.Join(t.TempDir(), "capper.yaml")
		s.writeConfig(t)
		procs = append(procs, s.start(t))
	}
	// A steady stream over every partition: 200 intents every 100 ms.
	msgs := demo.Blast(demo.BlastOptions{Users: 500, Intents: 100000, Seed: 9})
	ctx, stopProducing := context.WithCancel(context.Background())
	defer stopProducing()
	produced := make(chan int, 1)
	go func() {
		w := &kafka.Writer{Addr: kafka.TCP(s.kafka.Addrs...), Topic: "send-intents", RequiredAcks: kafka.RequireAll,
			BatchTimeout: time.Millisecond, Balancer: &kafka.Murmur2Balancer{}}
		defer w.Close()
		n := 0
		for n < len(msgs) && ctx.Err() == nil {
			if w.WriteMessages(ctx, msgs[n:n+200]...) == nil {
				n += 200
			}
			time.Sleep(100 * time.Millisecond)
		}
		produced <- n
	}()

	// progress samples each partition's committed offset every 50 ms and
	// returns, per partition, the times it moved.
	moved := map[int][]time.Time{}
	last := map[int]int64{}
	sample := func() {
		now := time.Now()
		for p, off := range s.kafka.Committed(t, s.cfg.Kafka.GroupID, "send-intents", 4) {
			if off > last[p] {
				moved[p] = append(moved[p], now)
				last[p] = off
			}
		}
	}
	until := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			sample()
		}
	}
	until(4 * time.Second) // every worker has its partitions
	for p := range 4 {
		if len(moved[p]) == 0 {
			t.Fatalf("partition %d made no progress before the crash", p)
		}
	}
	// stop is the longest stop of any partition during [t0, t1]: the
	// longest time between two moves (the last one before t0 counts).
	stop := func(t0, t1 time.Time) time.Duration {
		var worst time.Duration
		for p := range 4 {
			prev, moves := t0, 0
			for _, at := range moved[p] {
				switch {
				case at.Before(t0):
					prev = at
				case !at.After(t1):
					worst, prev, moves = max(worst, at.Sub(prev)), at, moves+1
				}
			}
			if moves == 0 {
				t.Fatalf("partition %d made no progress from %s to %s", p, t0.Format(time.TimeOnly), t1.Format(time.TimeOnly))
			}
			worst = max(worst, t1.Sub(prev))
		}
		return worst
	}
	victim := procs[1]
	killed := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = victim.wait(t, 10*time.Second)
	until(20 * time.Second)
	crash := stop(killed, time.Now())
	// A worker joins (a scale-out): the group rebalances, every member
	// finishes and commits its batch in flight and rejoins.
	s.cfg.HTTP.Address = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	s.path = filepath.Join(t.TempDir(), "capper.yaml")
	s.writeConfig(t)
	joined := time.Now()
	procs = append(procs, s.start(t))
	until(8 * time.Second)
	join := stop(joined, time.Now())
	stopProducing()
	n := <-produced
	t.Logf("crash stall: the longest stop of a partition was %.1f s after a SIGKILL, %.1f s when a worker joined (kafka.session_timeout %s, heartbeat_interval %s, 3 workers, 4 partitions)",
		crash.Seconds(), join.Seconds(), def.SessionTimeout.D(), def.HeartbeatInterval.D())
	got := s.waitOutcomes(t, n, procs[0].logs)
	s.audit(t)
	for src, k := range got {
		if k > 2 {
			t.Errorf("input %s has %d outcomes", src, k)
		}
	}
}
