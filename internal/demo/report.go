package demo

// The demo's report: outcomes per segment from the worker's metrics, capped
// intents by limit from the suppressed topic, throughput and latency.

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	dto "github.com/prometheus/client_model/go"
)

// row is one segment's line of the report.
type row struct {
	intents, allowed, exempt, duplicates, capped, deadLettered int
	byLimit                                                    map[string]int
}

// Summary is the demo's outcome totals, as its report's total line.
type Summary struct {
	Intents, Allowed, Capped, Exempt, Duplicates, DeadLettered int
}

// throughput is what the worker decided while the blast came: intents
// (the blast's and the sections' that came with it) and the time.
type throughput struct {
	intents int
	elapsed time.Duration
	batches uint64
}

// newTable is the report's table style: columns right-aligned, two spaces
// apart.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
}

// writeReport prints the blast's table (the segments of the sections
// left out: they have their own) and the worker's figures.
func writeReport(w io.Writer, mfs []*dto.MetricFamily, o outputs, total int, tp throughput) Summary {
	fmt.Fprintf(w, "\ncapper demo: %d send-intents\n\n", total)
	sum := writeBlastTable(w, blastRows(mfs, o))
	writeFigures(w, mfs, tp)
	return Summary{Intents: sum.intents, Allowed: sum.allowed, Capped: sum.capped, Exempt: sum.exempt,
		Duplicates: sum.duplicates, DeadLettered: sum.deadLettered}
}

// blastRows are the blast's outcomes per segment, from the worker's
// capper_intents_total, with the capped ones by limit (from the
// suppressed topic's headers).
func blastRows(mfs []*dto.MetricFamily, o outputs) map[string]*row {
	rows := map[string]*row{}
	get := func(seg string) *row {
		if rows[seg] == nil {
			rows[seg] = &row{byLimit: map[string]int{}}
		}
		return rows[seg]
	}
	for _, mf := range mfs {
		if mf.GetName() != "capper_intents_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if heldUndecided(m) {
				continue
			}
			var outcome, seg string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "outcome":
					outcome = l.GetValue()
				case "segment":
					seg = l.GetValue()
				}
			}
			if seg == "" {
				seg = "(malformed)"
			}
			if isSectionSegment(seg) {
				continue
			}
			n := int(m.GetCounter().GetValue())
			r := get(seg)
			r.intents += n
			switch outcome {
			case "allowed":
				r.allowed += n
			case "duplicate":
				r.duplicates += n
			case "exempt":
				r.exempt += n
			case "capped":
				r.capped += n
			case "invalid":
				r.deadLettered += n
			}
		}
	}
	for _, m := range o.suppressed {
		if seg := headerOf(m, "capper-segment"); !isSectionSegment(seg) && headerOf(m, "capper-decision") == "capped" {
			get(seg).byLimit[headerOf(m, "capper-limit")]++
		}
	}
	return rows
}

// writeBlastTable prints rows, a segment a line in the snapshot's order,
// and their total, which it returns.
func writeBlastTable(w io.Writer, rows map[string]*row) row {
	names := make([]string, 0, len(rows))
	for n := range rows {
		names = append(names, n)
	}
	order := map[string]int{"new": 0, "active": 1, "dormant": 2, "none": 3, "(malformed)": 4}
	sort.Slice(names, func(i, j int) bool { return order[names[i]] < order[names[j]] })

	tw := newTable(w)
	fmt.Fprintln(tw, "segment\tintents\tallowed\tcapped\t(by limit)\texempt\tduplicates\tdead-lettered\t")
	var sum row
	for _, n := range names {
		r := rows[n]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t\n", n, r.intents, r.allowed, r.capped, limits(r.byLimit), r.exempt, r.duplicates, r.deadLettered)
		sum.intents += r.intents
		sum.allowed += r.allowed
		sum.capped += r.capped
		sum.exempt += r.exempt
		sum.duplicates += r.duplicates
		sum.deadLettered += r.deadLettered
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t\t%d\t%d\t%d\t\n", sum.intents, sum.allowed, sum.capped, sum.exempt, sum.duplicates, sum.deadLettered)
	_ = tw.Flush()
	return sum
}

// writeFigures prints the worker's figures: throughput, decision latency,
// overrides, the refusal cache.
func writeFigures(w io.Writer, mfs []*dto.MetricFamily, tp throughput) {
	p50, p99 := quantile(mfs, "capper_decision_duration_seconds", 0.5), quantile(mfs, "capper_decision_duration_seconds", 0.99)
	fmt.Fprintf(w, "\nthroughput: %.0f intents/s (%d intents in %s, %d batches: the blast and the sections' intents that came with it)\n",
		float64(tp.intents)/tp.elapsed.Seconds(), tp.intents, tp.elapsed.Round(time.Millisecond), tp.batches)
	fmt.Fprintf(w, "decision latency per batch (one Redis pipeline): p50 %s, p99 %s\n", fmtSeconds(p50), fmtSeconds(p99))
	fmt.Fprintf(w, "overrides: %.0f honoured (bypass, delivered past the caps and counted), %.0f refused (capped as usual)\n",
		counter(mfs, "capper_overrides_total", "result", "bypass"), counter(mfs, "capper_overrides_total", "result", "refused"))
	fmt.Fprintf(w, "refusal cache: %.0f intents capped without a Redis call; Redis calls per intent %.2f\n",
		counter(mfs, "capper_refusal_cache_hits_total", "", ""), gauge(mfs, "capper_redis_calls_per_intent"))
}

// counter sums a counter's series whose label (if given) has value.
func counter(mfs []*dto.MetricFamily, name, label, value string) float64 {
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || (l.GetName() == label && l.GetValue() == value)
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func gauge(mfs []*dto.MetricFamily, name string) float64 {
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

func limits(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func headerOf(m kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// quantile estimates a quantile from a histogram's buckets by linear
// interpolation inside the bucket, as Prometheus' histogram_quantile does.
func quantile(mfs []*dto.MetricFamily, name string, q float64) float64 {
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		total := float64(h.GetSampleCount())
		if total == 0 {
			return 0
		}
		rank := q * total
		prevBound, prevCount := 0.0, 0.0
		for _, b := range h.GetBucket() {
			c := float64(b.GetCumulativeCount())
			if c >= rank {
				if c == prevCount {
					return b.GetUpperBound()
				}
				return prevBound + (b.GetUpperBound()-prevBound)*(rank-prevCount)/(c-prevCount)
			}
			prevBound, prevCount = b.GetUpperBound(), c
		}
		return prevBound
	}
	return 0
}

func fmtSeconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(10 * time.Microsecond).String()
}
