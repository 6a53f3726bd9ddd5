package dispatch

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/segments"
	"github.com/capper-dev/capper/internal/testenv"
)

// BenchmarkDeferredBlast: a blast of two intents per user against a limit
// of one a day, once with on_cap: suppress (half capped) and once with
// on_cap: defer (half deferred, then decided again when due, through one
// hop between tiers). It measures what the worker does for each (decode,
// decide against a real redis-server, route and build headers; not the
// Kafka I/O, which the deferral doubles for the deferred half): Redis
// script calls per intent and the worker's CPU per intent, and prints the
// deferred blast's ratio to the suppressed one. The goal is at most 2x.
// The two take turns round by round after an uncounted warm-up round, and
// each pays for collecting its own garbage, so that noise falls on both
// alike; -benchtime 20x gives steady figures.
func BenchmarkDeferredBlast(b *testing.B) {
	rs := testenv.StartRedis(b, testenv.RedisOptions{})
	admin := rs.Client()
	const users, batch = 5000, 500
	type mode struct {
		name       string
		onCap      capping.OnCap
		w          *Worker
		clock      time.Time
		bufs       [2][]kafka.Message // what the tiers hold, reused: Kafka's part, not measured
		calls, cpu time.Duration      // summed over the iterations (calls as a count)
	}
	modes := []*mode{{name: "suppress", onCap: capping.Suppress}, {name: "defer", onCap: capping.Defer}}
	for i, m := range modes {
		rules := testRules
		rules.Default = capping.Policy{Limits: []capping.Limit{{Name: "daily", Window: 24 * time.Hour, Max: 1, OnCap: m.onCap}}}
		if m.onCap == capping.Defer {
			rules.Default.Limits[0].MaxDefer = 48 * time.Hour
		}
		c := config.Default().Capping
		rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
		b.Cleanup(func() { rdb.Close() })
		eng, err := capping.New(context.Background(), capping.Options{Client: rdb, Rules: rules,
			KeyPrefix: fmt.Sprintf("bench%d", i), IdempotencyWindow: c.IdempotencyWindow.D(), SkewWarn: c.ClockSkewWarn.D()})
		if err != nil {
			b.Fatal(err)
		}
		var reader unread // the batches are handed to the stages
		nop := &kafka.Writer{}
		m.w, err = New(Options{Reader: reader, Deliveries: Output{tDel, nop}, Suppressed: Output{tSup, nop}, DeadLetter: Output{tDLQ, nop},
			Tiers:   []Tier{{Delay: time.Hour, Output: Output{"delay-1h", nop}}, {Delay: 6 * time.Hour, Output: Output{"delay-6h", nop}}},
			Decider: eng, Snapshots: noSnapshots{}, Decoder: testDecoder(b, 0), BatchSize: batch, BatchWait: time.Millisecond,
			RetryInitial: time.Millisecond, RetryMax: time.Millisecond, ShutdownTimeout: time.Second,
			Now: func() time.Time { return m.clock }})
		if err != nil {
			b.Fatal(err)
		}
		m.bufs = [2][]kafka.Message{make([]kafka.Message, 0, 2*users), make([]kafka.Message, 0, 2*users)}
	}
	calls := func() (n int64) {
		for _, s := range []string{"evalsha", "eval"} {
			n += commandCalls(b, admin, s)
		}
		return n
	}
	intentsDone := 0
	// Round 0 warms both up (scripts loaded, connections dialled, the
	// heap grown) and is not counted.
	for n := range b.N + 1 {
		msgs := make([]kafka.Message, 0, 2*users)
		for u := range users {
			uid := n*users + u
			for k := range 2 {
				msgs = append(msgs, kafka.Message{Topic: tIn, Key: strconv.AppendInt(nil, int64(uid), 10),
					Value: fmt.Appendf(nil, `{"id":"b-%d-%d","user_id":%d,"campaign_id":"c","channel":"push"}`, uid, k, uid)})
			}
		}
		// The modes take turns, so that the machine's noise and the
		// collector's state fall on both alike.
		for _, m := range modes {
			// Each mode pays for collecting its own garbage, and only
			// its own: a collection before and one after its work.
			runtime.GC()
			calls0, cpu0 := calls(), cpuTime()
			start := time.Date(2026, 11, 21, 16, 0, 0, 0, time.UTC).Add(time.Duration(n) * 72 * time.Hour)
			m.clock = start
			delayed := m.w.runStages(b, msgs, batch, m.bufs[0][:0])
			// The deferred half: handed over by the 6h tier (not due: one
			// hop to the next), then due and decided again.
			for k, at := range []time.Duration{6 * time.Hour, 25 * time.Hour} {
				m.clock = start.Add(at)
				delayed = m.w.runStages(b, delayed, batch, m.bufs[1-k%2][:0])
			}
			if len(delayed) != 0 {
				b.Fatalf("%s: %d intents still deferred after their slot freed", m.name, len(delayed))
			}
			runtime.GC()
			if n > 0 {
				m.cpu += cpuTime() - cpu0
				m.calls += time.Duration(calls() - calls0)
			}
		}
		if n > 0 {
			intentsDone += len(msgs)
		}
	}
	per := func(v time.Duration) float64 { return float64(v) / float64(intentsDone) }
	b.ReportMetric(per(modes[0].calls), "calls/intent(suppress)")
	b.ReportMetric(per(modes[1].calls), "calls/intent(defer)")
	b.ReportMetric(float64(modes[1].calls)/float64(modes[0].calls), "calls-ratio")
	b.ReportMetric(per(modes[0].cpu), "cpu-ns/intent(suppress)")
	b.ReportMetric(per(modes[1].cpu), "cpu-ns/intent(defer)")
	b.ReportMetric(float64(modes[1].cpu)/float64(modes[0].cpu), "cpu-ratio")
}

// runStages decides msgs in batches and routes them, as the worker's two
// stages do, and returns what went to a delay tier, as the tier hands it
// back (topic, headers), appended to into (which must not share msgs'
// array).
func (w *Worker) runStages(b *testing.B, msgs []kafka.Message, size int, into []kafka.Message) []kafka.Message {
	delayed := into
	for len(msgs) > 0 {
		n := min(size, len(msgs))
		bt, err := w.decideBatch(context.Background(), msgs[:n], nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		o := w.route(bt, nil)
		for i, t := range o.delayed {
			for _, m := range t {
				m.Topic = w.o.Tiers[i].Topic
				delayed = append(delayed, m)
			}
		}
		msgs = msgs[n:]
	}
	return delayed
}

type noSnapshots struct{}

func (noSnapshots) Load() *segments.Snapshot { return nil }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// commandCalls reads a command's calls from INFO commandstats.
func commandCalls(b *testing.B, c *redis.Client, cmd string) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			return n
		}
	}
	return 0
}

// unread is a Reader never read from.
type unread struct{}

func (unread) FetchMessage(ctx context.Context) (kafka.Message, error) {
	<-ctx.Done()
	return kafka.Message{}, ctx.Err()
}

func (unread) CommitMessages(context.Context, ...kafka.Message) error { return nil }
