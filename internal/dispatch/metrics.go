package dispatch

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/capping"
)

// Outcome label values of capper_intents_total.
const (
	OutcomeAllowed      = "allowed"
	OutcomeDuplicate    = "duplicate"
	OutcomeExempt       = "exempt"
	OutcomeCapped       = "capped"
	OutcomeShadowCapped = "shadow_capped"
	OutcomeInvalid      = "invalid"
	OutcomeFailOpen     = "fail_open"
)

// lagForget is how long a partition's lag series stays after this worker
// last saw a record of it: a rebalance moves partitions to other replicas,
// and their last value here would otherwise be exported forever.
const lagForget = 2 * time.Minute

type metrics struct {
	intents      *prometheus.CounterVec
	invalid      *prometheus.CounterVec
	decision     prometheus.Histogram
	batch        prometheus.Histogram
	batchSize    prometheus.Histogram
	redisRetries prometheus.Counter
	writeErrors  *prometheus.CounterVec
	commitErrors prometheus.Counter
	lag          *prometheus.GaugeVec
	lagSeen      map[int]time.Time // only touched by the writing stage
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		lagSeen: map[int]time.Time{},
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
			Help: "Failed write attempts to an output topic (they are retried).",
		}, []string{"topic"}),
		commitErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "capper_kafka_commit_errors_total",
			Help: "Failed offset commits (the batch may be redelivered).",
		}),
		lag: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "capper_kafka_consumer_lag",
			Help: "Records behind the partition's high watermark as of the last batch, by partition.",
		}, []string{"partition"}),
	}
}

func (w *Worker) observe(batch []kafka.Message, items []item, start time.Time) {
	w.m.batch.Observe(time.Since(start).Seconds())
	w.m.batchSize.Observe(float64(len(batch)))
	for i := range items {
		it := &items[i]
		if it.invalid != nil {
			w.m.intents.WithLabelValues(OutcomeInvalid, "").Inc()
			w.m.invalid.WithLabelValues(it.invalid.Field).Inc()
			continue
		}
		w.m.intents.WithLabelValues(w.outcome(it), it.segment).Inc()
	}
	// The last record of each partition in the batch has the newest view of
	// that partition's high watermark.
	last := map[int]*kafka.Message{}
	for i := range batch {
		last[batch[i].Partition] = &batch[i]
	}
	now := time.Now()
	for p, m := range last {
		w.m.lag.WithLabelValues(strconv.Itoa(p)).Set(float64(max(m.HighWaterMark-m.Offset-1, 0)))
		w.m.lagSeen[p] = now
	}
	for p, seen := range w.m.lagSeen {
		if now.Sub(seen) > lagForget {
			w.m.lag.DeleteLabelValues(strconv.Itoa(p))
			delete(w.m.lagSeen, p)
		}
	}
}

func (w *Worker) outcome(it *item) string {
	switch {
	case it.unchecked:
		return OutcomeFailOpen
	case it.decision.Outcome == capping.Exempt:
		return OutcomeExempt
	case it.decision.Outcome == capping.Duplicate:
		return OutcomeDuplicate
	case it.decision.Outcome == capping.Denied && w.o.Shadow:
		return OutcomeShadowCapped
	case it.decision.Outcome == capping.Denied:
		return OutcomeCapped
	default:
		return OutcomeAllowed
	}
}
