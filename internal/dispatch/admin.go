package dispatch

// The consumer groups' lag as gauges, from the brokers on a timer (the
// Kafka room's Admin), so that they stay true while the worker is stalled.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	capkafka "github.com/capper-dev/capper/internal/kafka"
)

// LagOptions configures a LagReporter; all are required but the plumbing.
type LagOptions struct {
	Admin *capkafka.Admin
	Group string
	Topic string
	// Waiting: Topic is a delay tier's, and the gauge is
	// capper_deferred_waiting{topic}, the intents waiting in it (its
	// partitions' lag summed), instead of capper_kafka_consumer_lag.
	Waiting  bool
	Interval time.Duration
	// Registerer receives capper_kafka_consumer_lag; nil registers nothing.
	Registerer prometheus.Registerer
	// Gauge, when set, receives the lag by partition instead of
	// capper_kafka_consumer_lag (another group's: the user-limits
	// applier's).
	Gauge  *prometheus.GaugeVec
	Logger *slog.Logger // nil discards
}

// LagReporter exports the consumer group's lag per partition of the input
// topic: the high watermark minus the group's committed offset, from the
// brokers, every Interval. It is the group's view, not this worker's: every
// replica exports every partition (alerts take the max per partition), and
// the value stays true when no batch is moving.
type LagReporter struct {
	o   LagOptions
	lag *prometheus.GaugeVec
	set func(partition int, lag int64)
}

// NewLagReporter checks the options and registers the gauge.
func NewLagReporter(o LagOptions) (*LagReporter, error) {
	if o.Admin == nil || o.Group == "" || o.Topic == "" || o.Interval <= 0 {
		return nil, fmt.Errorf("dispatch: lag reporter: Admin, Group, Topic and a positive Interval are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	l := &LagReporter{o: o}
	if o.Waiting {
		// One gauge vector for every tier: the first reporter registers it.
		l.lag = waitingGauge(o.Registerer)
		var sum map[int]int64
		l.set = func(p int, lag int64) {
			if p < 0 { // a refresh starts
				sum = map[int]int64{}
				return
			}
			sum[p] = lag
			var n int64
			for _, v := range sum {
				n += v
			}
			l.lag.WithLabelValues(o.Topic).Set(float64(n))
		}
		return l, nil
	}
	if o.Gauge != nil {
		l.lag = o.Gauge
	} else {
		l.lag = promauto.With(o.Registerer).NewGaugeVec(prometheus.GaugeOpts{
			Name: "capper_kafka_consumer_lag",
			Help: "Records of the input topic not yet committed by the consumer group (high watermark minus committed offset), by partition, from the brokers every kafka.lag_interval.",
		}, []string{"partition"})
	}
	l.set = func(p int, lag int64) {
		if p >= 0 {
			l.lag.WithLabelValues(strconv.Itoa(p)).Set(float64(lag))
		}
	}
	return l, nil
}

var waitingOpts = prometheus.GaugeOpts{
	Name: "capper_deferred_waiting",
	Help: "Deferred intents waiting in a delay tier (its records not yet committed by the tiers' consumer group), by topic, from the brokers every kafka.lag_interval.",
}

// RegisterDeferredWaiting registers capper_deferred_waiting (once per
// registry): a worker without delay tiers exports it too, empty.
func RegisterDeferredWaiting(reg prometheus.Registerer) { waitingGauge(reg) }

// waitingGauge registers capper_deferred_waiting once per registry.
func waitingGauge(reg prometheus.Registerer) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(waitingOpts, []string{"topic"})
	if reg == nil {
		return g
	}
	if err := reg.Register(g); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			return are.ExistingCollector.(*prometheus.GaugeVec)
		}
	}
	return g
}

// Run refreshes the gauge at once and then every Interval until ctx ends;
// it returns nil then. A failed refresh is logged and keeps the last values.
func (l *LagReporter) Run(ctx context.Context) error {
	t := time.NewTicker(l.o.Interval)
	defer t.Stop()
	failures := 0
	for {
		if err := l.Refresh(ctx); err != nil && ctx.Err() == nil {
			failures++
			if failures == 1 || failures%10 == 0 {
				l.o.Logger.Warn("consumer lag not refreshed", "topic", l.o.Topic, "failures", failures, "error", err)
			}
		} else {
			failures = 0
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Refresh reads the high watermarks and the committed offsets once.
func (l *LagReporter) Refresh(ctx context.Context) error {
	lags, err := l.o.Admin.Lags(ctx, l.o.Group, l.o.Topic)
	if err != nil {
		return err
	}
	l.set(-1, 0)
	for p, n := range lags {
		l.set(p, n)
	}
	return nil
}
