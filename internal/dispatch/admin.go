package dispatch

// What the worker asks the brokers besides consuming and producing: that
// its topics exist (at start), and the consumer group's lag (on a timer, so
// that the gauge stays true while the worker is stalled).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/kafkautil"
)

// NewAdminClient returns a client for metadata, offsets and group requests
// with the worker's connection settings.
func NewAdminClient(o KafkaOptions) (*kafka.Client, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	return &kafka.Client{
		Addr:    kafka.TCP(o.Brokers...),
		Timeout: o.WriteTimeout,
		Transport: &kafka.Transport{
			ClientID: o.ClientID, DialTimeout: 10 * time.Second, TLS: o.TLS, SASL: o.SASL,
		},
	}, nil
}

// ErrMissingTopic is wrapped by CheckTopics for a topic the brokers do not
// have.
var ErrMissingTopic = errors.New("topic does not exist")

// CheckTopics asks the brokers for each topic (by the config key that names
// it) and reports every one that is missing or not accessible: a worker that
// starts without its output topic would otherwise stall on its first write.
// A topic c's answer lacks is asked again through connections of its own
// before it is reported: c's transport answers metadata from a cache it
// refreshes every few seconds, which does not know a topic created a moment
// ago (`capper topics create`, then a policy whose lanes it created).
func CheckTopics(ctx context.Context, c *kafka.Client, topics map[string]string) error {
	found, err := topicErrors(ctx, c, slices.Collect(maps.Values(topics)))
	if err != nil {
		return err
	}
	var again []string
	for _, t := range topics {
		if err, ok := found[t]; !ok || errors.Is(err, kafka.UnknownTopicOrPartition) {
			again = append(again, t)
		}
	}
	if len(again) > 0 {
		fresh, done := uncached(c, again)
		refound, err := topicErrors(ctx, fresh, again)
		done()
		if err != nil {
			return err
		}
		maps.Copy(found, refound)
	}
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(topics)) {
		t := topics[key]
		switch err, ok := found[t]; {
		case !ok || errors.Is(err, kafka.UnknownTopicOrPartition):
			errs = append(errs, fmt.Errorf("%s: %q: %w on the brokers", key, t, ErrMissingTopic))
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %q: %w", key, t, err))
		}
	}
	return errors.Join(errs...)
}

// topicErrors is each topic c's metadata names, with its error (nil: it
// exists).
func topicErrors(ctx context.Context, c *kafka.Client, names []string) (map[string]error, error) {
	slices.Sort(names)
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: names})
	if err != nil {
		return nil, fmt.Errorf("check topics %v: %w", names, err)
	}
	found := map[string]error{}
	for _, t := range md.Topics {
		found[t.Name] = t.Error
	}
	return found, nil
}

// uncached is a client with c's settings whose transport is new, so that
// its first metadata (of topics only) comes from the brokers; done closes
// its connections. A transport that is not kafka-go's own cannot be
// copied: c itself.
func uncached(c *kafka.Client, topics []string) (fresh *kafka.Client, done func()) {
	t := &kafka.Transport{MetadataTopics: topics}
	switch ct := c.Transport.(type) {
	case nil: // kafka-go's DefaultTransport: defaults
	case *kafka.Transport:
		t = &kafka.Transport{Dial: ct.Dial, DialTimeout: ct.DialTimeout, IdleTimeout: ct.IdleTimeout, TLS: ct.TLS,
			SASL: ct.SASL, Resolver: ct.Resolver, ClientID: ct.ClientID, Context: ct.Context, MetadataTopics: topics}
	default:
		return c, func() {}
	}
	return &kafka.Client{Addr: c.Addr, Timeout: c.Timeout, Transport: t}, t.CloseIdleConnections
}

// LagOptions configures a LagReporter; all are required but the plumbing.
type LagOptions struct {
	Client *kafka.Client
	Group  string
	Topic  string
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
	if o.Client == nil || o.Group == "" || o.Topic == "" || o.Interval <= 0 {
		return nil, fmt.Errorf("dispatch: lag reporter: Client, Group, Topic and a positive Interval are required")
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
	lags, err := PartitionLags(ctx, l.o.Client, l.o.Group, l.o.Topic)
	if err != nil {
		return err
	}
	l.set(-1, 0)
	for p, n := range lags {
		l.set(p, n)
	}
	return nil
}

// PartitionLags is a group's lag on each partition of topic: the high
// watermark minus the group's committed offset (all that is kept, where
// nothing is committed).
func PartitionLags(ctx context.Context, c *kafka.Client, group, topic string) (map[int]int64, error) {
	parts, err := kafkautil.Partitions(ctx, c, topic)
	if err != nil {
		return nil, err
	}
	reqs := make([]kafka.OffsetRequest, 0, 2*len(parts))
	for _, p := range parts {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	offs, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("offsets of %s: %w", topic, err)
	}
	committed, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	if err != nil {
		return nil, fmt.Errorf("committed offsets of group %s: %w", group, err)
	}
	switch {
	case errors.Is(committed.Error, kafka.GroupIdNotFound):
		// No member has joined yet: nothing is committed.
	case committed.Error != nil:
		return nil, fmt.Errorf("committed offsets of group %s: %w", group, committed.Error)
	}
	done := map[int]int64{}
	for _, p := range committed.Topics[topic] {
		if p.Error == nil {
			done[p.Partition] = p.CommittedOffset
		}
	}
	lags := map[int]int64{}
	for _, po := range offs.Topics[topic] {
		if po.Error != nil {
			continue
		}
		start, ok := done[po.Partition]
		if !ok || start < 0 {
			start = po.FirstOffset // nothing committed: all that is kept is behind
		}
		lags[po.Partition] = max(po.LastOffset-start, 0)
	}
	return lags, nil
}
