package main

// BenchmarkPacing's report: each figure with its ratio to the goal.

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// pacingReport prints the figures of a paced run p and an unpaced run u.
type pacingReport struct {
	sc   pacingScale
	p, u *pacingRun
	w    strings.Builder
}

func (rp *pacingReport) line(format string, args ...any) { fmt.Fprintf(&rp.w, format+"\n", args...) }

// rel is a time of the paced run from its t0.
func (rp *pacingReport) rel(t time.Time) string {
	return fmt.Sprintf("t=%.1fs", t.Sub(rp.p.t0).Seconds())
}

func paceRatio(v, goal float64) string { return fmt.Sprintf("%.3fx", v/goal) }

func paceAt(ms int64) time.Time { return time.UnixMilli(ms) }

func reportPacing(b *testing.B, sc pacingScale, p, u *pacingRun) {
	b.Helper()
	rp := &pacingReport{sc: sc, p: p, u: u}
	rp.header()
	most, mean := rp.rate()
	rp.latency()
	overtakes := rp.lanes()
	stopViolations := rp.stop()
	perRelease, cpuDelta, allocDelta := rp.cost()
	if os.Getenv("CAPPER_BENCH_PACING_SECONDS") == "1" {
		secondsTable(rp.line, p)
	}
	rp.line("   duplicates delivered: paced %d, unpaced %d; dead letters %d / %d", p.out.duplicates, u.out.duplicates, p.out.deadLetters, u.out.deadLetters)
	rp.line("   batches decided (all workers, the killed one until its last scrape): paced %.0f of %.1f records on average, unpaced %.0f of %.1f",
		p.metrics["capper_batch_size_count"], p.metrics["capper_batch_size_sum"]/p.metrics["capper_batch_size_count"],
		u.metrics["capper_batch_size_count"], u.metrics["capper_batch_size_sum"]/u.metrics["capper_batch_size_count"])
	rp.line("   Kafka requests the broker answered per 1,000 intents (t=0 to drained; every client, the driver's alike in both): paced %s; unpaced %s",
		requestsLine(p.requests, p.intents), requestsLine(u.requests, u.intents))
	// Printed, not logged: a benchmark's log is cut to its first lines.
	fmt.Print(rp.w.String())

	b.ReportMetric(most, "x-of-rate-goal")
	b.ReportMetric(mean, "x-of-mean-rate-goal")
	b.ReportMetric(quantile(p.out.txnLatency, .99).Seconds(), "txn-p99-s")
	b.ReportMetric(float64(overtakes), "overtake-violations")
	b.ReportMetric(float64(stopViolations), "stop-violations")
	b.ReportMetric(perRelease, "lease-calls/intent")
	b.ReportMetric(cpuDelta, "cpu-us/intent-over-unpaced")
	b.ReportMetric(allocDelta, "alloc-B/intent-over-unpaced")
}

func (rp *pacingReport) header() {
	sc, p := rp.sc, rp.p
	rp.line("send pacing: %d workers, %d partitions, %s; budget %v/s burst %d (lanes high >= 75, normal); lane records %s",
		sc.workers, sc.partitions, map[bool]string{true: "one redis-server", false: fmt.Sprintf("a %d-master Redis Cluster", sc.masters)}[sc.masters == 1], sc.rate, sc.burst,
		sc.laneRecords)
	restart := "not restarted"
	if !p.restarted.IsZero() {
		restart = fmt.Sprintf("restarted, ready at %s", rp.rel(p.restarted))
	}
	rp.line("workload: blast %d (p50) at t=0 (written in %.1fs), campaign %d (p75) at t=%s, transactional %v/s (exempt) until %s: %d; worker killed (SIGKILL) at %s, %s; blast stopped (ack) at %s; drained at %s",
		sc.blast, p.blastIn.Seconds(), sc.campaign, sc.campaignAt, sc.txnRate, rp.rel(p.txnStopped), len(p.out.txnIn), rp.rel(p.killed), restart, rp.rel(p.stopAck), rp.rel(p.drained))
}

