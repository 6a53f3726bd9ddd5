package main

// BenchmarkHoldCost: what holding an intent in its budget's lane costs
// the workers, measured alone.

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/pacing"
)

// holdSlack is how long a run's CPU window lasts past INTENTS/RATE (the
// paced blast's drain): every run of a round is read over the same window,
// long enough for any of them to drain on a loaded machine.
const holdSlack = 8 * time.Second

// holdMode is one run of a BenchmarkHoldCost round.
type holdMode int

const (
	holdPaced  holdMode = iota // the blast at once, held and released at RATE
	holdAtOnce                 // the blast at once, decided at once
	holdAtRate                 // the blast's intents arriving at RATE, decided at once
)

var holdModes = [...]string{"paced", "unpaced, at once", "unpaced, at the rate"}

// holdRun is what one run measured.
type holdRun struct {
	cpu, alloc      float64       // worker CPU seconds and bytes allocated in the window
	drained, window time.Duration // from t0
	held, released  float64       // capper_pacing_held_total, _released_total
	idle            float64       // worker CPU-s/s before t0, nothing to do
}

// BenchmarkHoldCost measures the worker CPU an intent held in its lane
// costs over one decided at once (send pacing's goal: at most
// goalCPUDelta us more; docs/benchmarks.md, "What a held intent costs"):
//
//	go test ./cmd/capper -run '^$' -bench BenchmarkHoldCost -benchtime 6x -timeout 60m
//
// Each round runs one blast of INTENTS pushes (priority 50, one per user)
// three times, on fresh servers and workers (BenchmarkPacing's stack and
// its CAPPER_BENCH_PACING_* knobs: INTENTS, WORKERS, PARTITIONS, MASTERS,
// LANE_RECORDS, BURST, and RATE, 20000 by default here): written at once
// through a budget of RATE (each intent written to its lane, read back,
// released by the gate and decided); written at once without a budget
// (decided at once, as fast as the workers go); and written at RATE
// without a budget (decided at once, as they arrive at the pace the budget
// releases them). Nothing else runs: no campaign, kill, stop or
// transactional pushes, each a cost and a noise of its own. Every run's
// CPU is read over the same window, from the blast's first record to
// INTENTS/RATE + holdSlack (or until drained, if later), so that what idle
// workers burn weighs alike; the rounds rotate which run goes first, so
// that a machine that slows down within a round favours none. One
// round's difference moves by more than the goal on a shared machine: the
// figures are the medians of the rounds'.
func BenchmarkHoldCost(b *testing.B) {
	sc := pacingScaleFromEnv(b, 20000)
	sc.campaign, sc.txnRate = 0, 0
	var rounds [][3]holdRun
	for i := 0; b.Loop(); i++ {
		var r [3]holdRun
		for k := range 3 {
			m := holdMode((i + k) % 3)
			r[m] = runHold(b, sc, m)
		}
		if p := r[holdPaced]; p.held != float64(sc.blast) || p.released != float64(sc.blast) ||
			r[holdAtOnce].held != 0 || r[holdAtRate].held != 0 {
			b.Fatalf("round %d: paced held %.0f and released %.0f of %d intents, unpaced held %.0f and %.0f (want all, all, none, none)",
				i+1, p.held, p.released, sc.blast, r[holdAtOnce].held, r[holdAtRate].held)
		}
		rounds = append(rounds, r)
	}
	reportHold(b, sc, rounds)
}

