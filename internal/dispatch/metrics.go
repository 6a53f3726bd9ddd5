package dispatch

// The worker's metrics, updated once per committed batch.

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/segments"
)

type metrics struct {
	intents      *prometheus.CounterVec
	invalid      *prometheus.CounterVec
	decision     prometheus.Histogram
	batch        prometheus.Histogram
	batchSize    prometheus.Histogram
	redisRetries prometheus.Counter
	writeErrors  *prometheus.CounterVec
	refused      *prometheus.CounterVec
	commitErrors prometheus.Counter
	overrides    *prometheus.CounterVec
}

// newMetrics registers the worker's metrics on reg and starts every series
// it can name in advance at 0 (topics, outcomes of the configured segments,
// fields), so that dashboards show 0 rather than no data.
func newMetrics(reg prometheus.Registerer, topics, segmentNames []string) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		intents: f.NewCounterVec(prometheus.CounterOpts{
			Name: "capper_intents_total",
			Help: "Send-intents processed, by outcome (allowed, duplicate, exempt, capped, shadow_capped, invalid, fail_open) and segment.",
		}, []string{"outcome", "segment"}),
		invalid: f.NewCounterVec(prometheus.CounterOpts{
			Name: "capper_invalid_intents_total",
			Help: "Intents sent to the dead-letter topic, by the field that was wrong.",
		}, []string{"field"}),
		decision: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "capper_decision_duration_seconds",
			Help:    "Time of one Decide call for a batch (one pipeline per Redis node).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		batch: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "capper_batch_duration_seconds",
			Help:    "Time from a batch's last fetch to its commit: decode, decide, write, commit.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		batchSize: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "capper_batch_size",
			Help:    "Intents per batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		redisRetries: f.NewCounter(prometheus.CounterOpts{
			Name: "capper_redis_retries_total",
			Help: "Intents decided again because Redis failed to answer them.",
		}),
		writeErrors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "capper_kafka_write_errors_total",
			Help: "Failed write attempts to an output topic, by topic name (temporary failures are retried).",
		}, []string{"topic"}),
		refused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "capper_kafka_refused_records_total",
			Help: "Records a topic refused for good (too large, invalid, not authorized), by topic; each went to the dead-letter topic instead, cut down if the dead-letter topic refused it.",
		}, []string{"topic"}),
		commitErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "capper_kafka_commit_errors_total",
			Help: "Failed offset commits (the batch may be redelivered).",
		}),
		overrides: f.NewCounterVec(prometheus.CounterOpts{
			Name: "capper_overrides_total",
			Help: "Intents that asked to bypass the caps, by result: bypass and bypass-uncounted (honoured), refused (not allowed for the intent's campaign and category; decided normally).",
		}, []string{"result"}),
	}
	for _, t := range topics {
		m.writeErrors.WithLabelValues(t)
		m.refused.WithLabelValues(t)
	}
	for _, seg := range append(slices.Clone(segmentNames), segments.None) {
		for _, o := range capping.Outcomes() {
			if o != capping.Invalid {
				m.intents.WithLabelValues(o.String(), seg)
			}
		}
	}
	m.intents.WithLabelValues(capping.Invalid.String(), "")
	for _, f := range invalidFields {
		m.invalid.WithLabelValues(f)
	}
	for _, r := range []string{capping.Bypass.String(), capping.BypassUncounted.String(), OverrideRefused} {
		m.overrides.WithLabelValues(r)
	}
	return m
}

func (w *Worker) observe(b *batch) {
	w.m.batch.Observe(time.Since(b.start).Seconds())
	w.m.batchSize.Observe(float64(len(b.msgs)))
	for i := range b.records {
		rec := &b.records[i]
		w.m.intents.WithLabelValues(rec.decision.Outcome.String(), rec.segment).Inc()
		if rec.invalid != nil {
			w.m.invalid.WithLabelValues(rec.invalid.Field).Inc()
		}
		switch d := &rec.decision; {
		case d.Override != capping.NoOverride:
			w.m.overrides.WithLabelValues(d.Override.String()).Inc()
		case d.OverrideRefused:
			w.m.overrides.WithLabelValues(OverrideRefused).Inc()
		}
	}
}
