// Package app assembles the capper worker from its configuration and runs
// its long-lived parts (the consumer loop, the snapshot, plans and policy
// watchers, the control follower, the pacer, the users' limits applier, the
// Redis clock check, the HTTP endpoint) as actors of one run group with an
// ordered shutdown: stop fetching, finish and commit the batch in flight,
// close the Kafka reader and writers, then close Redis. It also holds what
// the CLI's operator commands do against a running deployment (campaign
// control, budgets, users' limits, topics, group leave, inspect, replay,
// migrate), so that cmd/capper stays a thin parser.
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
	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/dispatch"
	capkafka "github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/plans"
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

// Run starts the worker and blocks until ctx ends (then shuts down in order
// and returns nil) or a component fails (then returns its error).
//
// Ownership: Redis is closed by Run itself, last, after every actor has
// stopped; the consumer actor owns the Kafka reader and writers and closes
// them when it stops; what is built before the group starts is closed on
// the way out only when a later step fails.
func Run(ctx context.Context, o Options) (err error) {
	o.defaults()
	cfg, log := o.Config, o.Logger
	registerProcess(o.Registerer, o.Build)
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
	p, err := buildParts(ctx, &o, rdb)
	if err != nil {
		return err
	}
	defer p.closeKafka()
	g := p.actors(ctx, cfg, log)
	log.Info("capper started", "version", o.Build.Version, "revision", o.Build.Revision, "http", p.ops.Addr(),
		"input", cfg.Kafka.Topics.Input, "group", cfg.Kafka.GroupID,
		"snapshot", p.current.Load().Version(), "policy", p.engine.PolicyVersion(), "policy_source", p.policies.Source(),
		"enforce", cfg.Worker.Enforce)
	if o.Started != nil {
		o.Started(p.ops.Addr())
	}
	gerr := g.group.Run()
	switch {
	case p.consumerErr != nil:
		return fmt.Errorf("worker: %w", p.consumerErr)
	case ctx.Err() != nil:
		log.Info("capper stopped")
		return nil
	}
	return gerr
}

// defaults fills in the options left nil: a discarding logger, a new
// registry (and it as the registerer), time.Now.
func (o *Options) defaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Registerer == nil {
		o.Registerer = o.Registry
	}
}

// registerProcess registers the Go and process collectors and
// capper_build_info.
func registerProcess(reg prometheus.Registerer, b cli.Build) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	promauto.With(reg).NewGauge(prometheus.GaugeOpts{
		Name:        "capper_build_info",
		Help:        "The running capper: 1, with its version, VCS revision and Go version as labels.",
		ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "go_version": b.GoVersion},
	}).Set(1)
}

// parts are the worker's components, as buildParts builds them.
type parts struct {
	policies  *policy.Watcher
	engine    *capping.Engine
	current   segments.Current
	segments  *segments.Watcher
	plans     *plans.Watcher // nil: no plan store
	cons      *consumer
	users     *userLimits // nil: no user-limits topic
	usersGate *usersGate  // nil: no user-limits topic
	report    *policyReporter
	ops       *opsServer
	// admin is the worker's one Kafka admin client (topics, lag, the
	// users' limits' progress), closed once every actor has stopped.
	admin       *capkafka.Admin
	consumerErr error // the consumer actor's error, once it stopped
}

// closeKafka closes the admin client.
func (p *parts) closeKafka() {
	if p.admin != nil {
		_ = p.admin.Close()
	}
}

