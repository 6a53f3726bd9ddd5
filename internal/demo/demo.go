// Package demo owns `capper-demo`: the whole pipeline on one machine with
// nothing installed. It builds a synthetic snapshot with the segment-builder's
// code, starts an in-process Kafka broker (kfake) and Redis (miniredis, which
// runs the same Lua script; or a real Redis), produces a campaign blast, runs
// the real worker (the code of `capper run`) until the input is drained, then
// reports what happened and audits what it reads back from Kafka. In the same
// run, on users of their own, its sections show what capper does beyond first
// come, first served: a campaign plan, deferral and quiet hours, refunds, and a
// campaign stopped mid-blast (sections.go); the demo's clock skips the hours
// they wait (clock.go), and the audit covers them all (check.go).
package demo

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/control"
	"github.com/capper-dev/capper/internal/objstore"
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
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	base := o.Now
	if base == nil {
		t0 := time.Now()
		base = func() time.Time { return DefaultStart.Add(time.Since(t0)) }
	}
	clk := newClock(base)
	start := time.Now()
	dir := o.SaveSnapshot
	if dir == "" {
		tmp, err := os.MkdirTemp("", "capper-demo-")
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("demo: --save-snapshot: %w", err)
	}
	// The plan store and the files of the plan's replay.
	work, err := os.MkdirTemp("", "capper-demo-plans-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(work)
	plansDir := filepath.Join(work, "plans")

	step := func(format string, args ...any) { fmt.Fprintf(o.Progress, "- "+format+"\n", args...) }
	store, err := objstore.Open(ctx, dir, objstore.Options{})
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

	topics := []string{topicIn, topicDel, topicSup, topicDLQ, topicStatus}
	for _, t := range demoTiers {
		topics = append(topics, t.Topic)
	}
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topics...))
	if err != nil {
		return fmt.Errorf("demo: start kafka: %w", err)
	}
	defer broker.Close()
	// The control topic as capper topics create makes it (a worker refuses
	// one that is not compacted).
	if err := broker.CreateTopic(topicControl, 1, kafkatopics.Topic{Kind: kafkatopics.Control}.Configs()); err != nil {
		return fmt.Errorf("demo: create the control topic %s: %w", topicControl, err)
	}
	brokers := broker.ListenAddrs()
	redisAddr := o.RedisAddr
	if redisAddr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("demo: start embedded redis: %w", err)
		}
		defer mr.Close()
		redisAddr = mr.Addr()
		step("kafka (kfake) at %s, redis (embedded miniredis) at %s", brokers[0], redisAddr)
	} else {
		step("kafka (kfake) at %s, redis at %s", brokers[0], redisAddr)
	}

	cfg, err := demoConfig(brokers, redisAddr, dir, plansDir)
	if err != nil {
		return err
	}
	rules, err := demoRules(cfg)
	if err != nil {
		return fmt.Errorf("demo policy: %w", err)
	}
	planStore, err := objstore.Open(ctx, plansDir, objstore.Options{})
	if err != nil {
		return err
	}
	plan, err := sec.publishPlan(ctx, planStore, rules, clk.Now())
	if err != nil {
		return err
	}
	step("%s published: priority high, %s to %s, a push to %d users", plan, stamp(plan.Starts), stamp(plan.Ends), plan.Audience.Users)

	msgs := Blast(BlastOptions{Users: o.Users, Intents: o.Intents, Seed: uint64(o.Seed), Now: at})
	if o.SaveIntents != "" {
		if err := SaveIntents(o.SaveIntents, msgs); err != nil {
			return err
		}
		step("blast saved to %s, snapshot in %s (capper replay --from %s --snapshot %s)", o.SaveIntents, dir, o.SaveIntents, dir)
	}
	early, flashLate := sec.morning(at)

	reg := prometheus.NewRegistry()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	started := make(chan struct{})
	done := make(chan error, 1)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() {
		done <- app.Run(runCtx, app.Options{Config: cfg, Logger: quiet, Registry: reg, Now: clk.Now, Sleep: clk.Sleep,
			Build: cli.BuildOf("demo", ""), Started: func(string) { close(started) }})
	}()
	select {
	case <-started:
	case err := <-done:
		return fmt.Errorf("demo: worker did not start: %w", err)
	}
	p := &play{runner: runner{reg: reg, done: done, progress: o.Progress}, clk: clk, sec: sec, cfg: cfg, brokers: brokers, log: quiet, step: step}
	tp, err := p.blast(ctx, msgs, early, flashLate)
	if err != nil {
		return err
	}
	if err := p.refunds(ctx); err != nil {
		return err
	}
	cart, err := p.later(ctx)
	if err != nil {
		return err
	}
	stop()
	if err := <-done; err != nil {
		return fmt.Errorf("demo: worker: %w", err)
	}

	outs, err := readOutputs(ctx, brokers)
	if err != nil {
		return err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return fmt.Errorf("demo: metrics: %w", err)
	}
	sec.refundsApplied = counter(mfs, "capper_refunds_total", "result", "applied")
	var planMsgs []kafka.Message
	for _, m := range slices.Concat(early, cart) {
		if c := jsonString(m.Value, "campaign_id"); c == campNewsletter || c == campCart {
			planMsgs = append(planMsgs, m)
		}
	}
	policyFile, _ := cfg.PolicyFile()
	err = sec.replayPlan(ctx, func(ctx context.Context, from string) (*replay.Report, error) {
		return app.Replay(ctx, app.ReplayOptions{Policy: policyFile, Store: store, Plans: plansDir, From: from}, nil)
	}, work, planMsgs)
	if err != nil {
		return err
	}

	sum := writeReport(o.Out, mfs, outs, len(msgs), tp)
	if o.Summary != nil {
		*o.Summary = sum
	}
	sec.writeSections(&tableWriter{o.Out}, outs)
	fmt.Fprintf(o.Out, "\ntotal time: %s\n\n", time.Since(start).Round(time.Millisecond))
	results, err := auditAll(outs, facts{rules: rules, refunded: sec.refunded, plans: map[string]time.Time{plan.Campaign: plan.Ends},
		stopped: campFlash, stopApplied: sec.stopApplied, inputTopic: topicIn})
	if err != nil {
		return err
	}
	return writeAudit(o.Out, results, len(outs.deliveries), len(outs.input))
}

