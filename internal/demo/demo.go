// Package demo owns `capper-demo`: the whole pipeline on one machine with
// nothing installed. It builds a synthetic snapshot with the segment-builder's
// code, starts an in-process Kafka broker (kfake) and Redis (miniredis, which
// runs the same Lua script; or a real Redis), produces a campaign blast, runs
// the real worker (the code of `capper run`) until the input is drained, then
// reports what happened and audits what it reads back from Kafka. In the same
// run, on users of their own, its sections show what capper does beyond first
// come, first served: a campaign plan, deferral and quiet hours, refunds, a
// campaign stopped mid-blast, send pacing, and users' own limits (a snooze
// written mid-blast, a frequency tier) (sections.go); the demo's clock skips
// the hours they wait (clock.go), and the audit covers them all (check.go).
package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/pacing"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/plans"
	"github.com/capper-dev/capper/internal/replay"
	kafkatopics "github.com/capper-dev/capper/internal/topics"
)

// Options sizes and points the demo.
type Options struct {
	Users     int    // DefaultUsers in the CLI
	Intents   int    // DefaultIntents in the CLI
	RedisAddr string // "" = embedded miniredis
	Seed      int64
	Out       io.Writer // the report
	Progress  io.Writer // progress: a bar on a terminal, else a line every few seconds
	// Now is the clock the demo starts from: the blast's created_at and
	// the worker's decision clock while the blast is decided. nil is
	// DefaultStart plus the wall time since Run began. Once the blast is
	// decided, the demo moves the worker's clock on past the hours its
	// sections wait (deferrals, quiet hours, a plan's window): the
	// worker's clock is then Now plus those hours.
	Now func() time.Time
	// SaveIntents, when set, is a file the blast is written to, one intent
	// value per line (gzipped when it ends in .gz): capper replay's input.
	SaveIntents string
	// SaveSnapshot, when set, is the directory the snapshot is published
	// to (and kept), instead of a temporary one: capper replay's --snapshot.
	SaveSnapshot string
	// Summary, when set, receives the report's totals (the blast's).
	Summary *Summary
}

// The CLI's defaults: a blast big enough to drive many users into their
// caps, small enough to run in seconds on the embedded Redis.
const (
	DefaultUsers   = 20000
	DefaultIntents = 40000
)

const (
	topicIn      = "send-intents"
	topicDel     = "deliveries"
	topicSup     = "suppressed"
	topicDLQ     = "send-intents-dlq"
	topicStatus  = "delivery-status"
	topicControl = "capper-control"
	topicUsers   = "capper-user-limits"
)

// demoTiers are the delay tiers, as configs/capper.yaml suggests them.
var demoTiers = []config.DelayTier{
	{Delay: config.Duration(time.Minute), Topic: "send-intents-delay-1m"},
	{Delay: config.Duration(10 * time.Minute), Topic: "send-intents-delay-10m"},
	{Delay: config.Duration(time.Hour), Topic: "send-intents-delay-1h"},
	{Delay: config.Duration(6 * time.Hour), Topic: "send-intents-delay-6h"},
}

// Run runs the demo and returns an error when anything failed, including an
// audit that found a violation (ErrAudit).
func Run(ctx context.Context, o Options) error {
	if o.Users <= 0 || o.Intents <= 0 {
		return fmt.Errorf("demo: users (%d) and intents (%d) must be above 0", o.Users, o.Intents)
	}
	o.defaults()
	clk := newClock(o.clockBase())
	start := time.Now()
	dirs, err := makeDirs(o.SaveSnapshot)
	if err != nil {
		return err
	}
	defer dirs.remove()
	step := func(format string, args ...any) { fmt.Fprintf(o.Progress, "- "+format+"\n", args...) }
	store, err := objstore.Open(ctx, dirs.snapshot, objstore.Options{})
	if err != nil {
		return err
	}
	at := clk.Now()
	sec := newSections(o.Users, at)
	m, err := buildSnapshot(ctx, store, o.Users, uint64(o.Seed), clk.Now, sec.segments())
	if err != nil {
		return err
	}
	step("snapshot %s: %s (the sections' segments hold users %d-%d)", m.Version, describeSegments(m), sec.shoppers.from, sec.flash.to-1)
	srv, err := startServers(o.RedisAddr, step)
	if err != nil {
		return err
	}
	defer srv.close()
	cfg, err := demoConfig(srv.brokers, srv.redisAddr, dirs.snapshot, dirs.plans)
	if err != nil {
		return err
	}
	rules, plan, err := publishPlan(ctx, cfg, sec, dirs.plans, clk.Now(), step)
	if err != nil {
		return err
	}
	msgs := Blast(BlastOptions{Users: o.Users, Intents: o.Intents, Seed: uint64(o.Seed), Now: at})
	if o.SaveIntents != "" {
		if err := SaveIntents(o.SaveIntents, msgs); err != nil {
			return err
		}
		step("blast saved to %s, snapshot in %s (capper replay --from %s --snapshot %s)", o.SaveIntents, dirs.snapshot, o.SaveIntents, dirs.snapshot)
	}
	early, late := sec.morning(at)

	w, err := startWorker(ctx, cfg, clk)
	if err != nil {
		return err
	}
	defer w.stop()
	p := &play{runner: runner{reg: w.reg, done: w.done, progress: o.Progress}, clk: clk, sec: sec, cfg: cfg, brokers: srv.brokers, log: w.log, step: step}
	tp, cart, err := p.run(ctx, msgs, early, late)
	if err != nil {
		return err
	}
	if err := w.wait(); err != nil {
		return err
	}

	outs, mfs, err := readBack(ctx, srv.brokers, w.reg, sec)
	if err != nil {
		return err
	}
	if err := replayPlan(ctx, cfg, sec, store, dirs, slices.Concat(early, cart)); err != nil {
		return err
	}
	sum := writeReport(o.Out, mfs, outs, len(msgs), tp)
	if o.Summary != nil {
		*o.Summary = sum
	}
	sec.writeSections(&tableWriter{o.Out}, outs)
	fmt.Fprintf(o.Out, "\ntotal time: %s\n\n", time.Since(start).Round(time.Millisecond))
	results, err := auditAll(outs, sec.facts(rules, plan))
	if err != nil {
		return err
	}
	return writeAudit(o.Out, results, len(outs.deliveries), len(outs.input))
}

