package capping

// The engine's metrics and the classification of Redis errors.

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/redis/go-redis/v9"
)

type metrics struct {
	refusalHits  prometheus.Counter
	callsPer     prometheus.Gauge
	calls, asked atomic.Int64 // since start, for callsPer
	errors       *prometheus.CounterVec
	noscript     prometheus.Counter
	skew         *prometheus.GaugeVec
	scriptCalls  prometheus.Counter
	waitDuration prometheus.Histogram
	waitFailures prometheus.Counter
}

// newMetrics registers on reg (a nil reg creates unregistered metrics) and
// starts the labelled counters at 0 for every error kind.
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		errors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "capper_redis_errors_total",
			Help: "Decisions that failed with a Redis error, by kind (timeout, connection, cluster, other); not attempts answered voided, nor calls this worker abandoned.",
		}, []string{"kind"}),
		noscript: f.NewCounter(prometheus.CounterOpts{
			Name: "capper_redis_noscript_reloads_total",
			Help: "Script calls answered NOSCRIPT and re-sent with EVAL (a node lost its script cache).",
		}),
		skew: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "capper_redis_clock_skew_seconds",
			Help: "A Redis master's TIME minus this process's clock (at the middle of the round trip).",
		}, []string{"node"}),
		refusalHits: f.NewCounter(prometheus.CounterOpts{
			Name: "capper_refusal_cache_hits_total",
			Help: "Intents capped from the worker's memory of a full limit, without a Redis call.",
		}),
		callsPer: f.NewGauge(prometheus.GaugeOpts{
			Name: "capper_redis_calls_per_intent",
			Help: "Script calls per intent decided (exempt included, invalid not) since the process started.",
		}),
		scriptCalls: f.NewCounter(prometheus.CounterOpts{
			Name: "capper_redis_script_calls_total",
			Help: "Script calls sent to Redis (EVALSHA and EVAL).",
		}),
		waitDuration: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "capper_redis_wait_duration_seconds",
			Help:    "Time a batch waited for replicas to acknowledge its writes (redis.wait_replicas).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14),
		}),
		waitFailures: f.NewCounter(prometheus.CounterOpts{
			Name: "capper_redis_wait_failures_total",
			Help: "Masters whose replicas did not acknowledge a batch's writes in time; its answers are decided again.",
		}),
	}
	for _, k := range []string{kindTimeout, kindConnection, kindCluster, kindOther} {
		m.errors.WithLabelValues(k)
	}
	return m
}

// addCalls counts script calls sent.
func (m *metrics) addCalls(n int) {
	m.scriptCalls.Add(float64(n))
	m.calls.Add(int64(n))
}

// observeCalls counts intents decided and updates the calls per intent.
func (m *metrics) observeCalls(asked int) {
	if a := m.asked.Add(int64(asked)); a > 0 {
		m.callsPer.Set(float64(m.calls.Load()) / float64(a))
	}
}

// Error kinds of capper_redis_errors_total.
const (
	kindTimeout    = "timeout"
	kindConnection = "connection"
	kindCluster    = "cluster"
	kindOther      = "other"
)

func errorKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return kindTimeout
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, redis.ErrClosed),
		errors.Is(err, redis.ErrPoolTimeout), errors.As(err, new(*net.OpError)):
		return kindConnection
	}
	for _, p := range []string{"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "CROSSSLOT"} {
		if redis.HasErrorPrefix(err, p) {
			return kindCluster
		}
	}
	if s := err.Error(); strings.Contains(s, "connection refused") || strings.Contains(s, "broken pipe") ||
		strings.Contains(s, "connection reset") {
		return kindConnection
	}
	return kindOther
}

// retryable reports whether a script call's error means the script did not
// run on the node, so that sending it again cannot count an intent twice:
// NOSCRIPT (script cache lost), redirections left over when go-redis ran out
// of attempts, and the cluster and replica states in which Redis refuses a
// command before running it (go-redis retries those only for the first
// command of a node's sub-batch). A READONLY inside the script comes from its
// first write, before which it wrote nothing.
func retryable(err error) bool {
	for _, p := range []string{"NOSCRIPT", "TRYAGAIN", "MOVED", "ASK", "CLUSTERDOWN", "LOADING", "MASTERDOWN", "READONLY"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}
