package app

// The consumer actor: the worker with the Kafka reader and writers it owns.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/control"
	"github.com/capper-dev/capper/internal/dispatch"
	capkafka "github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/policy"
)

type consumer struct {
	// groups are the consumer groups' metrics (the users' limits
	// applier's group reports there too).
	groups  *capkafka.GroupMetrics
	worker  *dispatch.Worker
	reader  *dispatch.Consumer // the intents, statuses and due tier records
	writers *writerSet
	lag     []*dispatch.LagReporter // the input's, then each tier's
	// control follows the control topic (nil: no campaign control); the
	// worker decides nothing before it read the topic to its end.
	control *control.Follower
	source  *dispatch.ControlSource
	pacer   *pacer // nil: no pacing
}

// newConsumer builds the reader, the writers and the worker; on an error it
// closes what it built. hold holds each generation's partitions
// (dispatch.ConsumerOptions.Hold; nil: none).
func newConsumer(ctx context.Context, cfg *config.Config, admin *capkafka.Admin, engine *capping.Engine, dec *dispatch.Decoder, snaps dispatch.Snapshots, plans dispatch.Plans, pol *policy.Loaded, rdb redis.UniversalClient, reg prometheus.Registerer, log *slog.Logger, now func() time.Time, sleep func(context.Context, time.Duration) error, hold func(context.Context)) (_ *consumer, err error) {
	kopts, err := kafkaOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	kopts.GroupMetrics = capkafka.NewGroupMetrics(reg)
	if err := checkAllTopics(ctx, admin, cfg, pol, log); err != nil {
		return nil, err
	}
	lags, err := newLagReporters(admin, cfg, reg, log)
	if err != nil {
		return nil, err
	}
	tiers := make([]string, len(cfg.Kafka.DelayTiers))
	for i, t := range cfg.Kafka.DelayTiers {
		tiers[i] = t.Topic
	}
	copts := dispatch.ConsumerOptions{Kafka: kopts, Input: cfg.Kafka.Topics.Input,
		Status: cfg.Kafka.Topics.DeliveryStatus, Tiers: tiers, DelayGroupID: cfg.Kafka.DelayGroup(), Now: now, Sleep: sleep, Hold: hold}
	pc, err := startPacer(ctx, cfg, pol, rdb, admin, &copts, reg, log, now)
	if err != nil {
		return nil, err
	}
	writers, err := newWriters(kopts, cfg.Kafka.Topics, cfg.Kafka.DelayTiers)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			writers.close()
			pc.close()
		}
	}()
	c := &consumer{groups: kopts.GroupMetrics, writers: writers, lag: lags, pacer: pc}
	var ctl dispatch.Control
	if t := cfg.Kafka.Topics.Control; t != "" {
		if c.source, err = dispatch.NewControlSource(kopts, t); err != nil {
			return nil, err
		}
		c.control = control.NewFollower(control.FollowerOptions{Source: c.source, Writer: c.source, Topic: t, Registerer: reg,
			Logger: log, Now: now})
		ctl = c.control
		if copts.Parked = cfg.Kafka.Topics.Parked; copts.Parked != "" {
			copts.Park = dispatch.NewParkCheck(ctl, cfg.Control.MaxPause.D())
		}
	}
	reader, err := dispatch.NewConsumer(copts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = reader.Close()
		}
	}()
	c.reader = reader
	wo := workerOptions(cfg, reader, writers, engine, dec, snaps, plans, ctl, reg, log, now)
	wo.Parked = writers.parkedOutput(cfg.Kafka.Topics.Parked)
	if pc != nil {
		wo.Pacer, wo.LanePrefix, wo.LaneWriter = pc, pc.prefix, pc.writer(kopts)
		wo.CompactLanes = cfg.Kafka.LaneRecords == "compact"
	}
	worker, err := dispatch.New(wo)
	if err != nil {
		return nil, err
	}
	c.worker = worker
	if pc != nil {
		pc.gate.Free = worker.LaneFree
	}
	return c, nil
}

// checkAllTopics checks, before anything reads or writes, that every topic
// the config names exists and is set as it must be (the lanes' with the
// others, when budgets are on).
func checkAllTopics(ctx context.Context, admin *capkafka.Admin, cfg *config.Config, pol *policy.Loaded, log *slog.Logger) error {
	if err := checkTopics(ctx, admin, &cfg.Kafka); err != nil {
		return err
	}
	var lanes *pacing.Set
	if cfg.Kafka.Topics.Lanes != "" {
		lanes = budgets(pol)
	}
	return checkTopicSettings(ctx, admin, &cfg.Kafka, lanes, log)
}

