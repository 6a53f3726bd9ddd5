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

	"github.com/capper-dev/capper/internal/cli"
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
	// The policy first: the engine and the decoder are built with its first
	// version, and later ones are swapped into them between two batches.
	swap := newPolicySwap(len(cfg.Kafka.DelayTiers) > 0)
	policies, err := newPolicyWatcher(ctx, cfg, swap.apply, regr, log, now)
	if err != nil {
		return err
	}
	if err := policies.Poll(ctx); err != nil {
		return fmt.Errorf("no usable cap policy from %s: %w", policies.Source(), err)
	}
	engine, err := NewEngine(ctx, cfg, policies.Current(), rdb, regr, log)
	if err != nil {
		return err
	}
	dec, err := newDecoder(cfg, &policies.Current().Rules)
	if err != nil {
		return err
	}
	var current segments.Current
	swap.install(engine, dec, &current, log)
	watcher, err := startSegments(ctx, cfg, &current, policies, regr, log, now)
	if err != nil {
		return err
	}
	regr.MustRegister(unpolicedCollector{snap: &current, policy: policies})
	planWatcher, err := startPlans(ctx, cfg, regr, log, now)
	if err != nil {
		return err
	}
	var activePlans dispatch.Plans
	if planWatcher != nil {
		activePlans = planWatcher.Current()
	}
	cons, err := newConsumer(ctx, cfg, engine, dec, &current, activePlans, regr, log, now, o.Sleep)
	if err != nil {
		return err
	}
	ops, err := newOpsServer(cfg.HTTP.Address, reg, cfg.HTTP.Pprof,
		func() string {
			s := "policy " + engine.PolicyVersion() + "\nsnapshot " + current.Load().Version()
			if planWatcher != nil {
				s += "\nplans " + planWatcher.Current().Load().Version()
			}
			return s
		},
		engine.Ready,
		cons.worker.Ready,
		cons.controlReady,
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

	g := actors{log: log}
	var consumerErr error
	// The consumer: on interrupt it stops fetching, finishes and commits
	// the batch in flight, then leaves the group and closes the writers.
	g.addLoop(ctx, "worker", func(ctx context.Context) error {
		if consumerErr = cons.run(ctx, log); consumerErr != nil {
			return consumerErr
		}
		return errors.New("stopped")
	})
	g.addLoop(ctx, "segments", watcher.Run)
	g.addLoop(ctx, "policy", policies.Run)
	if planWatcher != nil {
		g.addLoop(ctx, "plans", planWatcher.Run)
	}
	if cons.control != nil {
		g.addLoop(ctx, "control", cons.followControl)
	}
	g.addLoop(ctx, "lag", func(ctx context.Context) error {
		errs := make(chan error, len(cons.lag))
		for _, l := range cons.lag {
			go func() { errs <- l.Run(ctx) }()
		}
		var err error
		for range cons.lag {
			err = errors.Join(err, <-errs)
		}
		return err
	})
	g.addLoop(ctx, "clock-check", engine.RunClockCheck)
	g.addLoop(ctx, "redis-warning", func(ctx context.Context) error {
		return newRedisWarner(cfg.Redis.Addrs, log).run(ctx, engine.Ready)
	})
	g.add("http", ops.serve, func(error) { ops.stop() })
	{
		// The signal actor: ctx ends on SIGTERM/SIGINT (see cmd/capper).
		sctx, cancel := context.WithCancel(ctx)
		g.add("signal", func() error {
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
	gerr := g.group.Run()
	switch {
	case consumerErr != nil:
		return fmt.Errorf("worker: %w", consumerErr)
	case ctx.Err() != nil:
		log.Info("capper stopped")
		return nil
	}
	return gerr
}

// actors is the run group, its actors named: an actor's error says which
// one failed, and the debug log says which stopped, in what order.
type actors struct {
	group run.Group
	log   *slog.Logger
}

// add adds an actor: execute runs until interrupt is called (with the error
// of the first actor to return).
func (a *actors) add(name string, execute func() error, interrupt func(error)) {
	a.group.Add(func() error {
		err := execute()
		a.log.Debug("actor stopped", "actor", name, "error", err)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}, interrupt)
}

// addLoop adds an actor that runs until its context ends. The context is
// its own, not ctx (only its values): the interrupt ends it, in the group's
// shutdown order.
func (a *actors) addLoop(ctx context.Context, name string, loop func(context.Context) error) {
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.add(name, func() error { return loop(lctx) }, func(error) { cancel() })
}
