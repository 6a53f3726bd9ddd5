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
	"log/slog"
	"time"

	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/policy"
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
	// Now is the decision clock; nil is time.Now. Sleep waits a duration
	// of that clock (the delay tiers' wait for a due record); nil: a timer.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	// Build is exported as capper_build_info and logged at start.
	Build cli.Build
	// Started, when set, is called once every component is up, with the
	// address the HTTP endpoint listens on.
	Started func(httpAddr string)
}

// errNoTiers refuses a policy that defers on a worker without delay tiers.
var errNoTiers = errors.New("the policy defers intents (on_cap: defer or quiet_hours), but this worker has no delay tiers: set kafka.delay_tiers")

// Run starts the worker and blocks until ctx ends (then shuts down in order
// and returns nil) or a component fails (then returns its error).
//
// Ownership: Redis is closed by Run itself, last, after every actor has
// stopped; the consumer actor owns the Kafka reader and writers and closes
// them when it stops; what is built before the group starts is closed on
// the way out only when a later step fails.
func Run(ctx context.Context, o Options) (err error) {
	cfg := o.Config
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
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
	promauto.With(regr).NewGauge(prometheus.GaugeOpts{
		Name:        "capper_build_info",
		Help:        "The running capper: 1, with its version, VCS revision and Go version as labels.",
		ConstLabels: prometheus.Labels{"version": o.Build.Version, "revision": o.Build.Revision, "go_version": o.Build.GoVersion},
	}).Set(1)
	for _, name := range cfg.IgnoredEnv {
		log.Warn("environment variable matches no config key; ignored", "name", name)
	}
	for _, msg := range cfg.Deprecations {
		log.Warn("deprecated config key", "message", msg)
	}

	rdb, err := NewRedisClient(cfg)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := rdb.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close redis: %w", cerr)
		}
	}()
	// The policy first: the engine is built with its first version, and
	// later ones are swapped in between two batches.
	var engine *capping.Engine
	var dec *dispatch.Decoder // follows the policy's channels and categories
	var current segments.Current
	policies, err := newPolicyWatcher(ctx, cfg, func(ctx context.Context, l *policy.Loaded) error {
		if l.Rules.Defers() && len(cfg.Kafka.DelayTiers) == 0 {
			return errNoTiers
		}
		if engine == nil {
			return nil // the first version: NewEngine takes it
		}
		if err := engine.SetPolicy(ctx, l.Rules, l.Version); err != nil {
			return err
		}
		if err := dec.SetVocabulary(l.Rules.Channels, l.Rules.Categories, l.Rules.DefaultCategory); err != nil {
			return fmt.Errorf("policy %s: %w", l.Version, err) // the engine checked the same lists
		}
		warnUnpoliced(log, current.Load(), l)
		return nil
	}, regr, log, now)
	if err != nil {
		return err
	}
	if err := policies.Poll(ctx); err != nil {
		return fmt.Errorf("no usable cap policy from %s: %w", policies.Source(), err)
	}
	if engine, err = NewEngine(ctx, cfg, policies.Current(), rdb, regr, log); err != nil {
		return err
	}
	if dec, err = newDecoder(cfg, &policies.Current().Rules); err != nil {
		return err
	}
	watcher, err := startSegments(ctx, cfg, &current, policies, regr, log, now)
	if err != nil {
		return err
	}
	regr.MustRegister(unpolicedCollector{snap: &current, policy: policies})
	cons, err := newConsumer(ctx, cfg, engine, dec, &current, regr, log, now, o.Sleep)
	if err != nil {
		return err
	}
	ops, err := newOpsServer(cfg.HTTP.Address, reg, cfg.HTTP.Pprof,
		func() string {
			return "policy " + engine.PolicyVersion() + "\nsnapshot " + current.Load().Version()
		},
		cons.worker.Ready,
		func() error {
			if cfg.Segments.Required && current.Load() == nil {
				return errors.New("no segment snapshot loaded")
			}
			return nil
		})
	if err != nil {
		cons.close(log)
		return err
	}

	var g run.Group
	var consumerErr error
	{
		// The consumer: on interrupt it stops fetching, finishes and commits
		// the batch in flight, then leaves the group and closes the writers.
		cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		g.Add(func() error {
			consumerErr = cons.run(cctx, log)
			if consumerErr != nil {
				return fmt.Errorf("worker: %w", consumerErr)
			}
			return errors.New("worker stopped")
		}, func(error) { cancel() })
	}
	{
		wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		g.Add(func() error { return watcher.Run(wctx) }, func(error) { cancel() })
	}
	{
		pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		g.Add(func() error { return policies.Run(pctx) }, func(error) { cancel() })
	}
	{
		lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		g.Add(func() error {
			errs := make(chan error, len(cons.lag))
			for _, l := range cons.lag {
				go func() { errs <- l.Run(lctx) }()
			}
			var err error
			for range cons.lag {
				err = errors.Join(err, <-errs)
			}
			return err
		}, func(error) { cancel() })
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

	log.Info("capper started", "version", o.Build.Version, "revision", o.Build.Revision, "http", ops.Addr(),
		"input", cfg.Kafka.Topics.Input, "group", cfg.Kafka.GroupID,
		"snapshot", current.Load().Version(), "policy", engine.PolicyVersion(), "policy_source", policies.Source(),
		"enforce", cfg.Worker.Enforce)
	if o.Started != nil {
		o.Started(ops.Addr())
	}
	gerr := g.Run()
	switch {
	case consumerErr != nil:
		return fmt.Errorf("worker: %w", consumerErr)
	case ctx.Err() != nil:
		log.Info("capper stopped")
		return nil
	}
	return gerr
}
