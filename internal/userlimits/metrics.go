package userlimits

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the applier's and the follower's.
type Metrics struct {
	applied, erased prometheus.Counter
	refused         *prometheus.CounterVec
	lag             prometheus.Histogram
	errors          *prometheus.CounterVec
	cacheDropped    prometheus.Counter
}

// The stages whose errors capper_user_limits_errors_total counts.
const (
	stageFetch  = "fetch"  // the applier's group reader
	stageCommit = "commit" // the applier's offset commit
	stageRedis  = "redis"  // the applier's write to Redis (retried)
	stageFollow = "follow" // the follower's readers
)

// NewMetrics registers the user-limits metrics with reg; every series
// starts at 0.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		applied: f.NewCounter(prometheus.CounterOpts{
			Name: "capper_user_limits_applied_total",
			Help: "Records of the user-limits topic this worker applied to Redis (a user's limits set or cleared).",
		}),
		erased: f.NewCounter(prometheus.CounterOpts{
			Name: "capper_user_limits_erased_total",
			Help: "Tombstones of the user-limits topic this worker applied: users erased from Redis (send log and limits).",
		}),
		refused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "capper_user_limits_refused_total",
			Help: "Records of the user-limits topic refused and skipped, by reason: key (not a user id), json (not a JSON object), field (a field missing, unknown or wrong), policy (limits the policy in force does not allow).",
		}, []string{"reason"}),
		lag: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "capper_user_limits_apply_lag_seconds",
			Help:    "From a user-limits record's timestamp to its write acknowledged by Redis.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300}, // 2: the goal
		}),
		errors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "capper_user_limits_errors_total",
			Help: "Errors of the user-limits topic's applier and follower, by stage: fetch, commit, redis (the write is retried, the record never skipped), follow (the follower's reads).",
		}, []string{"stage"}),
		cacheDropped: f.NewCounter(prometheus.CounterOpts{
			Name: "capper_user_limits_cache_dropped_total",
			Help: "Users whose refusals this worker's refusal cache held, dropped because their user-limits record changed or was erased (by the follower, or by the applier erasing them).",
		}),
	}
	for _, r := range Reasons {
		m.refused.WithLabelValues(string(r))
	}
	for _, s := range []string{stageFetch, stageCommit, stageRedis, stageFollow} {
		m.errors.WithLabelValues(s)
	}
	return m
}
