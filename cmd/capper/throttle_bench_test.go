package main

// BenchmarkThrottleFeedback: pacing's throttle feedback measured on real
// `capper run` workers against a simulated provider that accepts less
// than the budget, then all of it.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/pacing"
)

// Throttle feedback's goals (docs/concepts/pacing.md, throttle feedback).
const (
	goalFollowDown   = 10 * time.Second // effective rate within 10% of C
	goalThrottled    = 0.05             // throttled answers / sends once it follows
	goalFollowUp     = 30 * time.Second // back within 10% of the rate
	paceStatusTopic  = "delivery-status"
	providerGroup    = "provider"
	effectiveSamples = 100 * time.Millisecond
)

// throttleRun is what the provider and the samples saw.
type throttleRun struct {
	mu sync.Mutex
	// p: the provider, its answers per second of its clock.
	p         audit.Provider
	effective []effectiveSample
	// byIntent: how many times the provider accepted each intent (its
	// campaign and index).
	byIntent map[string]int
}

type effectiveSample struct {
	at   time.Time
	rate float64
}

// BenchmarkThrottleFeedback: WORKERS (3) `capper run` processes drain a
// blast of INTENTS (130000) pushes through one budget of RATE (2000)/s,
// burst RATE/10, as BenchmarkPacing runs them (one redis-server). A
// simulated provider reads the deliveries topic as the workers write it
// and accepts LOW (1200) sends a second by its clock, handing the rest
// back with a delivery status `throttled` carrying the delivery (capper
// gives each back and holds it again ahead of its lane), until LOW_FOR
// (30) seconds after its first answer; then it accepts RATE a second. The budget's effective rate is read from
// Redis every 100 ms. Printed with their goals: how long until the
// effective rate is within 10% of LOW after the first throttled answer,
// the throttled share of the answers from then until the provider is
// raised, how long until it is back within 10% of RATE after, the most
// releases in any second, and that every intent was accepted once and
// nothing throttled stayed counted (each send handed back was decided
// anew, not a duplicate of its throttled delivery):
//
//	go test ./cmd/capper -run '^$' -bench BenchmarkThrottleFeedback -benchtime 1x -timeout 20m
func BenchmarkThrottleFeedback(b *testing.B) {
	sc := pacingScaleFromEnv(b, 2000)
	num := func(name string, def float64) float64 {
		if v := os.Getenv("CAPPER_BENCH_PACING_" + name); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f <= 0 {
				b.Fatalf("CAPPER_BENCH_PACING_%s=%q: not a number above 0", name, v)
			}
			return f
		}
		return def
	}
	sc.blast, sc.campaign, sc.statusTopic = int(num("INTENTS", 130_000)), 0, paceStatusTopic
	low, lowFor := num("LOW", 1200), time.Duration(num("LOW_FOR", 30)*float64(time.Second))
	for b.Loop() {
		s, _ := pacingStack(b, sc, true)
		d := &pacingDriver{b: b, sc: sc, s: s, r: &pacingRun{paced: true}}
		d.startWorkers()
		rdb := redis.NewClient(&redis.Options{Addr: s.cfg.Redis.Addrs[0]})
		defer rdb.Close()
		run := &throttleRun{p: audit.Provider{Low: low, High: sc.rate, LowFor: lowFor}, byIntent: map[string]int{}}
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { run.sample(ctx, rdb, s.cfg.Capping.KeyPrefix, sc.rate) })
		var accepted atomic.Int64
		wg.Go(func() { run.provide(ctx, b, s.kafka.Addrs, &accepted) })
		if err := <-d.produceBlast(); err != nil {
			b.Fatal(err)
		}
		var lanes []string
		for _, l := range []string{"high", "normal"} {
			lanes = append(lanes, pacing.Topic(paceLanes, paceBudget, l), pacing.RetryTopic(paceLanes, paceBudget, l))
		}
		for deadline := time.Now().Add(5 * time.Minute); accepted.Load() < int64(sc.blast); time.Sleep(50 * time.Millisecond) {
			waitPacingDrained(b, s, sc, lanes, sc.blast, d.ws)
			if time.Now().After(deadline) {
				b.Fatalf("the provider accepted %d of %d intents", accepted.Load(), sc.blast)
			}
		}
		stop()
		wg.Wait()
		d.finish()
		out := readPacingOutputs(b, s.kafka.Addrs, sc, nil)
		reportThrottle(b, sc, low, run, &out)
	}
}

// sample reads the budget's effective rate from Redis every 100 ms.
func (r *throttleRun) sample(ctx context.Context, rdb *redis.Client, prefix string, rate float64) {
	l := &pacing.RedisLeaser{Client: rdb, Prefix: prefix}
	t := time.NewTicker(effectiveSamples)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		e, err := l.Effective(ctx, &pacing.Budget{Name: paceBudget, Rate: rate})
		if err == nil {
			r.mu.Lock()
			r.effective = append(r.effective, effectiveSample{time.Now(), e.Rate})
			r.mu.Unlock()
		}
	}
}