// facts are what the audit holds the outputs to: the policy, and what the
// sections did (refunds, the plan, the stops, the budget, users' limits).
func (sec *sections) facts(rules capping.Rules, plan *plans.Manifest) facts {
	return facts{rules: rules, refunded: sec.refunded, plans: map[string]time.Time{plan.Campaign: plan.Ends},
		stops:   []stopFact{{campFlash, sec.stopApplied}, {campDigest, sec.pace.applied}},
		budgets: []budgetFact{{name: budgetName, rate: paceRate, burst: paceBurst, where: pacing.Where{Channels: []string{paceChannel}, Routes: []string{paceRoute}}}},
		users:   sec.userFacts(), throttle: sec.throttle, inputTopic: topicIn}
}

// defaults sets the writers left nil to io.Discard.
func (o *Options) defaults() {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// clockBase is Now, or DefaultStart plus the wall time since the call.
func (o *Options) clockBase() func() time.Time {
	if o.Now != nil {
		return o.Now
	}
	t0 := time.Now()
	return func() time.Time { return DefaultStart.Add(time.Since(t0)) }
}

// demoDirs are the demo's directories: the snapshot's (kept when it is
// --save-snapshot's) and a work directory for the plan store (plans) and
// the files of the plan's replay.
type demoDirs struct {
	snapshot, work, plans string
	tmpSnapshot           bool // snapshot is a temporary directory: remove removes it
}

func makeDirs(saveSnapshot string) (*demoDirs, error) {
	d := &demoDirs{snapshot: saveSnapshot}
	if d.snapshot == "" {
		tmp, err := os.MkdirTemp("", "capper-demo-")
		if err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
		d.snapshot, d.tmpSnapshot = tmp, true
	} else if err := os.MkdirAll(d.snapshot, 0o755); err != nil {
		return nil, fmt.Errorf("demo: --save-snapshot: %w", err)
	}
	work, err := os.MkdirTemp("", "capper-demo-plans-")
	if err != nil {
		d.remove()
		return nil, fmt.Errorf("demo: %w", err)
	}
	d.work, d.plans = work, filepath.Join(work, "plans")
	return d, nil
}

// remove removes the temporary directories.
func (d *demoDirs) remove() {
	if d.work != "" {
		os.RemoveAll(d.work)
	}
	if d.tmpSnapshot {
		os.RemoveAll(d.snapshot)
	}
}

// servers are the in-process Kafka broker (kfake, with the demo's topics)
// and Redis (the embedded miniredis, unless the demo was given one).
type servers struct {
	broker    *kfake.Cluster
	mr        *miniredis.Miniredis // nil: a Redis of the caller's
	brokers   []string
	redisAddr string
}

func startServers(redisAddr string, step func(format string, args ...any)) (*servers, error) {
	topics := []string{topicIn, topicDel, topicSup, topicDLQ, topicStatus}
	for _, t := range demoTiers {
		topics = append(topics, t.Topic)
	}
	// The pacing section's lanes, with the input's partitions (capper
	// topics create makes them so).
	topics = append(topics, laneTopics()...)
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topics...))
	if err != nil {
		return nil, fmt.Errorf("demo: start kafka: %w", err)
	}
	s := &servers{broker: broker, brokers: broker.ListenAddrs(), redisAddr: redisAddr}
	// The control and user-limits topics as capper topics create makes them
	// (a worker refuses them not compacted).
	if err := broker.CreateTopic(topicControl, 1, kafkatopics.Topic{Kind: kafkatopics.Control}.Configs()); err != nil {
		s.close()
		return nil, fmt.Errorf("demo: create the control topic %s: %w", topicControl, err)
	}
	if err := broker.CreateTopic(topicUsers, 4, kafkatopics.Topic{Kind: kafkatopics.UserLimits}.Configs()); err != nil {
		s.close()
		return nil, fmt.Errorf("demo: create the user-limits topic %s: %w", topicUsers, err)
	}
	if redisAddr != "" {
		step("kafka (kfake) at %s, redis at %s", s.brokers[0], redisAddr)
		return s, nil
	}
	if s.mr, err = miniredis.Run(); err != nil {
		s.close()
		return nil, fmt.Errorf("demo: start embedded redis: %w", err)
	}
	s.redisAddr = s.mr.Addr()
	step("kafka (kfake) at %s, redis (embedded miniredis) at %s", s.brokers[0], s.redisAddr)
	return s, nil
}

