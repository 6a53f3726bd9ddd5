package pacing

// Pacing's metrics (docs/reference/metrics-and-alerts.md).

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type metrics struct {
	calls                    *prometheus.CounterVec
	granted, unused, charged *prometheus.CounterVec
	released, held, expired  *prometheus.CounterVec
	rate, burst, effective   *prometheus.GaugeVec
	throttled                *prometheus.CounterVec
	waiting, drain           *prometheus.GaugeVec
	oldest                   *oldest
}

func newMetrics(reg prometheus.Registerer, now func() time.Time) *metrics {
	f := promauto.With(reg)
	m := &metrics{oldest: newOldest(now),
		calls: f.NewCounterVec(prometheus.CounterOpts{Name: "capper_pacing_lease_calls_total",
			Help: "Calls to Redis for a budget's tokens, by result: granted, waited (no token yet, or a higher lane's turn), error (Redis unreachable: held intents wait)."},
			[]string{"budget", "result"}),
		granted: f.NewCounterVec(prometheus.CounterOpts{Name: "capper_pacing_tokens_granted_total",
			Help: "Tokens of a budget this worker leased (one token is one release)."}, []string{"budget"}),
		unused: f.NewCounterVec(prometheus.CounterOpts{Name: "capper_pacing_tokens_unused_total",
			Help: "Tokens of a budget that paid for no delivery: intents released with a token then capped, deferred or cancelled, and leased tokens left unspent (dropped, never given back); passes without a token are not counted."}, []string{"budget"}),
		charged: f.NewCounterVec(prometheus.CounterOpts{Name: "capper_pacing_exempt_sends_total",
			Help: "Exempt sends a budget covers: never held, they take the budget's tokens ahead of every lane."}, []string{"budget"}),
		released: f.NewCounterVec(prometheus.CounterOpts{Name: "capper_pacing_released_total",
			Help: "Held intents released for their decision, by budget and lane (each took a token)."}, []string{"budget", "lane"}),
		held: f.NewCounterVec(prometheus.CounterOpts{Name: "capper_pacing_held_total",
			Help: "Intents written to a budget's lane to wait for their release (undecided), by budget and lane."}, []string{"budget", "lane"}),
		waiting: f.NewGaugeVec(prometheus.GaugeOpts{Name: "capper_pacing_waiting",
			Help: "Intents waiting in a budget's lane (the delay group's lag on its topic, from the brokers every kafka.lag_interval)."}, []string{"budget", "lane"}),
		drain: f.NewGaugeVec(prometheus.GaugeOpts{Name: "capper_pacing_drain_seconds",
			Help: "Expected time until a budget's lane is empty: the intents waiting in it and the lanes above it, at the budget's rate."}, []string{"budget", "lane"}),
		expired: f.NewCounterVec(prometheus.CounterOpts{Name: "capper_pacing_expired_total",
			Help: "Intents a budget covers cancelled for their send-by (expired): when they arrive (their lane would release them too late), or when released, by budget and lane."}, []string{"budget", "lane"}),
		rate: f.NewGaugeVec(prometheus.GaugeOpts{Name: "capper_pacing_budget_rate",
			Help: "A budget's rate per second in the policy in force (all workers together)."}, []string{"budget"}),
		burst: f.NewGaugeVec(prometheus.GaugeOpts{Name: "capper_pacing_budget_burst",
			Help: "A budget's burst in the policy in force."}, []string{"budget"}),
		effective: f.NewGaugeVec(prometheus.GaugeOpts{Name: "capper_pacing_rate_effective",
			Help: "A budget's effective rate per second as this worker last saw it in Redis (one for all workers): its rate, or less while its provider throttles sends."}, []string{"budget"}),
		throttled: f.NewCounterVec(prometheus.CounterOpts{Name: "capper_pacing_throttled_total",
			Help: "Delivery statuses saying a budget's provider throttled a send (status throttled)."}, []string{"budget"}),
	}
	if reg != nil {
		reg.MustRegister(m.oldest)
	}
	return m
}

// setBudgets shows the rates and bursts of s (and drops the budgets gone).
func (m *metrics) setBudgets(s *Set) {
	m.rate.Reset()
	m.burst.Reset()
	m.effective.Reset()
	m.waiting.Reset()
	m.drain.Reset()
	for _, b := range s.Budgets() {
		m.rate.WithLabelValues(b.Name).Set(b.Rate)
		m.burst.WithLabelValues(b.Name).Set(float64(b.Burst))
		m.effective.WithLabelValues(b.Name).Set(b.Rate) // until Redis says
		m.throttled.WithLabelValues(b.Name)
		// Counters start at 0 (a rate over a new budget's first hour).
		m.granted.WithLabelValues(b.Name)
		m.unused.WithLabelValues(b.Name)
		m.charged.WithLabelValues(b.Name)
		for _, r := range []string{"granted", "waited", "error"} {
			m.calls.WithLabelValues(b.Name, r)
		}
		for _, l := range b.Lanes {
			m.waiting.WithLabelValues(b.Name, l.Name)
			m.drain.WithLabelValues(b.Name, l.Name)
			m.released.WithLabelValues(b.Name, l.Name)
			m.held.WithLabelValues(b.Name, l.Name)
			m.expired.WithLabelValues(b.Name, l.Name)
		}
	}
}