// play is the demo's timeline: what it produces, when, and what it does
// meanwhile (the stop, the failed deliveries, the clock's steps).
type play struct {
	runner
	clk     *clock
	sec     *sections
	cfg     *config.Config
	brokers []string
	log     *slog.Logger
	step    func(format string, args ...any)
}

// blast produces the blast in two parts: the first third with the
// sections' first intents (half of flash-sale's among them), then the
// rest with flash-sale's other half in its second half, behind thousands
// of the blast's. It arrives while the worker runs, as a campaign's would
// (a backlog that was there when a worker took its partitions over is
// decided by Redis alone: see docs/operations/refusal-cache.md). Once the first
// part is decided and the rest is in the input topic, flash-sale is
// stopped, as capper campaign stop does it.
func (p *play) blast(ctx context.Context, msgs, early, flashLate []kafka.Message) (throughput, error) {
	third, mid := len(msgs)/3, len(msgs)/3+(len(msgs)-len(msgs)/3)/2
	partA := interleave(msgs[:third], early)
	partB := append(slices.Clone(msgs[third:mid]), interleave(msgs[mid:], flashLate)...)
	t0 := time.Now()
	if err := p.produce(ctx, partA); err != nil {
		return throughput{}, err
	}
	if _, err := p.settle(ctx, "deciding", decidedAll, 0); err != nil {
		return throughput{}, err
	}
	if err := p.produce(ctx, partB); err != nil {
		return throughput{}, err
	}
	p.step("produced %d send-intents (%d campaigns; tags, priorities and users' time zones; repeats, malformed, transactional and override-asking ones) and %d of the sections",
		len(msgs), 6, len(early)+len(flashLate))
	written, err := app.SetCampaign(ctx, p.cfg, app.CampaignChange{Campaign: campFlash, State: control.Stopped,
		Reason: "wrong price in the push", By: "capper-demo", Now: p.clk.Now()}, p.log)
	if err != nil {
		return throughput{}, fmt.Errorf("demo: stop %s: %w", campFlash, err)
	}
	p.sec.stopRecord = written.Position.String()
	if p.sec.stopApplied, err = p.applied(ctx, written.Position); err != nil {
		return throughput{}, err
	}
	if c := p.counts(); c.produced > c.final+c.waiting() {
		p.sec.stopBacklog = c.produced - c.final - c.waiting()
	}
	p.step("%s stopped (record %s), applied by the worker at %s", campFlash, p.sec.stopRecord, stamp(p.sec.stopApplied))
	c, err := p.settle(ctx, "deciding", decidedAll, 0)
	if err != nil {
		return throughput{}, err
	}
	return throughput{intents: p.produced, elapsed: time.Since(t0), batches: uint64(c.batches)}, nil
}