// rate prints figures 1 and 2 and returns their ratios to their goals.
func (rp *pacingReport) rate() (most, mean float64) {
	sc, o := rp.sc, &rp.p.out
	limit := goalMostPerSecond*sc.rate + float64(sc.burst)
	n := mostInOneSecond(sortedInts(o.laneRel))
	all := mostInOneSecond(sortedInts(o.laneRel, o.exemptDec))
	rp.line("1. most released in any 1 s (capper-released-at of %d lane deliveries): %d = %.3f x rate; goal <= %.0f (1.01 x rate + burst): %s",
		len(o.laneRel), n, float64(n)/sc.rate, limit, paceRatio(float64(n), limit))
	rp.line("   with the %d exempt sends (capper-decided-at) added: %d = %.3f x rate: %s of the same goal",
		len(o.exemptDec), all, float64(all)/sc.rate, paceRatio(float64(all), limit))

	// While anything waits: from the first release to the last.
	laneSorted := sortedInts(o.laneRel)
	var first int64
	if len(laneSorted) > 0 {
		first = laneSorted[0]
	}
	span := float64(o.lastTokenRel-first) / 1000
	exemptIn := 0
	for _, t := range o.exemptDec {
		if t >= first && t <= o.lastTokenRel {
			exemptIn++
		}
	}
	rate := float64(len(o.laneRel)) / span
	withExempt := float64(len(o.laneRel)+exemptIn) / span
	gap, gapAt := int64(0), first
	for i := 1; i < len(laneSorted); i++ {
		if d := laneSorted[i] - laneSorted[i-1]; d > gap {
			gap, gapAt = d, laneSorted[i-1]
		}
	}
	rp.line("2. mean release rate from the first release (%s) to the last (%s; after it only the stopped blast's cancellations, lanes empty at %s): %.0f/s = %.3f x rate; goal >= %.2f: %s",
		rp.rel(paceAt(first)), rp.rel(paceAt(o.lastTokenRel)), rp.rel(paceAt(o.lastLaneRec)), rate, rate/sc.rate, goalMeanRate, paceRatio(rate/sc.rate, goalMeanRate))
	rp.line("   with the exempt sends of that span (they take the budget's tokens first): %.0f/s = %.3f x rate: %s; longest pause between two releases %.2fs, from %s",
		withExempt, withExempt/sc.rate, paceRatio(withExempt/sc.rate, goalMeanRate), float64(gap)/1000, rp.rel(paceAt(gapAt)))
	return float64(n) / limit, rate / sc.rate / goalMeanRate
}

// latency prints figure 3, for both runs.
func (rp *pacingReport) latency() {
	name := map[bool]string{true: "paced  ", false: "unpaced"}
	for _, r := range []*pacingRun{rp.p, rp.u} {
		lat := r.out.txnLatency
		prov := providerLatency(&r.out, rp.sc.rate)
		rp.line("3. transactional, %s: input to delivery record p50 %s, p99 %s, max %s; with the provider taking deliveries in order at %v/s: p50 %s, p99 %s, max %s (goal p99 <= 1s: %s delivered, %s provider)",
			name[r.paced], quantile(lat, .5).Round(time.Millisecond), quantile(lat, .99).Round(time.Millisecond), quantile(lat, 1).Round(time.Millisecond), rp.sc.rate,
			quantile(prov, .5).Round(time.Millisecond), quantile(prov, .99).Round(time.Millisecond), quantile(prov, 1).Round(time.Millisecond),
			paceRatio(quantile(lat, .99).Seconds(), goalTxnP99.Seconds()), paceRatio(quantile(prov, .99).Seconds(), goalTxnP99.Seconds()))
	}
	for _, r := range []*pacingRun{rp.p, rp.u} {
		var kept []time.Duration
		until := r.killed.Add(10 * time.Second)
		if r.restarted.After(r.killed) {
			until = r.restarted.Add(10 * time.Second)
		}
		for i, in := range r.out.txnLatencyIn {
			if in.Before(r.killed.Add(-time.Second)) || in.After(until) {
				kept = append(kept, r.out.txnLatency[i])
			}
		}
		rp.line("   %s, leaving out the pushes written from 1 s before the kill to 10 s after it (or the restart): p50 %s, p99 %s (%d of %d)",
			name[r.paced], quantile(kept, .5).Round(time.Millisecond), quantile(kept, .99).Round(time.Millisecond), len(kept), len(r.out.txnLatency))
	}
}

