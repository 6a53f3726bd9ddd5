package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
)

// Targets of the worker: its own CPU per intent (broker and Redis excluded),
// and its throughput against the engine alone on the same Redis.
const (
	targetCPUPerIntent = 6 * time.Microsecond
	targetShareOfAlone = 0.8
)

// BenchmarkEndToEnd measures `capper run` (a child process, so that its CPU
// time excludes the broker, which runs in this process, and Redis) draining
// a backlog of send-intents through one real redis-server, and beside it, in
// the same run and against the same server, the engine alone deciding the
// same number of intents in batches of the worker's size. It reports
// intents/s for both, their ratio, and the worker's CPU time per intent.
func BenchmarkEndToEnd(b *testing.B) {
	const n = 100000
	s := newStack(b)
	// The production batch size (the test stack's is small, to exercise
	// many batches).
	s.cfg.Worker.BatchSize = config.Default().Worker.BatchSize
	msgs := benchIntents(n, 200000)
	engineRate := engineAlone(b, s, n)

	// CAPPER_BENCH_PROFILE=file saves a CPU profile of the worker while it
	// drains (go tool pprof file): where a worker's CPU goes.
	profile := os.Getenv("CAPPER_BENCH_PROFILE")
	s.cfg.HTTP.Pprof = profile != ""
	var rate, cpuPerIntent float64
	for i := 0; b.Loop(); i++ {
		s.cfg.Kafka.GroupID = fmt.Sprintf("bench-%d", i)
		s.cfg.Kafka.Topics.Input = fmt.Sprintf("bench-in-%d", i)
		s.writeConfig(b)
		s.createTopic(b, s.cfg.Kafka.Topics.Input)
		s.kafka.Produce(b, s.cfg.Kafka.Topics.Input, msgs)
		p := s.start(b)
		// CPU is read from /proc while the worker drains the backlog, so
		// that start-up (runtime, snapshot load, group join) and shutdown
		// are not charged to the intents.
		cpu0 := procCPU(b, p.cmd.Process.Pid)
		start := time.Now()
		var saved chan error
		if profile != "" {
			saved = make(chan error, 1)
			go func() { saved <- saveProfile("http://"+s.cfg.HTTP.Address+"/debug/pprof/profile?seconds=3", profile) }()
		}
		s.waitCommitted(b, s.cfg.Kafka.Topics.Input, n, p)
		elapsed := time.Since(start)
		cpu := procCPU(b, p.cmd.Process.Pid) - cpu0
		if saved != nil {
			if err := <-saved; err != nil {
				b.Fatal(err)
			}
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			b.Fatal(err)
		}
		if err := p.wait(b, 30*time.Second); err != nil {
			b.Fatalf("capper run: %v\n%s", err, p.logs)
		}
		rate = float64(n) / elapsed.Seconds()
		cpuPerIntent = float64(cpu.Microseconds()) / n
	}
	b.ReportMetric(rate, "e2e-intents/s")
	b.ReportMetric(engineRate, "engine-alone-intents/s")
	b.ReportMetric(rate/engineRate, "e2e-share-of-engine")
	b.ReportMetric(rate/engineRate/targetShareOfAlone, "x-of-0.8-share-target")
	b.ReportMetric(cpuPerIntent, "worker-cpu-us/intent")
	b.ReportMetric(cpuPerIntent/float64(targetCPUPerIntent.Microseconds()), "x-of-6us-cpu-target")
	// Sizing: worker CPU to clear a 10M-intent blast in 60 s.
	b.ReportMetric(10_000_000/60.0*cpuPerIntent/1e6, "worker-cores-for-10M-in-60s")
}

func saveProfile(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile: %s %v", resp.Status, err)
	}
	return os.WriteFile(path, data, 0o644)
}

// procCPU is the user+system CPU time of process pid so far.
func procCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name (field 2) may hold spaces; fields resume after ')'.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("parse /proc/%d/stat: %v %v", pid, err1, err2)
	}
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks
}

// benchIntents: n marketing intents on the push channel over users users
// (uniform), ids unique.
func benchIntents(n, users int) []kafka.Message {
	out := make([]kafka.Message, n)
	for i := range out {
		u := strconv.Itoa((i * 7919) % users)
		out[i] = kafka.Message{Key: []byte(u), Value: []byte(`{"id":"bench-` + strconv.Itoa(i) + `","user_id":` + u +
			`,"campaign_id":"bench","channel":"push","category":"marketing","payload":{"template":"t1"}}`)}
	}
	return out
}

