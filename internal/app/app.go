// Package app assembles the capper worker from its configuration and runs
// its long-lived parts (consumer loop, snapshot watcher, Redis clock check,
// HTTP endpoint) as actors of one run group with an ordered shutdown: stop
// fetching, finish and commit the batch in flight, close the Kafka reader and
// writers, then close Redis.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/segments"
)

// Options are what Run needs beyond the configuration.
type Options struct {
	Config *config.Config
	Logger *slog.Logger
	// Registry receives every metric and serves /metrics; nil makes a new
	// one. The process and Go collectors are added to it.
	Registry *prometheus.Registry
	// Registerer, when set, is what the components register their metrics
	// with instead of Registry (it must pass them on to Registry); tests use
	// it to list every metric the worker defines.
	Registerer prometheus.Registerer
	// Now is the decision clock; nil is time.Now.
	Now     func() time.Time
	Version string
	// Started, when set, is called once every component is up, with the
	// address the HTTP endpoint listens on.
	Started func(httpAddr string)
}

// Run starts the worker and blocks until ctx ends (then shuts down in order
// and returns nil) or a component fails (then returns its error).
func Run(ctx context.Context, o Options) (err error) {
	cfg := o.Config
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	var regr prometheus.Registerer = reg
	if o.Registerer != nil {
		regr = o.Registerer
	}
	regr.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, name := range cfg.IgnoredEnv {
		log.Warn("environment variable matches no config key; ignored", "name", name)
	}

	rdb, err := NewRedisClient(cfg)
	if err != nil {
		return err
	}
	// Redis is closed last, after the worker has finished its batch.
	defer func() {
		if cerr := rdb.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close redis: %w", cerr)
		}
	}()
	engine, err := NewEngine(ctx, cfg, rdb, regr, log)
	if err != nil {
		return err
	}

	var current segments.Current
	watcher, err := startSegments(ctx, cfg, &current, regr, log, now)
	if err != nil {
		return err
	}

	kopts, err := kafkaOptions(cfg, log)
	if err != nil {
		return err
	}
	reader, err := dispatch.NewReader(kopts, cfg.Kafka.Topics.Input)
	if err != nil {
		return err
	}
	writers, err := newWriters(kopts, cfg.Kafka.Topics)
	if err != nil {
		_ = reader.Close()
		return err
	}
	worker, err := dispatch.New(dispatch.Options{
		Reader:          reader,
		Deliveries:      writers.deliveries,
		Suppressed:      writers.suppressedOrNil(),
		DeadLetter:      writers.deadLetter,
		Decider:         engine,
		Snapshots:       &current,
		Decoder:         dispatch.NewDecoder(cfg.Capping.Channels, cfg.Kafka.MaxIntentBytes),
		BatchSize:       cfg.Worker.BatchSize,
		BatchWait:       cfg.Worker.BatchWait.D(),
		Shadow:          !cfg.Worker.Enforce,
		FailOpen:        cfg.Worker.OnRedisError == "allow",
		RetryInitial:    cfg.Worker.RetryInitial.D(),
		RetryMax:        cfg.Worker.RetryMax.D(),
		ShutdownTimeout: cfg.Worker.ShutdownTimeout.D(),
		Now:             now,
		Logger:          log,
		Registerer:      regr,
	})
	if err != nil {
		_ = reader.Close()
		writers.close()
		return err
	}

	ops, err := newOpsServer(cfg.HTTP.Address, reg, cfg.HTTP.Pprof,
		worker.Ready,
		func() error {
			if cfg.Segments.Required && current.Load() == nil {
				return errors.New("no segment snapshot loaded")
			}
			return nil
		})
	if err != nil {
		_ = reader.Close()
		writers.close()
		return err
	}

	var g run.Group
	var workerErr error
	{
		// The consumer: on interrupt it stops fetching, finishes and commits
		// the batch in flight, then leaves the group and closes the writers.
		wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		g.Add(func() error {
			workerErr = worker.Run(wctx)
			if cerr := reader.Close(); cerr != nil {
				log.Warn("close kafka reader", "error", cerr)
			}
			writers.close()
			if workerErr != nil {
				return fmt.Errorf("worker: %w", workerErr)
			}
			return errors.New("worker stopped")
		}, func(error) { cancel() })
	}
	{
		wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		g.Add(func() error { return watcher.Run(wctx) }, func(error) { cancel() })
	}
	{
		cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		g.Add(func() error { return engine.RunClockCheck(cctx) }, func(error) { cancel() })
	}
	g.Add(ops.serve, func(error) { ops.stop() })
	{
		// The signal actor: ctx ends on SIGTERM/SIGINT (see cmd/capper).
		sctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			<-sctx.Done()
			return nil
		}, func(error) { cancel() })
	}

	log.Info("capper started", "version", o.Version, "http", ops.Addr(),
		"input", cfg.Kafka.Topics.Input, "group", cfg.Kafka.GroupID,
		"snapshot", current.Load().Version(), "enforce", cfg.Worker.Enforce)
	if o.Started != nil {
		o.Started(ops.Addr())
	}
	gerr := g.Run()
	if ctx.Err() != nil && workerErr == nil {
		log.Info("capper stopped", "batches", worker.Batches())
		return nil
	}
	if workerErr != nil {
		return fmt.Errorf("worker: %w", workerErr)
	}
	return gerr
}

