package main

// BenchmarkPacing: send pacing's promises measured on real `capper run`
// workers draining a blast through a provider budget, with an urgent
// campaign, exempt sends, a worker killed and the blast stopped.

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/config"
)

// Send pacing's goals (docs/concepts/pacing.md), each figure's own.
const (
	goalMostPerSecond = 1.01                   // most releases in any 1 s / rate (plus the burst)
	goalMeanRate      = 0.95                   // mean releases/s / rate while anything waits
	goalTxnP99        = time.Second            // transactional, input to delivery
	goalOvertake      = 100 * time.Millisecond // a p75 waiting longer than this holds back p50
	goalStopGrace     = 2 * time.Second        // nothing of a stopped blast released later
	goalLeaseCalls    = 0.01                   // Redis calls per paced intent
	goalCPUDelta      = 3.0                    // us of worker CPU per intent, paced - unpaced (pacing v2; v1 asked 1)
)

// pacingScale is the workload, from the environment
// (CAPPER_BENCH_PACING_*); the defaults fit a 2-core machine.
type pacingScale struct {
	blast, campaign int     // the blast (priority 50) and the urgent campaign (75)
	rate            float64 // the budget, releases/s
	burst           int
	txnRate         float64 // transactional (exempt) pushes/s
	workers         int
	masters         int // 1: one redis-server; more: a Redis Cluster
	partitions      int // of the input and every topic co-partitioned with it
	// The timeline, from the blast's first record: the campaign arrives,
	// a worker is killed (SIGKILL; restarted restartAfter later), the
	// blast is stopped; transactional pushes run from 0 until txnUntil
	// (and until nothing waits).
	campaignAt, killAt, stopAt, txnUntil time.Duration
	restartAfter                         time.Duration // after the kill; negative: never
	sample                               int           // cancelled users checked in Redis
	statusTopic                          string        // kafka.topics.delivery_status ("": none)
	laneRecords                          string        // kafka.lane_records of the paced run
}

// pacingScaleFromEnv reads the workload; rate is RATE's default.
func pacingScaleFromEnv(b *testing.B, rate float64) pacingScale {
	b.Helper()
	num := func(name string, def float64) float64 {
		v := os.Getenv("CAPPER_BENCH_PACING_" + name)
		if v == "" {
			return def
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			b.Fatalf("CAPPER_BENCH_PACING_%s=%q: not a number", name, v)
		}
		return f
	}
	s := pacingScale{blast: int(num("INTENTS", 200_000)), rate: num("RATE", rate),
		workers: int(num("WORKERS", 3)), masters: int(num("MASTERS", 1)),
		campaignAt: 10 * time.Second, killAt: 20 * time.Second, stopAt: 30 * time.Second, txnUntil: 35 * time.Second,
		sample: int(num("SAMPLE", 1000))}
	s.laneRecords = cmp.Or(os.Getenv("CAPPER_BENCH_PACING_LANE_RECORDS"), "compact")
	if v := os.Getenv("CAPPER_BENCH_PACING_RESTART"); v == "never" {
		s.restartAfter = -1
	} else {
		s.restartAfter = time.Duration(num("RESTART", 0) * float64(time.Second))
	}
	s.campaign = int(num("CAMPAIGN", float64(s.blast/10)))
	s.burst = int(num("BURST", math.Ceil(s.rate/10)))
	s.txnRate = num("TXN_RATE", s.rate/20)
	s.partitions = int(num("PARTITIONS", float64(max(4, 2*s.workers))))
	if s.workers < 2 || s.masters < 1 || s.partitions < 1 || s.blast < 1 || s.rate <= 0 || s.burst < 1 {
		b.Fatalf("CAPPER_BENCH_PACING_*: %+v (at least 2 workers, 1 master, 1 partition, 1 intent)", s)
	}
	return s
}