// lanes prints figure 4 and returns its (release, p75) pairs.
func (rp *pacingReport) lanes() int {
	o, killed := &rp.p.out, rp.p.killed.UnixMilli()
	var before, after []int64
	for _, r := range o.normalRel {
		if r < killed {
			before = append(before, r)
		} else {
			after = append(after, r)
		}
	}
	throughKill := func(h heldSpan) bool { return h.held <= killed && h.rel > killed }
	pairs, releases := overtaken(o.normalRel, o.high, nil)
	pairsB, releasesB := overtaken(before, o.high, nil)
	pairsA, releasesA := overtaken(after, o.high, nil)
	pairsK, releasesK := overtaken(after, o.high, throughKill)
	longest, through := int64(0), 0
	for _, h := range o.high {
		longest = max(longest, h.rel-h.held)
		if throughKill(h) {
			through++
		}
	}
	rp.line("4. p50 released while a p75 had waited > 100 ms: %d (p50 release, p75) pairs over %d p50 releases; goal 0 (%d p75 delivered of %d, longest wait %s)",
		pairs, releases, o.urgentDel, rp.sc.campaign, time.Duration(longest)*time.Millisecond)
	rp.line("   p50 releases before the kill: %d pairs over %d releases; after it: %d over %d, and without the %d p75 intents held before the kill and released after it: %d over %d",
		pairsB, releasesB, pairsA, releasesA, through, pairsK, releasesK)
	return pairs
}

// stop prints figure 5 and returns its violations.
func (rp *pacingReport) stop() int {
	p, o := rp.p, &rp.p.out
	grace := p.stopAck.Add(goalStopGrace).UnixMilli()
	late, lastBlast := 0, int64(0)
	for _, r := range o.blastRel {
		if r > grace {
			late++
		}
		lastBlast = max(lastBlast, r)
	}
	delivered, cancelled, neither := 0, 0, 0
	for i := range rp.sc.blast {
		switch {
		case o.blastDel[i]:
			delivered++
		case o.blastCanc[i]:
			cancelled++
		default:
			neither++
		}
	}
	rp.line("5. blast: %d delivered, %d cancelled; released after the stop's ack + 2 s: %d (goal 0; last blast release %+.3fs from the ack); neither delivered nor cancelled: %d (goal 0; %d other outcomes); lanes empty %.2fs after the ack",
		delivered, cancelled, late, paceAt(lastBlast).Sub(p.stopAck).Seconds(), neither, o.blastOther, paceAt(o.lastLaneRec).Sub(p.stopAck).Seconds())
	rp.line("   Redis (engine inspect): %d of %d sampled cancelled blast users counted (goal 0); control: %d of %d delivered blast users counted (want all)",
		p.redis.cancelledCounted, p.redis.cancelled, p.redis.deliveredCounted, p.redis.delivered)
	return late + neither + p.redis.cancelledCounted
}

