package dispatch

// The worker's metrics, updated once per committed batch.

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/segmentio/kafka-go"
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

func (w *Worker) observe(b *batch) {
	w.m.batch.Observe(time.Since(b.start).Seconds())
	w.m.batchSize.Observe(float64(len(b.msgs)))
	for i := range b.records {
		rec := &b.records[i]
		w.m.intents.WithLabelValues(rec.decision.Outcome.String(), rec.segment).Inc()
		if rec.invalid != nil {
			w.m.invalid.WithLabelValues(rec.invalid.Field).Inc()
		}
	}
	// The last record of each partition in the batch has the newest view of
	// that partition's high watermark.
	last := map[int]*kafka.Message{}
	for i := range b.msgs {
		last[b.msgs[i].Partition] = &b.msgs[i]
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