// refunds reports a tenth of the welcome emails failed (read back from
// the deliveries) on the delivery-status topic, waits until the worker
// read the statuses, then sends the tips email to the same users.
func (p *play) refunds(ctx context.Context) error {
	dels, err := audit.ReadTopic(ctx, p.brokers, topicDel)
	if err != nil {
		return err
	}
	statuses := p.sec.failures(dels, p.clk.Now())
	if err := p.produceTo(ctx, topicStatus, statuses); err != nil {
		return err
	}
	if _, err := p.settle(ctx, "", func(c counts) bool { return c.statuses >= len(statuses) }, 0); err != nil {
		return err
	}
	tips := p.sec.intents(campTips, "email", "", p.sec.refund, 1, p.clk.Now(), nil)
	if err := p.produce(ctx, tips); err != nil {
		return err
	}
	if _, err := p.settle(ctx, "", decidedAll, 0); err != nil {
		return err
	}
	p.step("%d welcome emails reported failed, then %d tips emails", len(statuses), len(tips))
	return nil
}

// later moves the clock on past the hours the held intents wait, in
// steps: to when they are due, then to the plan's window, where
// cart-rescue sends (its intents are returned). Anything still waiting
// then (a start where quiet hours last past the plan) is due within a
// day: the clock moves on an hour at a time until nothing waits.
func (p *play) later(ctx context.Context) ([]kafka.Message, error) {
	p.clk.advance(p.sec.due)
	p.step("the clock moves on to %s: the deferred and quiet-hours intents are due", stamp(p.sec.due))
	if _, err := p.settle(ctx, "", nothingWaits, 10*time.Second); err != nil && !errors.Is(err, errSlow) {
		return nil, err
	}
	p.clk.advance(p.sec.planStarts)
	cart := p.sec.intents(campCart, "push", "high", p.sec.cart, 1, p.clk.Now(), nil)
	if err := p.produce(ctx, cart); err != nil {
		return nil, err
	}
	p.step("the clock moves on to %s: cart-rescue's window opens, %d pushes", stamp(p.sec.planStarts), len(cart))
	c, err := p.settle(ctx, "", nothingWaits, 10*time.Second)
	for hours := 0; errors.Is(err, errSlow) && hours < 48; hours++ {
		p.clk.advance(p.clk.Now().Add(time.Hour))
		p.step("the clock moves on to %s: %d intents still wait", stamp(p.clk.Now()), c.waiting())
		c, err = p.settle(ctx, "", nothingWaits, 2*time.Second)
	}
	if errors.Is(err, errSlow) {
		return nil, fmt.Errorf("demo: %d intents still wait in the delay tiers at %s, and %d inputs of %d have an outcome",
			c.waiting(), stamp(p.clk.Now()), c.final, c.produced)
	}
	return cart, err
}

// produce writes intents to the input topic and counts them.
func (p *play) produce(ctx context.Context, msgs []kafka.Message) error {
	if err := p.produceTo(ctx, topicIn, msgs); err != nil {
		return err
	}
	p.produced += len(msgs)
	return nil
}

func (p *play) produceTo(ctx context.Context, topic string, msgs []kafka.Message) error {
	return produce(ctx, p.brokers, topic, msgs)
}

// SaveIntents writes the values of msgs to path, one per line, gzipped
// when path ends in .gz. The blast's values are compact JSON (or malformed
// on purpose, without a newline), so a line is a record.
func SaveIntents(path string, msgs []kafka.Message) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("demo: --save-intents: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("demo: --save-intents: %w", cerr)
		}
	}()
	var w io.Writer = f
	var gz *gzip.Writer
	if strings.HasSuffix(path, ".gz") {
		gz = gzip.NewWriter(f)
		w = gz
	}
	bw := bufio.NewWriter(w)
	for _, m := range msgs {
		bw.Write(m.Value)
		bw.WriteByte('\n')
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("demo: --save-intents %s: %w", path, err)
	}
	if gz != nil {
		if err := gz.Close(); err != nil {
			return fmt.Errorf("demo: --save-intents %s: %w", path, err)
		}
	}
	return nil
}