// BenchmarkPacing runs one workload twice on fresh servers, with a
// provider budget and without (first come, first served), and prints each
// figure with its goal and ratio (docs/benchmarks.md, send pacing):
//
//	go test ./cmd/capper -run '^$' -bench BenchmarkPacing -benchtime 1x -timeout 30m
//
// The workload: WORKERS `capper run` processes (as BenchmarkEndToEnd runs
// them: the test stack's broker timings, the production batch size) on
// PARTITIONS partitions, one redis-server (MASTERS 1) or a Redis Cluster
// of MASTERS masters, and one budget of RATE/s with a burst of BURST on
// push, lanes high (min_priority 75) and normal; a blast of INTENTS pushes
// (priority 50, one per user) at t=0, a campaign of CAMPAIGN pushes
// (priority 75) at 10 s, transactional pushes (exempt) at TXN_RATE a
// second from 0 to 35 s (and until nothing waits), one worker SIGKILLed at
// 20 s and restarted RESTART seconds later ("never": not restarted), the
// blast stopped (app.SetCampaign, what `capper campaign stop` calls) at
// 30 s. Each is CAPPER_BENCH_PACING_<NAME> in the environment; the
// defaults (INTENTS 200000, RATE 2000, BURST RATE/10, CAMPAIGN INTENTS/10,
// TXN_RATE RATE/20, WORKERS 3, PARTITIONS 2 x WORKERS (at least 4),
// MASTERS 1, RESTART 0) fit a 2-core machine; for a 16-core one:
// INTENTS=10000000 RATE=50000 WORKERS=8 MASTERS=6. SAMPLE (1000) is how
// many cancelled users are read back from Redis; LANE_RECORDS is the
// paced workers' kafka.lane_records (compact; headers: the form every
// version reads; both: each round runs paced in both forms, compact's the
// figures reported); SECONDS=1 also prints the
// run second by second, PROFILE=DIR saves CPU profiles of the workers never
// killed (profileAt). The
// workers are static members (kafka.group_instance_id w-0, w-1, ..., as the
// Helm chart sets it); MEMBERS=dynamic runs them without.
//
// -benchtime Nx runs N rounds, each paced then unpaced: the report is the
// last round's, and the worker CPU and allocation figures are each
// round's, with their median (one round's CPU moves by more than the
// goal on a shared machine).
func BenchmarkPacing(b *testing.B) {
	sc := pacingScaleFromEnv(b, 2000)
	// LANE_RECORDS=both: each round also runs paced with lane records in
	// headers, before the compact run in every other round (a machine
	// that slows down within a round favours neither), then unpaced.
	both := sc.laneRecords == "both"
	if both {
		sc.laneRecords = "compact"
	}
	var rounds, headers [][2]*pacingRun
	for i := 0; b.Loop(); i++ {
		var p, h *pacingRun
		hs := sc
		hs.laneRecords = "headers"
		if both && i%2 == 1 {
			h = runPacing(b, hs, true)
		}
		p = runPacing(b, sc, true)
		if both && i%2 == 0 {
			h = runPacing(b, hs, true)
		}
		u := runPacing(b, sc, false)
		rounds = append(rounds, [2]*pacingRun{p, u})
		if h != nil {
			headers = append(headers, [2]*pacingRun{h, u})
		}
	}
	last := rounds[len(rounds)-1]
	reportPacing(b, sc, last[0], last[1])
	reportRounds(b, rounds, "lane records "+sc.laneRecords, true)
	if both {
		reportRounds(b, headers, "lane records headers (the same unpaced runs)", false)
	}
}

const (
	paceBudget   = "push"
	paceLanes    = "capper-lanes"
	paceInput    = "send-intents"
	paceDelay    = "send-intents-delay-1m"
	paceGroup    = "pacing"
	paceBlast    = "blast"
	paceUrgent   = "urgent"
	paceReceipts = "receipts"
)

func pacePolicyYAML(sc pacingScale, budgets bool) string {
	p := `channels: [push, email, sms, inapp]
categories: [marketing, transactional]
default_category: marketing
exempt_categories: [transactional]
default_policy:
  limits:
    - {name: daily, window: 24h, max: 10}
`
	if budgets {
		p += fmt.Sprintf(`budgets:
  - name: %s
    rate: %v
    burst: %d
    channels: [push]
    lanes:
      - {name: high, min_priority: 75}
      - {name: normal}
`, paceBudget, sc.rate, sc.burst)
	}
	return p
}

// pacingRun is what one run measured.
type pacingRun struct {
	paced   bool
	intents int // every input record
	t0      time.Time
	blastIn time.Duration // producing the blast took
	killed, restarted, stopAck,
	txnStopped, drained time.Time
	cpuIdle  float64    // worker CPU/s (all workers) before t0, nothing to do
	cpu      float64    // worker CPU seconds from t0 to the end
	alloc    float64    // bytes the workers allocated from t0 to the end (go_memstats_alloc_bytes_total)
	cpuPhase [4]float64 // ... from t0 to the campaign, to the kill, to the stop, to the end
	metrics  map[string]float64
	requests [96]int64 // the broker's requests from t0 to drained, by kind
	out      pacingOutputs
	redis    redisCheck
}

// pacingWorker is one `capper run` process and its scrapes.
type pacingWorker struct {
	path, addr string
	p          *proc
	last       map[string]float64
	cpu        map[int]float64 // process_cpu_seconds_total at each mark it saw
	alloc      map[int]float64 // go_memstats_alloc_bytes_total likewise
	killed     bool
}

// The marks CPU is read at: t0, the campaign, the kill, the stop, the end.
const (
	markT0 = iota
	markCampaign
	markKill
	markStop
	markEnd
)

// pacingDriver runs one run's timeline.
type pacingDriver struct {
	b         *testing.B
	sc        pacingScale
	s         *stack
	r         *pacingRun
	ws        []*pacingWorker
	txnTimes  []time.Time // each transactional push's timestamp
	profile   string      // CAPPER_BENCH_PACING_PROFILE
	profiles  sync.WaitGroup
	engineCfg *config.Config
}
