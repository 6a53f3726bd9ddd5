package kafka

// A membership's metrics (capper_kafka_*): generations, partitions
// assigned, revoked and lost, how many a member owns, and how long it went
// without any.

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// GroupMetrics are every group's metrics of a process, labelled by group.
type GroupMetrics struct {
	rebalances, assigned, revoked, lost *prometheus.CounterVec
	bare                                *prometheus.CounterVec
	owned                               *prometheus.GaugeVec
	duration                            *prometheus.HistogramVec
}

// NewGroupMetrics registers the groups' metrics with reg.
func NewGroupMetrics(reg prometheus.Registerer) *GroupMetrics {
	f := promauto.With(reg)
	counter := func(name, help string) *prometheus.CounterVec {
		return f.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"group"})
	}
	return &GroupMetrics{
		rebalances: counter("capper_kafka_rebalances_total", "Generations this member of the consumer group joined (each rebalance it took part in)."),
		assigned:   counter("capper_kafka_partitions_assigned_total", "Partitions this member was assigned."),
		revoked:    counter("capper_kafka_partitions_revoked_total", "Partitions this member gave up in a rebalance, after committing what it had handed out of them."),
		lost:       counter("capper_kafka_partitions_lost_total", "Partitions this member lost without a commit (its membership ended: a session timeout, a fenced instance)."),
		bare:       counter("capper_kafka_unassigned_seconds_total", "Seconds this member spent in the group without any partition."),
		owned: f.NewGaugeVec(prometheus.GaugeOpts{Name: "capper_kafka_partitions_owned",
			Help: "Partitions this member owns now."}, []string{"group"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{Name: "capper_kafka_rebalance_duration_seconds",
			Help:    "From this member's join to its assignment taken (revocations included), per generation.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60}}, []string{"group"}),
	}
}

// groupMetrics is one group's (nil-safe: a group without metrics).
type groupMetrics struct {
	m     *GroupMetrics
	group string

	mu    sync.Mutex
	since time.Time // without a partition since then (zero: it has some)
}

func (gm *GroupMetrics) forGroup(group string) *groupMetrics {
	if gm == nil {
		return nil
	}
	for _, v := range []*prometheus.CounterVec{gm.rebalances, gm.assigned, gm.revoked, gm.lost, gm.bare} {
		v.WithLabelValues(group)
	}
	gm.owned.WithLabelValues(group)
	gm.duration.WithLabelValues(group)
	return &groupMetrics{m: gm, group: group, since: time.Now()}
}

func (m *groupMetrics) rebalanced(d time.Duration) {
	if m == nil {
		return
	}
	m.m.rebalances.WithLabelValues(m.group).Inc()
	m.m.duration.WithLabelValues(m.group).Observe(d.Seconds())
}

// owned notes that the member owns n partitions, having gained added and
// given up revoked.
func (m *groupMetrics) owned(n, added, revoked int) {
	if m == nil {
		return
	}
	m.m.owned.WithLabelValues(m.group).Set(float64(n))
	m.m.assigned.WithLabelValues(m.group).Add(float64(added))
	m.m.revoked.WithLabelValues(m.group).Add(float64(revoked))
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case n == 0 && m.since.IsZero():
		m.since = time.Now()
	case n > 0 && !m.since.IsZero():
		m.m.bare.WithLabelValues(m.group).Add(time.Since(m.since).Seconds())
		m.since = time.Time{}
	}
}

func (m *groupMetrics) lost(n int) {
	if m == nil {
		return
	}
	m.m.lost.WithLabelValues(m.group).Add(float64(n))
}