// NewRedisClient connects to Redis as the config says.
func NewRedisClient(cfg *config.Config) (redis.UniversalClient, error) {
	r := cfg.Redis
	tlsCfg, err := r.TLS.Build()
	if err != nil {
		return nil, fmt.Errorf("redis.tls: %w", err)
	}
	c, err := capping.NewClient(capping.ClientOptions{
		Mode:             r.Mode,
		ClientName:       "capper",
		Addrs:            r.Addrs,
		MasterName:       r.MasterName,
		Username:         r.Username,
		Password:         string(r.Password),
		SentinelPassword: string(r.SentinelPassword),
		DB:               r.DB,
		TLS:              tlsCfg,
		DialTimeout:      r.DialTimeout.D(),
		ReadTimeout:      r.ReadTimeout.D(),
		WriteTimeout:     r.WriteTimeout.D(),
		PoolSize:         r.PoolSize,
		MaxRetries:       r.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("redis client: %w", err)
	}
	return c, nil
}

// NewEngine builds the capping engine (and loads its scripts into Redis).
func NewEngine(ctx context.Context, cfg *config.Config, rdb redis.UniversalClient, reg prometheus.Registerer, log *slog.Logger) (*capping.Engine, error) {
	c := cfg.Capping
	e, err := capping.New(ctx, capping.Options{
		Client:            rdb,
		Rules:             cfg.Rules(),
		Algorithm:         capping.Algorithm(c.Algorithm),
		KeyPrefix:         c.KeyPrefix,
		IdempotencyWindow: c.IdempotencyWindow.D(),
		SubIntervals:      c.SubIntervals,
		SkewWarn:          c.ClockSkewWarn.D(),
		Registerer:        reg,
		Logger:            log,
	})
	if err != nil {
		return nil, fmt.Errorf("capping engine: %w", err)
	}
	return e, nil
}

// OpenSegmentStore opens the configured snapshot store.
func OpenSegmentStore(ctx context.Context, cfg *config.Config) (segments.Store, error) {
	s := cfg.Segments
	st, err := segments.OpenStore(ctx, s.Source, segments.StoreOptions{S3: segments.S3Options{
		Region: s.S3.Region, Endpoint: s.S3.Endpoint, UsePathStyle: s.S3.UsePathStyle,
	}})
	if err != nil {
		return nil, fmt.Errorf("segments.source %s: %w", s.Source, err)
	}
	return st, nil
}

// acceptSnapshot rejects a snapshot that names a segment the config has no
// policy for: its users would silently get the default policy.
func acceptSnapshot(cfg *config.Config) func(*segments.Snapshot) error {
	known := map[string]bool{}
	for _, n := range cfg.SegmentNames() {
		known[n] = true
	}
	return func(s *segments.Snapshot) error {
		for _, seg := range s.Segments() {
			if !known[seg.Name] {
				return fmt.Errorf("segment %q has no policy in capping.segments (known: %v)", seg.Name, cfg.SegmentNames())
			}
		}
		return nil
	}
}

func startSegments(ctx context.Context, cfg *config.Config, cur *segments.Current, reg prometheus.Registerer, log *slog.Logger, now func() time.Time) (*segments.Watcher, error) {
	st, err := OpenSegmentStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	accept := acceptSnapshot(cfg)
	snap, err := segments.Load(ctx, st, segments.LoadOptions{Accept: accept})
	switch {
	case err == nil:
		cur.Store(snap)
	case cfg.Segments.Required:
		return nil, fmt.Errorf("no usable segment snapshot at %s (set segments.required: false to start without one): %w", cfg.Segments.Source, err)
	default:
		log.Warn("starting without a segment snapshot: every user gets the default policy until one loads",
			"source", cfg.Segments.Source, "error", err)
	}
	w, err := segments.NewWatcher(segments.WatcherOptions{
		Store:      st,
		Current:    cur,
		Interval:   cfg.Segments.PollInterval.D(),
		Accept:     accept,
		Logger:     log,
		Registerer: reg,
		Now:        now,
	})
	if err != nil {
		return nil, fmt.Errorf("segment watcher: %w", err)
	}
	return w, nil
}

func kafkaOptions(cfg *config.Config, log *slog.Logger) (dispatch.KafkaOptions, error) {
	k := cfg.Kafka
	tlsCfg, err := k.TLS.Build()
	if err != nil {
		return dispatch.KafkaOptions{}, fmt.Errorf("kafka.tls: %w", err)
	}
	mech, err := dispatch.NewSASL(k.SASL.Mechanism, k.SASL.Username, string(k.SASL.Password))
	if err != nil {
		return dispatch.KafkaOptions{}, err
	}
	return dispatch.KafkaOptions{
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
		Logger:            log,
	}, nil
}

type writerSet struct {
	deliveries, suppressed, deadLetter interface {
		dispatch.Writer
		Close() error
	}
}

func newWriters(o dispatch.KafkaOptions, t config.Topics) (*writerSet, error) {
	var ws writerSet
	var err error
	if ws.deliveries, err = dispatch.NewWriter(o, t.Deliveries); err != nil {
		return nil, err
	}
	if ws.deadLetter, err = dispatch.NewWriter(o, t.DeadLetter); err != nil {
		return nil, err
	}
	if t.Suppressed != "" {
		if ws.suppressed, err = dispatch.NewWriter(o, t.Suppressed); err != nil {
			return nil, err
		}
	}
	return &ws, nil
}

// suppressedOrNil avoids handing the worker a typed nil interface.
func (ws *writerSet) suppressedOrNil() dispatch.Writer {
	if ws.suppressed == nil {
		return nil
	}
	return ws.suppressed
}

func (ws *writerSet) close() {
	for _, w := range []interface{ Close() error }{ws.deliveries, ws.suppressed, ws.deadLetter} {
		if w != nil {
			_ = w.Close()
		}
	}
}