// newLagReporters are the lag reporters of the input (the worker's group)
// and of each delay tier (the delay group's; their records waiting).
func newLagReporters(admin *capkafka.Admin, cfg *config.Config, reg prometheus.Registerer, log *slog.Logger) ([]*dispatch.LagReporter, error) {
	lag, err := dispatch.NewLagReporter(dispatch.LagOptions{Admin: admin, Group: cfg.Kafka.GroupID, Topic: cfg.Kafka.Topics.Input,
		Interval: cfg.Kafka.LagInterval.D(), Registerer: reg, Logger: log})
	if err != nil {
		return nil, err
	}
	lags := []*dispatch.LagReporter{lag}
	dispatch.RegisterDeferredWaiting(reg)
	for _, t := range cfg.Kafka.DelayTiers {
		l, err := dispatch.NewLagReporter(dispatch.LagOptions{Admin: admin, Group: cfg.Kafka.DelayGroup(), Topic: t.Topic, Waiting: true,
			Interval: cfg.Kafka.LagInterval.D(), Registerer: reg, Logger: log})
		if err != nil {
			return nil, err
		}
		lags = append(lags, l)
	}
	return lags, nil
}

// workerOptions are the worker's options: what it reads and writes, what
// decides, and cfg's worker settings.
func workerOptions(cfg *config.Config, reader *dispatch.Consumer, writers *writerSet, engine *capping.Engine, dec *dispatch.Decoder,
	snaps dispatch.Snapshots, plans dispatch.Plans, ctl dispatch.Control, reg prometheus.Registerer, log *slog.Logger, now func() time.Time) dispatch.Options {
	w := cfg.Worker
	return dispatch.Options{
		Reader:          reader,
		Tiers:           writers.tiers,
		StatusTopic:     cfg.Kafka.Topics.DeliveryStatus,
		RefundStatuses:  cfg.Refunds.Statuses,
		Refunder:        engine,
		Deliveries:      dispatch.Output{Topic: cfg.Kafka.Topics.Deliveries, Writer: writers.deliveries},
		Suppressed:      writers.suppressedOutput(cfg.Kafka.Topics.Suppressed),
		DeadLetter:      dispatch.Output{Topic: cfg.Kafka.Topics.DeadLetter, Writer: writers.deadLetter},
		Decider:         engine,
		Policy:          engine.PolicyVersion,
		Snapshots:       snaps,
		Plans:           plans,
		Control:         ctl,
		MaxPause:        cfg.Control.MaxPause.D(),
		Decoder:         dec,
		Segments:        cfg.SegmentNames(),
		BatchSize:       w.BatchSize,
		BatchWait:       w.BatchWait.D(),
		Shadow:          !w.Enforce,
		FailOpen:        w.OnRedisError == "allow",
		RetryInitial:    w.RetryInitial.D(),
		RetryMax:        w.RetryMax.D(),
		ShutdownTimeout: w.ShutdownTimeout.D(),
		StuckTimeout:    w.StuckTimeout.D(),
		Now:             now,
		Logger:          log,
		Registerer:      reg,
	}
}

// configError marks an error in what the configuration names (exit status 2,
// like a bad config file).
type configError struct{ err error }

func (e configError) Error() string { return e.err.Error() }
func (e configError) Unwrap() error { return e.err }
func (configError) ExitCode() int   { return 2 }

// checkTopics refuses to start when a configured topic is missing: the
// worker would stall on its first write to it.
func checkTopics(ctx context.Context, admin *capkafka.Admin, k *config.Kafka) error {
	t := k.Topics
	topics := map[string]string{"kafka.topics.input": t.Input, "kafka.topics.deliveries": t.Deliveries, "kafka.topics.dead_letter": t.DeadLetter}
	if t.Suppressed != "" {
		topics["kafka.topics.suppressed"] = t.Suppressed
	}
	if t.DeliveryStatus != "" {
		topics["kafka.topics.delivery_status"] = t.DeliveryStatus
	}
	if t.Control != "" {
		topics["kafka.topics.control"] = t.Control
	}
	if t.Parked != "" {
		topics["kafka.topics.parked"] = t.Parked
	}
	if t.UserLimits != "" {
		topics["kafka.topics.user_limits"] = t.UserLimits
	}
	for i, d := range k.DelayTiers {
		topics[fmt.Sprintf("kafka.delay_tiers[%d].topic", i)] = d.Topic
	}
	err := admin.CheckTopics(ctx, topics)
	if errors.Is(err, capkafka.ErrMissingTopic) {
		return configError{fmt.Errorf("kafka topics (create them: capper topics create --config FILE; or fix the config): %w", err)}
	}
	if err != nil {
		return fmt.Errorf("kafka topics: %w", err)
	}
	return nil
}

// run consumes until ctx ends and the batch in flight is committed, then
// leaves the group and closes the writers. With campaign control it first
// waits until the control topic was read to its end: a worker started
// after a stop never delivers an intent of that campaign.
func (c *consumer) run(ctx context.Context, log *slog.Logger) error {
	if c.control != nil {
		if err := c.control.Wait(ctx); err != nil {
			c.close(log)
			return nil // stopped before the first decision
		}
	}
	err := c.worker.Run(ctx)
	c.close(log)
	return err
}

// followControl is the control actor: it follows the topic until ctx
// ends, then closes its readers.
func (c *consumer) followControl(ctx context.Context) error {
	defer c.source.Close()
	return c.control.Run(ctx)
}