// reportHold prints each round's runs and the median differences.
func reportHold(b *testing.B, sc pacingScale, rounds [][3]holdRun) {
	n := float64(sc.blast)
	fmt.Printf("held intent cost: %d workers, %d partitions, budget %v/s burst %d, lane records %s; a blast of %d pushes, all held and released when paced\n",
		sc.workers, sc.partitions, sc.rate, sc.burst, sc.laneRecords, sc.blast)
	fmt.Printf("worker CPU per intent (process_cpu_seconds_total, all workers, over one window), by round (first run first; drained in s of the window; idle workers' CPU-s/s before t0):\n")
	var atOnce, atRate, spread, alloc []float64
	for i, r := range rounds {
		var each []string
		for k := range 3 {
			m := holdMode((i + k) % 3)
			x := r[m]
			each = append(each, fmt.Sprintf("%s %.2f us (%.1f of %.1f s; idle %.3f)", holdModes[m], x.cpu/n*1e6, x.drained.Seconds(), x.window.Seconds(), x.idle))
		}
		fmt.Printf("   %d. %s\n", i+1, strings.Join(each, ", "))
		p := r[holdPaced].cpu / n * 1e6
		atOnce = append(atOnce, p-r[holdAtOnce].cpu/n*1e6)
		atRate = append(atRate, p-r[holdAtRate].cpu/n*1e6)
		spread = append(spread, (r[holdAtRate].cpu-r[holdAtOnce].cpu)/n*1e6)
		alloc = append(alloc, (r[holdPaced].alloc-r[holdAtRate].alloc)/n)
	}
	for _, d := range []struct {
		peer  string
		diffs []float64
	}{{"the same intents arriving at the rate, decided at once (holding's own cost)", atRate}, {"the blast decided at once", atOnce}} {
		v := slices.Clone(d.diffs)
		med := median(v) // sorts v
		fmt.Printf("paced over %s: median of %d rounds %+.2f us, goal within %.0f us: %s (rounds from %+.2f to %+.2f, middle half %+.2f to %+.2f)\n",
			d.peer, len(v), med, goalCPUDelta, paceRatio(math.Abs(med), goalCPUDelta), v[0], v[len(v)-1], v[len(v)/4], v[(3*len(v)-1)/4])
	}
	ms := median(spread) // sorts spread
	fmt.Printf("unpaced at the rate over at once (the rate's time, without holding): median %+.2f us (rounds from %+.2f to %+.2f)\n",
		ms, spread[0], spread[len(spread)-1])
	da := median(alloc)
	fmt.Printf("bytes allocated per intent, paced over at the rate: median %+.0f B\n", da)
	b.ReportMetric(median(atRate), "cpu-us/held-intent-over-at-rate")
	b.ReportMetric(median(atOnce), "cpu-us/held-intent-over-at-once")
	b.ReportMetric(da, "alloc-B/held-intent-over-at-rate")
}

// median is v's median (v is sorted in place).
func median(v []float64) float64 {
	slices.Sort(v)
	return (v[(len(v)-1)/2] + v[len(v)/2]) / 2
}

// runHold runs the blast once in mode m and reads the workers' CPU over
// the round's window.
func runHold(b *testing.B, sc pacingScale, m holdMode) holdRun {
	b.Helper()
	paced := m == holdPaced
	d := &pacingDriver{b: b, sc: sc, r: &pacingRun{paced: paced}, profile: os.Getenv("CAPPER_BENCH_PACING_PROFILE")}
	d.s, _ = pacingStack(b, sc, paced)
	d.s.cfg.HTTP.Pprof = d.profile != ""
	d.startWorkers()
	d.idle()
	d.r.t0 = time.Now()
	d.profileAt([...]string{"paced", "atonce", "atrate"}[m], 0, 10*time.Second)
	var err error
	if m == holdAtRate {
		err = produceAtRate(context.Background(), d.s.kafka.Addrs, sc.blast, sc.rate, func(i int, now time.Time) kafka.Message {
			k, v := blastIntent(i)
			return kafka.Message{Key: []byte(k), Value: []byte(v), Time: now}
		}, nil)
	} else {
		err = <-d.produceBlast()
	}
	if err != nil {
		b.Fatal(err)
	}
	var lanes []string
	if paced {
		lanes = []string{pacing.Topic(paceLanes, paceBudget, "high"), pacing.Topic(paceLanes, paceBudget, "normal")}
	}
	waitPacingDrained(b, d.s, sc, lanes, sc.blast, d.ws)
	r := holdRun{drained: time.Since(d.r.t0)}
	r.window = max(time.Duration(float64(sc.blast)/sc.rate*float64(time.Second))+holdSlack, r.drained)
	time.Sleep(time.Until(d.r.t0.Add(r.window)))
	d.mark(markEnd)
	d.profiles.Wait()
	d.finish()
	r.cpu, r.alloc, r.idle = d.r.cpu, d.r.alloc, d.r.cpuIdle
	r.held, r.released = d.r.metrics["capper_pacing_held_total"], d.r.metrics["capper_pacing_released_total"]
	return r
}
