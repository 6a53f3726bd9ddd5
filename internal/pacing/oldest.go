package pacing

// How long the oldest held intent has waited: per lane partition this
// worker reads, the time the record its gate waits on was held.

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type headKey struct {
	budget, lane string
	partition    int
	retry        bool // the lane's retry topic's partition
}

// oldest is capper_pacing_oldest_wait_seconds: per budget and lane, the
// longest wait of a record at the head of one of this worker's gates
// (alerts take the max over workers).
type oldest struct {
	now   func() time.Time
	desc  *prometheus.Desc
	mu    sync.Mutex
	heads map[headKey]time.Time
}

func newOldest(now func() time.Time) *oldest {
	return &oldest{now: now, heads: map[headKey]time.Time{},
		desc: prometheus.NewDesc("capper_pacing_oldest_wait_seconds",
			"How long the held intent at the head of a budget's lane has waited, while it waits for its tokens (the longest over the lane's partitions this worker reads; no series while none waits here).",
			[]string{"budget", "lane"}, nil)}
}

// set records the held time of the record at the head of a partition's
// gate; zero: nothing waits there.
func (o *oldest) set(k headKey, held time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if held.IsZero() {
		delete(o.heads, k)
		return
	}
	o.heads[k] = held
}

func (o *oldest) Describe(ch chan<- *prometheus.Desc) { ch <- o.desc }

func (o *oldest) Collect(ch chan<- prometheus.Metric) {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := o.now()
	type lane struct{ budget, lane string }
	longest := map[lane]float64{}
	for k, t := range o.heads {
		l := lane{k.budget, k.lane}
		longest[l] = max(longest[l], now.Sub(t).Seconds())
	}
	for l, v := range longest {
		ch <- prometheus.MustNewConstMetric(o.desc, prometheus.GaugeValue, v, l.budget, l.lane)
	}
}