// cost prints figure 6 and returns the lease calls per released intent
// and the worker CPU (us) and bytes allocated per intent over the unpaced
// run's.
func (rp *pacingReport) cost() (perRelease, cpuDelta, allocDelta float64) {
	p, u, m := rp.p, rp.u, rp.p.metrics
	calls := m["capper_pacing_lease_calls_total"]
	perRelease = calls / m["capper_pacing_released_total"]
	rp.line("6. lease calls %.0f (granted %.0f, waited %.0f, error %.0f) for %.0f released intents (%.0f held, %.0f tokens granted, %.0f unused): %.4f calls per released intent, goal <= %.2f: %s; per held intent %.4f",
		calls, m[`capper_pacing_lease_calls_total{budget="push",result="granted"}`], m[`capper_pacing_lease_calls_total{budget="push",result="waited"}`],
		m[`capper_pacing_lease_calls_total{budget="push",result="error"}`], m["capper_pacing_released_total"], m["capper_pacing_held_total"], m["capper_pacing_tokens_granted_total"],
		m["capper_pacing_tokens_unused_total"], perRelease, goalLeaseCalls, paceRatio(perRelease, goalLeaseCalls), calls/m["capper_pacing_held_total"])
	cpuP, cpuU := p.cpu/float64(p.intents)*1e6, u.cpu/float64(u.intents)*1e6
	rp.line("   worker CPU per intent (process_cpu_seconds_total, all workers, t=0 to drained): paced %.2f us (%.1f s over %d intents, %.0fs), unpaced %.2f us (%.1f s over %d, %.0fs); difference %+.2f us, goal within %.0f us: %s; idle workers burn %.3f / %.3f CPU-s/s",
		cpuP, p.cpu, p.intents, p.drained.Sub(p.t0).Seconds(), cpuU, u.cpu, u.intents, u.drained.Sub(u.t0).Seconds(), cpuP-cpuU, goalCPUDelta,
		paceRatio(math.Abs(cpuP-cpuU), goalCPUDelta), p.cpuIdle, u.cpuIdle)
	preP := (p.cpuPhase[0] + p.cpuPhase[1] + p.cpuPhase[2]) / float64(p.intents) * 1e6
	preU := (u.cpuPhase[0] + u.cpuPhase[1] + u.cpuPhase[2]) / float64(u.intents) * 1e6
	rp.line("   t=0 to the stop only, over the same intents: paced %.2f us, unpaced %.2f us; difference %+.2f us: %s",
		preP, preU, preP-preU, paceRatio(math.Abs(preP-preU), goalCPUDelta))
	allocP, allocU := p.alloc/float64(p.intents), u.alloc/float64(u.intents)
	rp.line("   bytes the workers allocated per intent (go_memstats_alloc_bytes_total, t=0 to drained): paced %.0f, unpaced %.0f; difference %+.0f",
		allocP, allocU, allocP-allocU)
	rp.line("   worker CPU-s by phase, paced / unpaced: to the campaign %.1f / %.1f, to the kill %.1f / %.1f, to the stop %.1f / %.1f, to the end %.1f / %.1f",
		p.cpuPhase[0], u.cpuPhase[0], p.cpuPhase[1], u.cpuPhase[1], p.cpuPhase[2], u.cpuPhase[2], p.cpuPhase[3], u.cpuPhase[3])
	return perRelease, cpuP - cpuU, allocP - allocU
}

// reportRounds prints, for more than one round, each round's worker CPU
// and bytes allocated per intent, paced and unpaced, and the median
// differences (metric: reported as the benchmark's figures).
func reportRounds(b *testing.B, rounds [][2]*pacingRun, label string, metric bool) {
	if len(rounds) < 2 {
		return
	}
	var cpu, alloc []float64
	var each []string
	for _, r := range rounds {
		p, u := r[0], r[1]
		cpuP, cpuU := p.cpu/float64(p.intents)*1e6, u.cpu/float64(u.intents)*1e6
		allocP, allocU := p.alloc/float64(p.intents), u.alloc/float64(u.intents)
		cpu, alloc = append(cpu, cpuP-cpuU), append(alloc, allocP-allocU)
		each = append(each, fmt.Sprintf("%.1f / %.1f us, %.0f / %.0f B", cpuP, cpuU, allocP, allocU))
	}
	dc, da := median(cpu), median(alloc)
	fmt.Printf("%d rounds (%s), worker CPU and bytes allocated per intent, paced / unpaced: %s\n", len(rounds), label, strings.Join(each, "; "))
	fmt.Printf("   median difference: CPU %+.2f us (goal within %.0f us: %s), allocated %+.0f B\n", dc, goalCPUDelta, paceRatio(math.Abs(dc), goalCPUDelta), da)
	if metric {
		b.ReportMetric(dc, "cpu-us/intent-over-unpaced")
		b.ReportMetric(da, "alloc-B/intent-over-unpaced")
	}
}