// engineAlone decides n intents shaped like benchIntents with the engine
// the worker builds from the same config, in batches of the worker's size,
// under another key prefix so the two runs do not share logs.
func engineAlone(b *testing.B, s *stack, n int) float64 {
	b.Helper()
	cfg := *s.cfg
	cfg.Capping.KeyPrefix = "bench-alone"
	rdb, err := app.NewRedisClient(&cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer rdb.Close()
	pol, err := app.LoadPolicy(context.Background(), &cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	eng, err := app.NewEngine(context.Background(), &cfg, pol, rdb, prometheus.NewRegistry(), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	// The worker's snapshot holds users below 500 only, so it decides
	// nearly every intent with the default policy too.
	batch := cfg.Worker.BatchSize
	reqs := make([]capping.Request, 0, batch)
	start := time.Now()
	for i := 0; i < n; {
		reqs = reqs[:0]
		now := time.Now()
		for ; len(reqs) < batch && i < n; i++ {
			u := (i * 7919) % 200000
			reqs = append(reqs, capping.Request{UserID: uint64(u), Segment: "none", IntentID: "bench-" + strconv.Itoa(i),
				Channel: "push", Category: "marketing", At: now})
		}
		ds, err := eng.Decide(context.Background(), reqs)
		if err != nil {
			b.Fatal(err)
		}
		for _, d := range ds {
			if d.Err != nil {
				b.Fatal(d.Err)
			}
		}
	}
	return float64(n) / time.Since(start).Seconds()
}

// BenchmarkBlastCalls measures what the refusal cache saves on a blast that
// sends each user several intents (4 campaigns to 25,000 users, a user's 4
// in a row, like the scale harness's 4-per-user run): `capper run` with the
// default settings drains it as a backlog, and the Redis script calls per
// intent (capper_redis_calls_per_intent) are reported with their ratio to
// the goal, 0.5. With the test stack's policy (the documented one), 0.5 is
// also the floor for users who get one send; active users get two.
func BenchmarkBlastCalls(b *testing.B) {
	const users, per = 25000, 4
	s := newStack(b)
	s.cfg.Worker.BatchSize = config.Default().Worker.BatchSize
	msgs := make([]kafka.Message, 0, users*per)
	chans := []string{"push", "email", "push", "inapp"}
	for i := range users * per {
		u := strconv.Itoa((i / per * 7919) % 200000)
		msgs = append(msgs, kafka.Message{Key: []byte(u), Value: []byte(`{"id":"blast-` + strconv.Itoa(i) + `","user_id":` + u +
			`,"campaign_id":"c` + strconv.Itoa(i%per) + `","channel":"` + chans[i%per] + `","category":"marketing"}`)})
	}
	var calls float64
	for i := 0; b.Loop(); i++ {
		s.cfg.Kafka.GroupID = fmt.Sprintf("blast-%d", i)
		s.cfg.Kafka.Topics.Input = fmt.Sprintf("blast-in-%d", i)
		s.cfg.Capping.KeyPrefix = fmt.Sprintf("blast%d", i)
		s.writeConfig(b)
		s.createTopic(b, s.cfg.Kafka.Topics.Input)
		s.kafka.Produce(b, s.cfg.Kafka.Topics.Input, msgs)
		p := s.start(b)
		s.waitCommitted(b, s.cfg.Kafka.Topics.Input, len(msgs), p)
		_, body := httpBody(b, "http://"+s.cfg.HTTP.Address+"/metrics")
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, "capper_redis_calls_per_intent "); ok {
				calls, _ = strconv.ParseFloat(v, 64)
			}
		}
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			b.Fatal(err)
		}
		if err := p.wait(b, 30*time.Second); err != nil {
			b.Fatalf("capper run: %v\n%s", err, p.logs)
		}
	}
	if calls == 0 {
		b.Fatal("no capper_redis_calls_per_intent in the worker's metrics")
	}
	b.ReportMetric(calls, "redis-calls/intent")
	b.ReportMetric(calls/0.5, "x-of-0.5-goal")
}
