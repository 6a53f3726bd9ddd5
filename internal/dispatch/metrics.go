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
	deferred     *prometheus.CounterVec
	hops         prometheus.Counter
	dueLag       prometheus.Histogram
	expired      prometheus.Counter
	refunds      *prometheus.CounterVec
	givenBack    *prometheus.CounterVec
	handedBack   *prometheus.CounterVec
	held         *prometheus.CounterVec
	cancelled    *prometheus.CounterVec
	pausedWait   prometheus.Gauge
}

// newMetrics registers the worker's metrics on reg and starts every series
// it can name in advance at 0 (topics, outcomes of the configured segments,
// fields), so that dashboards show 0 rather than no data.
func newMetrics(reg prometheus.Registerer, topics, segmentNames []string) *metrics {
	f := promauto.With(reg)
	m := &metrics{}
	m.registerDecisions(f)
	m.registerBatches(f)
	m.registerDeferrals(f)
	m.registerRefunds(f)
	for _, r := range capping.Reasons(capping.Cancelled) {
		m.cancelled.WithLabelValues(r.String())
	}
	for _, r := range capping.Reasons(capping.Deferred) {
		m.deferred.WithLabelValues(r.String())
	}
	for _, r := range refundResults {
		m.refunds.WithLabelValues(r)
		if r != refundIgnored && r != refundThrottled {
			m.givenBack.WithLabelValues(r)
			m.handedBack.WithLabelValues(r)
		}
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

// registerDecisions registers the intents decided, by outcome, and what
// decided them: Redis, overrides, the plans.
func (m *metrics) registerDecisions(f promauto.Factory) {
	m.intents = f.NewCounterVec(prometheus.CounterOpts{
		Name: "capper_intents_total",
		Help: "Send-intents processed, by outcome (allowed, duplicate, exempt, capped, shadow_capped, invalid, fail_open, deferred, cancelled) and segment.",
	}, []string{"outcome", "segment"})
	m.invalid = f.NewCounterVec(prometheus.CounterOpts{
		Name: "capper_invalid_intents_total",
		Help: "Intents sent to the dead-letter topic, by the field that was wrong.",
	}, []string{"field"})
	m.decision = f.NewHistogram(prometheus.HistogramOpts{
		Name:    "capper_decision_duration_seconds",
		Help:    "Time of one Decide call for a batch (one pipeline per Redis node).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
	})
	m.redisRetries = f.NewCounter(prometheus.CounterOpts{
		Name: "capper_redis_retries_total",
		Help: "Intents decided again because Redis failed to answer them.",
	})
	m.overrides = f.NewCounterVec(prometheus.CounterOpts{
		Name: "capper_overrides_total",
		Help: "Intents that asked to bypass the caps, by result: bypass and bypass-uncounted (honoured), refused (not allowed for the intent's campaign and category; decided normally).",
	}, []string{"result"})
	m.held = f.NewCounterVec(prometheus.CounterOpts{
		Name: "capper_held_for_plan_total",
		Help: "Intents capped or deferred because a campaign plan of a higher priority booked the slot (capper-held-for), by segment and limit; shadow mode counts what it would have held.",
	}, []string{"segment", "limit"})
}

// registerBatches registers the batches and their Kafka writes and commits.
func (m *metrics) registerBatches(f promauto.Factory) {
	m.batch = f.NewHistogram(prometheus.HistogramOpts{
		Name:    "capper_batch_duration_seconds",
		Help:    "Time from a batch's last fetch to its commit: decode, decide, write, commit.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
	m.batchSize = f.NewHistogram(prometheus.HistogramOpts{
		Name:    "capper_batch_size",
		Help:    "Intents per batch.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14),
	})
	m.writeErrors = f.NewCounterVec(prometheus.CounterOpts{
		Name: "capper_kafka_write_errors_total",
		Help: "Failed write attempts to an output topic, by topic name (temporary failures are retried).",
	}, []string{"topic"})
	m.refused = f.NewCounterVec(prometheus.CounterOpts{
		Name: "capper_kafka_refused_records_total",
		Help: "Records a topic refused for good (too large, invalid, not authorized), by topic; each went to the dead-letter topic instead, cut down if the dead-letter topic refused it.",
	}, []string{"topic"})
	m.commitErrors = f.NewCounter(prometheus.CounterOpts{
		Name: "capper_kafka_commit_errors_total",
		Help: "Failed offset commits (the batch may be redelivered).",
	})
}

// registerDeferrals registers the intents deferred to the delay tiers and
// read back, expired, or cancelled by campaign control.
func (m *metrics) registerDeferrals(f promauto.Factory) {
	m.deferred = f.NewCounterVec(prometheus.CounterOpts{
		Name: "capper_deferred_total",
		Help: "Intents deferred to a delay tier, by reason (the capper-reason of a deferred intent: docs/reference/event-contract.md). A deferred intent deferred again counts again.",
	}, []string{"reason"})
	m.hops = f.NewCounter(prometheus.CounterOpts{
		Name: "capper_defer_hops_total",
		Help: "Deferred intents passed from one delay tier to the next, not due yet.",
	})
	m.dueLag = f.NewHistogram(prometheus.HistogramOpts{
		Name:    "capper_defer_due_lag_seconds",
		Help:    "How late a deferred intent was decided again after its capper-not-before (tier granularity, a paused or lagging worker).",
		Buckets: prometheus.ExponentialBuckets(0.1, 2, 16),
	})
	m.expired = f.NewCounter(prometheus.CounterOpts{
		Name: "capper_defer_expired_total",
		Help: "Deferred intents capped because their slot would free only past max_defer (capper-reason: defer-expired).",
	})
	m.cancelled = f.NewCounterVec(prometheus.CounterOpts{
		Name: "capper_cancelled_total",
		Help: "Intents cancelled (never delivered, not counted), by reason (the capper-reason of a cancelled intent: docs/reference/event-contract.md).",
	}, []string{"reason"})
	m.pausedWait = f.NewGauge(prometheus.GaugeOpts{
		Name: "capper_paused_waiting",
		Help: "Intents waiting in the delay tiers for a paused campaign: those this worker sent there minus those it read back (sum it over the workers: a worker may read back what another sent).",
	})
}

// registerRefunds registers the delivery statuses read, and the give-backs
// of lost attempts.
func (m *metrics) registerRefunds(f promauto.Factory) {
	m.refunds = f.NewCounterVec(prometheus.CounterOpts{
		Name: "capper_refunds_total",
		Help: "Delivery statuses read, by result: applied (a send's slot given back), unknown (no such id in the user's log), nothing (already refunded, or out of every window), ignored (a status that does not refund), failed (Redis down with on_redis_error: allow).",
	}, []string{"result"})
	m.givenBack = f.NewCounterVec(prometheus.CounterOpts{
		Name: "capper_given_back_total",
		Help: "Intents whose attempt's answer was lost and that ended undelivered (cancelled, waiting for a pause, deferred, capped, dead-lettered), given back by result: applied (the lost attempt had counted it: taken out), unknown (it had not), nothing (counted, but kept: over-counts only), failed (Redis down with on_redis_error: allow).",
	}, []string{"result"})
	m.handedBack = f.NewCounterVec(prometheus.CounterOpts{
		Name: "capper_handed_back_total",
		Help: "Throttled sends their sender handed back (a throttled status with the delivery), held again ahead of their lane, by the give-back's result: applied (taken out of the user's record), unknown (not recorded: given back before), nothing (known, kept: over-counts only), failed (Redis down with on_redis_error: allow: it stays counted, and its next delivery is that send).",
	}, []string{"result"})
}

// observe counts a committed batch: a status by its refund, a hop as a
// hop, and every other entry (dead-lettered ones included) by its outcome.
func (w *Worker) observe(b *batch) {
	w.m.batch.Observe(time.Since(b.start).Seconds())
	w.m.batchSize.Observe(float64(len(b.msgs)))
	var held struct {
		budget, lane string
		n            int
	}
	defer func() {
		if held.n > 0 {
			w.o.Pacer.Held(held.budget, held.lane, held.n)
		}
	}()
	for i := range b.entries {
		e := &b.entries[i]
		d := &e.decision
		if e.kind == kindStatus {
			w.m.refunds.WithLabelValues(e.refund).Inc()
			continue
		}
		if e.back != nil { // a status that handed a send back: that intent's too
			w.m.refunds.WithLabelValues(refundThrottled).Inc()
			w.m.handedBack.WithLabelValues(e.refund).Inc()
		}
		switch e.kind {
		case kindHop:
			w.m.hops.Inc()
			continue
		case kindHold:
			// Not decided yet: its outcome is counted when it is
			// released; the hold is counted now, written and committed
			// (once per run of one lane's, not once per intent).
			if held.n > 0 && (held.budget != e.held.budget || held.lane != e.held.lane) {
				w.o.Pacer.Held(held.budget, held.lane, held.n)
				held.n = 0
			}
			held.budget, held.lane, held.n = e.held.budget, e.held.lane, held.n+1
			continue
		case kindDue:
			if !e.parked && e.lane == nil {
				w.m.dueLag.Observe(max(d.At.Sub(e.tier.notBefore).Seconds(), 0))
			}
			if e.tier.paused {
				w.m.pausedWait.Dec()
			}
		}
		switch {
		case d.Outcome == capping.Deferred:
			w.m.deferred.WithLabelValues(d.Reason.String()).Inc()
			if d.Reason == capping.ReasonPaused {
				w.m.pausedWait.Inc()
			}
		case d.Outcome == capping.Cancelled:
			w.m.cancelled.WithLabelValues(d.Reason.String()).Inc()
		case d.Reason == capping.ReasonDeferExpired:
			w.m.expired.Inc()
		}
		w.m.intents.WithLabelValues(d.Outcome.String(), e.segment).Inc()
		if d.HeldFor != "" {
			w.m.held.WithLabelValues(e.segment, d.Limit).Inc()
		}
		if e.invalid != nil {
			w.m.invalid.WithLabelValues(e.invalid.Field).Inc()
		}
		switch {
		case d.Override != capping.NoOverride:
			w.m.overrides.WithLabelValues(d.Override.String()).Inc()
		case d.OverrideRefused:
			w.m.overrides.WithLabelValues(OverrideRefused).Inc()
		}
	}
}