// buildParts builds the worker's components. The policy first: the engine
// and the decoder are built with its first version, and later ones are
// swapped into them between two batches. Then the snapshot watcher, the
// plans, the consumer and the HTTP endpoint.
func buildParts(ctx context.Context, o *Options, rdb redis.UniversalClient) (_ *parts, err error) {
	cfg, log, reg := o.Config, o.Logger, o.Registerer
	p := &parts{}
	defer func() {
		if err != nil {
			p.closeKafka()
		}
	}()
	swap := newPolicySwap(cfg)
	if p.policies, err = newPolicyWatcher(ctx, cfg, swap.apply, reg, log, o.Now); err != nil {
		return nil, err
	}
	if err := p.policies.Poll(ctx); err != nil {
		return nil, fmt.Errorf("no usable cap policy from %s: %w", p.policies.Source(), err)
	}
	if p.engine, err = NewEngine(ctx, cfg, p.policies.Current(), rdb, reg, log, o.Now); err != nil {
		return nil, err
	}
	dec, err := newDecoder(cfg, &p.policies.Current().Rules)
	if err != nil {
		return nil, err
	}
	swap.install(p.engine, dec, &p.current, log)
	p.report = newPolicyReporter(rdb, cfg.Capping.KeyPrefix, cfg.Policy.PollInterval.D(), p.policies, log)
	if p.segments, err = startSegments(ctx, cfg, &p.current, p.policies, reg, log, o.Now); err != nil {
		return nil, err
	}
	reg.MustRegister(unpolicedCollector{snap: &p.current, policy: p.policies})
	if p.plans, err = startPlans(ctx, cfg, reg, log, o.Now); err != nil {
		return nil, err
	}
	var activePlans dispatch.Plans
	if p.plans != nil {
		activePlans = p.plans.Current()
	}
	kopts, err := kafkaOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	if p.admin, err = capkafka.NewAdmin(kopts); err != nil {
		return nil, err
	}
	// Before the consumer: its groups' first generation is held too.
	p.usersGate = newUsersGate(cfg, p.admin, log)
	if p.cons, err = newConsumer(ctx, cfg, p.admin, p.engine, dec, &p.current, activePlans, p.policies.Current(), rdb, reg, log, o.Now, o.Sleep,
		p.usersGate.holdFunc()); err != nil {
		return nil, err
	}
	swap.installPacing(p.cons)
	if p.users, err = newUserLimits(cfg, p.admin, p.engine, p.policies, p.cons.groups, reg, log); err != nil {
		p.cons.close(log)
		return nil, err
	}
	if p.ops, err = p.newOps(cfg, o.Registry); err != nil {
		p.cons.close(log)
		return nil, err
	}
	return p, nil
}

// newOps is the HTTP endpoint: /metrics of reg, the versions in force,
// and the readiness checks (internal/docscheck's TestReadyzConditions
// knows them by these names: engine.Ready, cons.worker.Ready,
// cons.controlReady, usersGate.ready).
func (p *parts) newOps(cfg *config.Config, reg *prometheus.Registry) (*opsServer, error) {
	engine, cons, current, planWatcher, usersGate := p.engine, p.cons, &p.current, p.plans, p.usersGate
	return newOpsServer(cfg.HTTP.Address, reg, cfg.HTTP.Pprof,
		func() string {
			s := "policy " + engine.PolicyVersion() + "\nsnapshot " + current.Load().Version()
			if planWatcher != nil {
				s += "\nplans " + planWatcher.Current().Load().Version()
			}
			return s
		},
		cons.worker.Live,
		engine.Ready,
		cons.worker.Ready,
		cons.controlReady,
		usersGate.ready,
		func() error {
			if cfg.Segments.Required && current.Load() == nil {
				return errors.New("no segment snapshot loaded")
			}
			return nil
		})
}

// actors are the run group of the parts' long-lived loops.
func (p *parts) actors(ctx context.Context, cfg *config.Config, log *slog.Logger) *actors {
	g := &actors{log: log}
	// The consumer: on interrupt it stops fetching, finishes and commits
	// the batch in flight, then leaves the group and closes the writers.
	g.addLoop(ctx, "worker", func(ctx context.Context) error {
		if p.consumerErr = p.cons.run(ctx, log); p.consumerErr != nil {
			return p.consumerErr
		}
		return errors.New("stopped")
	})
	g.addLoop(ctx, "segments", p.segments.Run)
	g.addLoop(ctx, "policy", p.policies.Run)
	g.addLoop(ctx, "policy-report", p.report.run)
	if p.plans != nil {
		g.addLoop(ctx, "plans", p.plans.Run)
	}
	if p.cons.control != nil {
		g.addLoop(ctx, "control", p.cons.followControl)
	}
	g.addLoop(ctx, "lag", func(ctx context.Context) error {
		errs := make(chan error, len(p.cons.lag))
		for _, l := range p.cons.lag {
			go func() { errs <- l.Run(ctx) }()
		}
		var err error
		for range p.cons.lag {
			err = errors.Join(err, <-errs)
		}
		return err
	})
	if pc := p.cons.pacer; pc != nil {
		g.addLoop(ctx, "pacing", func(ctx context.Context) error {
			pc.followWaiting(ctx, cfg.Kafka.DelayGroup(), cfg.Kafka.LagInterval.D(), log)
			return nil
		})
	}
	p.users.add(ctx, g)
	g.addLoop(ctx, "clock-check", p.engine.RunClockCheck)
	g.addLoop(ctx, "redis-warning", func(ctx context.Context) error {
		return newRedisWarner(cfg.Redis.Addrs, log).run(ctx, p.engine.Ready)
	})
	g.add("http", p.ops.serve, func(error) { p.ops.stop() })
	{
		// The signal actor: ctx ends on SIGTERM/SIGINT (see cmd/capper).
		sctx, cancel := context.WithCancel(ctx)
		g.add("signal", func() error {
			<-sctx.Done()
			return nil
		}, func(error) { cancel() })
	}
	return g
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