// provide is the provider: it answers each delivery as it arrives,
// accepted while fewer than its capacity were accepted in the second (by
// its clock), else throttled: handed back (a status on the status topic
// with the delivery). A delivery marked duplicate is dropped (its first was
// answered).
func (r *throttleRun) provide(ctx context.Context, b *testing.B, addrs []string, accepted *atomic.Int64) {
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: addrs, GroupID: providerGroup, Topic: "deliveries", MinBytes: 1, MaxBytes: 16 << 20,
		MaxWait: 20 * time.Millisecond, StartOffset: kafka.FirstOffset, CommitInterval: time.Second})
	defer rd.Close()
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: paceStatusTopic, Balancer: &kafka.Murmur2Balancer{},
		BatchTimeout: 5 * time.Millisecond, BatchSize: 1000, Async: true, RequiredAcks: kafka.RequireOne}
	defer w.Close()
	for {
		m, err := rd.FetchMessage(ctx)
		if err != nil {
			return
		}
		if headerOf(&m, "capper-duplicate") == "true" {
			continue
		}
		now := time.Now()
		campaign, i := intentOf(b, &m)
		id := fmt.Sprintf("%s-%d", campaign, i)
		r.mu.Lock()
		ok := r.p.Answer(now)
		if ok {
			r.byIntent[id]++
		}
		r.mu.Unlock()
		if ok {
			accepted.Add(1)
			continue
		}
		st, err := audit.HandBackStatus(m, now)
		if err != nil {
			b.Fatal(err)
		}
		if err := w.WriteMessages(ctx, kafka.Message{Key: m.Key, Value: st}); err != nil && ctx.Err() == nil {
			b.Errorf("write a throttled status: %v", err)
		}
	}
}

// reportThrottle prints each figure with its goal and ratio.
func reportThrottle(b *testing.B, sc pacingScale, low float64, r *throttleRun, o *pacingOutputs) {
	b.Helper()
	rp := &pacingReport{sc: sc}
	rp.line("throttle feedback: %d workers, %d partitions, one redis-server; budget %v/s burst %d; a provider accepting %v/s, then %v/s from %s",
		sc.workers, sc.partitions, sc.rate, sc.burst, low, sc.rate, r.p.Raised.Sub(r.p.First).Round(time.Second))
	within := func(from time.Time, ok func(float64) bool) (time.Duration, bool) {
		for _, e := range r.effective {
			if !e.at.Before(from) && ok(e.rate) {
				return e.at.Sub(from), true
			}
		}
		return 0, false
	}
	down, okDown := within(r.p.ThrottledFrom, func(v float64) bool { return v <= 1.1*low && v >= 0.9*low })
	rp.line("1. effective rate within 10%% of %v/s %s after the first throttled answer; goal <= %s: %s (%v)", low, down.Round(100*time.Millisecond),
		goalFollowDown, paceRatio(down.Seconds(), goalFollowDown.Seconds()), okDown)
	var acc, thr int
	var sum float64
	var n int
	for sec := r.p.ThrottledFrom.Add(down).Unix() + 1; sec < r.p.Raised.Unix(); sec++ {
		acc, thr = acc+r.p.Accepted[sec], thr+r.p.Throttled[sec]
	}
	for _, e := range r.effective {
		if e.at.After(r.p.ThrottledFrom.Add(down)) && e.at.Before(r.p.Raised) {
			sum, n = sum+e.rate, n+1
		}
	}
	share := float64(thr) / float64(max(1, acc+thr))
	rp.line("2. once it follows, until the provider is raised: %d sends answered, %d throttled (%.2f%%); goal <= %.0f%%: %s; mean effective rate %.0f/s (%.3f x %v)",
		acc+thr, thr, 100*share, 100*goalThrottled, paceRatio(share, goalThrottled), sum/float64(max(1, n)), sum/float64(max(1, n))/low, low)
	up, okUp := within(r.p.Raised, func(v float64) bool { return v >= 0.9*sc.rate })
	rp.line("3. back within 10%% of %v/s %s after the provider accepts it; goal <= %s: %s (%v)", sc.rate, up.Round(100*time.Millisecond),
		goalFollowUp, paceRatio(up.Seconds(), goalFollowUp.Seconds()), okUp)
	most := mostInOneSecond(o.laneRel)
	limit := goalMostPerSecond*sc.rate + float64(sc.burst)
	rp.line("4. most released in any 1 s: %d; goal <= %.0f (1.01 x rate + burst): %s", most, limit, paceRatio(float64(most), limit))
	delivered, cancelled := 0, 0
	for i := range o.blastDel {
		if o.blastDel[i] {
			delivered++
		}
		if o.blastCanc[i] {
			cancelled++
		}
	}
	once := 0
	for _, n := range r.byIntent {
		if n == 1 {
			once++
		}
	}
	rp.line("5. outcomes: %d intents, %d delivered, %d cancelled, %d other, %d dead letters; the provider accepted %d once (%d distinct) (goal: each intent accepted once)",
		sc.blast, delivered, cancelled, o.blastOther, o.deadLetters, once, len(r.byIntent))
	_, handedBack := r.p.Answers() // each throttled send is handed back
	rp.line("6. %d throttled sends handed back, %d delivered again decided anew, %d duplicates (goal: all %d anew, 0 duplicates: nothing throttled stayed counted)",
		handedBack, o.handedBack, o.duplicates, handedBack)
	fmt.Print(rp.w.String())
	if delivered != sc.blast || once != sc.blast || len(r.byIntent) != sc.blast || o.duplicates != 0 || o.deadLetters != 0 || o.blastOther != 0 {
		b.Errorf("not every intent accepted once: %d of %d delivered, %d accepted once, %d duplicates, %d dead letters, %d other",
			delivered, sc.blast, once, o.duplicates, o.deadLetters, o.blastOther)
	}
	if o.handedBack != handedBack {
		b.Errorf("%d throttled sends handed back, %d delivered again", handedBack, o.handedBack)
	}
	b.ReportMetric(down.Seconds(), "s-to-follow-down")
	b.ReportMetric(share, "throttled-share")
	b.ReportMetric(up.Seconds(), "s-to-follow-up")
	b.ReportMetric(float64(most)/limit, "x-of-rate-bound")
}