func (s *servers) close() {
	if s.mr != nil {
		s.mr.Close()
	}
	s.broker.Close()
}

// publishPlan publishes the plan section's campaign plan to the plan store
// in dir, and returns the policy's rules and the plan.
func publishPlan(ctx context.Context, cfg *config.Config, sec *sections, dir string, now time.Time, step func(format string, args ...any)) (capping.Rules, *plans.Manifest, error) {
	rules, err := demoRules(cfg)
	if err != nil {
		return capping.Rules{}, nil, fmt.Errorf("demo policy: %w", err)
	}
	planStore, err := objstore.Open(ctx, dir, objstore.Options{})
	if err != nil {
		return capping.Rules{}, nil, err
	}
	plan, err := sec.publishPlan(ctx, planStore, rules, now)
	if err != nil {
		return capping.Rules{}, nil, err
	}
	step("%s published: priority high, %s to %s, a push to %d users", plan, stamp(plan.Starts), stamp(plan.Ends), plan.Audience.Users)
	return rules, plan, nil
}

// worker is the real worker (app.Run), quiet, on the demo's clock.
type worker struct {
	reg  *prometheus.Registry
	log  *slog.Logger
	done chan error
	stop context.CancelFunc
}

// startWorker starts the worker and waits until it is up.
func startWorker(ctx context.Context, cfg *config.Config, clk *clock) (*worker, error) {
	runCtx, stop := context.WithCancel(ctx)
	w := &worker{reg: prometheus.NewRegistry(), log: slog.New(slog.NewTextHandler(io.Discard, nil)), done: make(chan error, 1), stop: stop}
	started := make(chan struct{})
	go func() {
		w.done <- app.Run(runCtx, app.Options{Config: cfg, Logger: w.log, Registry: w.reg, Now: clk.Now, Sleep: clk.Sleep,
			Build: cli.BuildOf("demo", ""), Started: func(string) { close(started) }})
	}()
	select {
	case <-started:
		return w, nil
	case err := <-w.done:
		stop()
		return nil, fmt.Errorf("demo: worker did not start: %w", err)
	}
}

// wait stops the worker and returns its error.
func (w *worker) wait() error {
	w.stop()
	if err := <-w.done; err != nil {
		return fmt.Errorf("demo: worker: %w", err)
	}
	return nil
}

// readBack reads what the worker wrote back from Kafka, and gathers its
// metrics (the sections count the refunds it applied).
func readBack(ctx context.Context, brokers []string, reg *prometheus.Registry, sec *sections) (outputs, []*dto.MetricFamily, error) {
	outs, err := readOutputs(ctx, brokers)
	if err != nil {
		return outputs{}, nil, err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return outputs{}, nil, fmt.Errorf("demo: metrics: %w", err)
	}
	sec.refundsApplied = counter(mfs, "capper_refunds_total", "result", "applied")
	return outs, mfs, nil
}

// replayPlan replays the intents of the plan's campaigns among msgs
// through the policy and the plan store (sections.replayPlan).
func replayPlan(ctx context.Context, cfg *config.Config, sec *sections, store objstore.Store, d *demoDirs, msgs []kafka.Message) error {
	var planMsgs []kafka.Message
	for _, m := range msgs {
		if c := jsonString(m.Value, "campaign_id"); c == campNewsletter || c == campCart {
			planMsgs = append(planMsgs, m)
		}
	}
	policyFile, _ := cfg.PolicyFile()
	return sec.replayPlan(ctx, func(ctx context.Context, from string) (*replay.Report, error) {
		return app.Replay(ctx, app.ReplayOptions{Policy: policyFile, Store: store, Plans: d.plans, From: from}, nil)
	}, d.work, planMsgs)
}