// controlReady fails until the control topic was read to its end.
func (c *consumer) controlReady() error {
	if c.control == nil {
		return nil
	}
	return c.control.Ready()
}

func (c *consumer) close(log *slog.Logger) {
	if err := c.reader.Close(); err != nil {
		log.Warn("close the kafka consumer", "error", err)
	}
	c.writers.close()
	c.pacer.close()
}

func kafkaOptions(cfg *config.Config, log *slog.Logger) (capkafka.Options, error) {
	k := cfg.Kafka
	tlsCfg, err := k.TLS.Build()
	if err != nil {
		return capkafka.Options{}, fmt.Errorf("kafka.tls: %w", err)
	}
	mech, err := capkafka.NewSASL(k.SASL.Mechanism, k.SASL.Username, string(k.SASL.Password))
	if err != nil {
		return capkafka.Options{}, err
	}
	return capkafka.Options{
		Brokers:           k.Brokers,
		ClientID:          k.ClientID,
		GroupID:           k.GroupID,
		TLS:               tlsCfg,
		SASL:              mech,
		Compression:       k.Compression,
		StartOffset:       k.StartOffset,
		FetchMaxWait:      k.FetchMaxWait.D(),
		SessionTimeout:    k.SessionTimeout.D(),
		RebalanceTimeout:  k.RebalanceTimeout.D(),
		HeartbeatInterval: k.HeartbeatInterval.D(),
		WriteTimeout:      k.WriteTimeout.D(),
		BatchSize:         cfg.Worker.BatchSize,
		InstanceID:        k.GroupInstanceID,
		GroupProtocol:     k.GroupProtocol,
		LeaveOnClose:      k.LeaveOnShutdown,
		Logger:            log,
	}, nil
}

type closingWriter interface {
	dispatch.Writer
	Close() error
}

type writerSet struct {
	deliveries, suppressed, deadLetter closingWriter
	parked                             closingWriter   // nil: no parked topic
	tiers                              []dispatch.Tier // their writers are *kafka.Writer
}

// newWriters builds a writer per output topic; on an error it closes the
// ones it built.
func newWriters(o capkafka.Options, t config.Topics, tiers []config.DelayTier) (_ *writerSet, err error) {
	ws := &writerSet{}
	defer func() {
		if err != nil {
			ws.close()
		}
	}()
	for _, w := range []struct {
		dst   *closingWriter
		topic string
	}{{&ws.deliveries, t.Deliveries}, {&ws.deadLetter, t.DeadLetter}, {&ws.suppressed, t.Suppressed}} {
		if w.topic == "" {
			continue // suppressed is optional
		}
		kw, err := capkafka.NewWriter(o, w.topic)
		if err != nil {
			return nil, fmt.Errorf("writer for %s: %w", w.topic, err)
		}
		*w.dst = kw
	}
	if t.Parked != "" {
		if ws.parked, err = capkafka.NewTierWriter(o, t.Parked); err != nil {
			return nil, fmt.Errorf("writer for %s: %w", t.Parked, err)
		}
	}
	for _, d := range tiers {
		kw, err := capkafka.NewTierWriter(o, d.Topic)
		if err != nil {
			return nil, fmt.Errorf("writer for %s: %w", d.Topic, err)
		}
		ws.tiers = append(ws.tiers, dispatch.Tier{Delay: d.Delay.D(), Output: dispatch.Output{Topic: d.Topic, Writer: kw}})
	}
	return ws, nil
}

// parkedOutput avoids handing the worker a typed nil interface.
func (ws *writerSet) parkedOutput(topic string) dispatch.Output {
	if ws.parked == nil {
		return dispatch.Output{}
	}
	return dispatch.Output{Topic: topic, Writer: ws.parked}
}

// suppressedOutput avoids handing the worker a typed nil interface.
func (ws *writerSet) suppressedOutput(topic string) dispatch.Output {
	if ws.suppressed == nil {
		return dispatch.Output{}
	}
	return dispatch.Output{Topic: topic, Writer: ws.suppressed}
}

// close closes every writer. Their errors are not worth reporting: every
// record the worker wrote was acknowledged before its batch was committed.
func (ws *writerSet) close() {
	for _, w := range []closingWriter{ws.deliveries, ws.suppressed, ws.deadLetter, ws.parked} {
		if w != nil {
			_ = w.Close()
		}
	}
	for _, t := range ws.tiers {
		_ = t.Writer.(closingWriter).Close()
	}
}

// newDecoder is the intent decoder of a worker: the event contract with the
// channels and categories of the policy in force (rules), which the policy
// watcher replaces on every swap.
func newDecoder(cfg *config.Config, rules *capping.Rules) (*dispatch.Decoder, error) {
	return dispatch.NewDecoder(dispatch.DecoderOptions{
		Channels: rules.Channels, Categories: rules.Categories, DefaultCategory: rules.DefaultCategory,
		MaxBytes: cfg.Kafka.MaxIntentBytes,
	})
}
