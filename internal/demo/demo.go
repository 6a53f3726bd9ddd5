// Package demo owns `capper-demo`: the whole pipeline on one machine with
// nothing installed. It builds a synthetic snapshot with the segment-builder's
// code, starts an in-process Kafka broker (kfake) and Redis (miniredis, which
// runs the same Lua script; or a real Redis), produces a campaign blast, runs
// the real worker (the code of `capper run`) until the input is drained, then
// reports what happened and audits the deliveries read back from Kafka.
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
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/schollz/progressbar/v3"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"golang.org/x/term"

	"github.com/capper-dev/capper/configs"
	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/segments"
)

// Options sizes and points the demo.
type Options struct {
	Users     int    // DefaultUsers in the CLI
	Intents   int    // DefaultIntents in the CLI
	RedisAddr string // "" = embedded miniredis
	Seed      int64
	Out       io.Writer // the report
	Progress  io.Writer // progress: a bar on a terminal, else a line every few seconds
	// Now is the worker's decision clock and the blast's created_at; nil
	// is time.Now.
	Now func() time.Time
	// SaveIntents, when set, is a file the blast is written to, one intent
	// value per line (gzipped when it ends in .gz): capper replay's input.
	SaveIntents string
	// SaveSnapshot, when set, is the directory the snapshot is published
	// to (and kept), instead of a temporary one: capper replay's --snapshot.
	SaveSnapshot string
	// Summary, when set, receives the report's totals.
	Summary *Summary
}

// The CLI's defaults: a blast big enough to drive many users into their
// caps, small enough to run in seconds on the embedded Redis.
const (
	DefaultUsers   = 20000
	DefaultIntents = 40000
)

const (
	topicIn  = "send-intents"
	topicDel = "deliveries"
	topicSup = "suppressed"
	topicDLQ = "send-intents-dlq"
)

// Run runs the demo and returns an error when anything failed, including an
// audit that found a user above a limit.
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
	if o.Now == nil {
		o.Now = time.Now
	}
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

	step := func(format string, args ...any) { fmt.Fprintf(o.Progress, "- "+format+"\n", args...) }
	store, err := objstore.Open(ctx, dir, objstore.Options{})
	if err != nil {
		return err
	}
	m, err := BuildSnapshot(ctx, store, o.Users, uint64(o.Seed), time.Now)
	if err != nil {
		return err
	}
	step("snapshot %s: %s", m.Version, describeSegments(m))

	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topicIn, topicDel, topicSup, topicDLQ))
	if err != nil {
		return fmt.Errorf("demo: start kafka: %w", err)
	}
	defer broker.Close()
	redisAddr := o.RedisAddr
	if redisAddr == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("demo: start embedded redis: %w", err)
		}
		defer mr.Close()
		redisAddr = mr.Addr()
		step("kafka (kfake) at %s, redis (embedded miniredis) at %s", broker.ListenAddrs()[0], redisAddr)
	} else {
		step("kafka (kfake) at %s, redis at %s", broker.ListenAddrs()[0], redisAddr)
	}

	cfg, err := demoConfig(broker.ListenAddrs(), redisAddr, dir)
	if err != nil {
		return err
	}
	msgs := Blast(BlastOptions{Users: o.Users, Intents: o.Intents, Seed: uint64(o.Seed), Now: o.Now()})
	if o.SaveIntents != "" {
		if err := SaveIntents(o.SaveIntents, msgs); err != nil {
			return err
		}
		step("blast saved to %s, snapshot in %s (capper replay --from %s --snapshot %s)", o.SaveIntents, dir, o.SaveIntents, dir)
	}

	reg := prometheus.NewRegistry()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	started := make(chan struct{})
	done := make(chan error, 1)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	t0 := time.Now()
	go func() {
		done <- app.Run(runCtx, app.Options{Config: cfg, Logger: quiet, Registry: reg, Now: o.Now, Build: cli.BuildOf("demo", ""),
			Started: func(string) { close(started) }})
	}()
	select {
	case <-started:
	case err := <-done:
		return fmt.Errorf("demo: worker did not start: %w", err)
	}
	// The blast arrives while the worker runs, as a campaign's would (a
	// backlog that was there when a worker took its partitions over is
	// decided by Redis alone: see the README's refusal cache).
	if err := produce(ctx, broker.ListenAddrs(), msgs); err != nil {
		return err
	}
	step("produced %d send-intents (%d campaigns; tags, priorities and users' time zones; repeats, malformed, transactional and override-asking ones)", len(msgs), 6)
	if err := waitDrained(ctx, reg, len(msgs), o.Progress, done); err != nil {
		return err
	}
	elapsed := time.Since(t0)
	stop()
	if err := <-done; err != nil {
		return fmt.Errorf("demo: worker: %w", err)
	}

	outs, err := readOutputs(ctx, broker.ListenAddrs())
	if err != nil {
		return err
	}
	mfs, err := reg.Gather()
	if err != nil {
		return fmt.Errorf("demo: metrics: %w", err)
	}
	sum := writeReport(o.Out, mfs, outs, len(msgs), elapsed)
	if o.Summary != nil {
		*o.Summary = sum
	}
	fmt.Fprintf(o.Out, "total time: %s\n\n", time.Since(start).Round(time.Millisecond))
	return auditDeliveries(o.Out, cfg, outs.deliveries)
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

func describeSegments(m *segments.Manifest) string {
	var parts []string
	for _, s := range m.Segments {
		parts = append(parts, fmt.Sprintf("%s %d", s.Name, s.Users))
	}
	return strings.Join(parts, ", ") + " users"
}

// demoConfig is configs/capper.yaml pointed at the embedded servers, with
// configs/policy.yaml (the demo's caps) as its policy file in dir. Keys go
// under their own prefix, so that a demo against a real Redis never touches
// a production worker's counts.
func demoConfig(brokers []string, redisAddr, dir string) (*config.Config, error) {
	cfg, err := config.Parse(configs.Example(), nil)
	if err != nil {
		return nil, fmt.Errorf("demo config: %w", err)
	}
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, configs.ExamplePolicy(), 0o644); err != nil {
		return nil, fmt.Errorf("demo policy: %w", err)
	}
	cfg.Policy.Source = "file://" + filepath.ToSlash(policyFile)
	cfg.Capping.KeyPrefix = "capper-demo"
	cfg.Kafka.Brokers = brokers
	cfg.Kafka.GroupID = "capper-demo"
	cfg.Kafka.FetchMaxWait = config.Duration(100 * time.Millisecond)
	cfg.Kafka.SessionTimeout = config.Duration(6 * time.Second)
	cfg.Kafka.HeartbeatInterval = config.Duration(500 * time.Millisecond)
	cfg.Redis.Addrs = []string{redisAddr}
	cfg.Segments.Source = dir
	cfg.HTTP.Address = "127.0.0.1:0"
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("demo config: %w", err)
	}
	return cfg, nil
}

// demoRules are the rules of the demo's policy file.
func demoRules(cfg *config.Config) (capping.Rules, error) {
	path, err := cfg.PolicyFile()
	if err != nil {
		return capping.Rules{}, err
	}
	d, problems, err := config.ReadPolicy(path)
	if err != nil {
		return capping.Rules{}, err
	}
	r, _ := d.Rules()
	return r, problems.Err()
}

func produce(ctx context.Context, brokers []string, msgs []kafka.Message) error {
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topicIn, RequiredAcks: kafka.RequireAll,
		Balancer: &kafka.Murmur2Balancer{}, BatchTimeout: time.Millisecond, BatchSize: 1000}
	defer w.Close()
	for lo := 0; lo < len(msgs); lo += 1000 { // a stream, not one lump
		chunk := msgs[lo:min(lo+1000, len(msgs))]
		if err := w.WriteMessages(ctx, chunk...); err != nil {
			var werrs kafka.WriteErrors
			if errors.As(err, &werrs) {
				return fmt.Errorf("demo: produce send-intents: %d of %d records failed", werrs.Count(), len(werrs))
			}
			return fmt.Errorf("demo: produce send-intents: %w", err)
		}
	}
	return nil
}

// waitDrained follows capper_intents_total until every intent has an outcome.
func waitDrained(ctx context.Context, reg *prometheus.Registry, total int, progress io.Writer, done <-chan error) error {
	var bar *progressbar.ProgressBar
	if f, ok := progress.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(progress),
			progressbar.OptionSetDescription("deciding"), progressbar.OptionShowCount(),
			progressbar.OptionShowIts(), progressbar.OptionSetItsString("intents"), progressbar.OptionClearOnFinish())
	}
	lastLine := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		n := int(sumCounter(reg, "capper_intents_total"))
		if bar != nil {
			_ = bar.Set(n)
		} else if time.Since(lastLine) > 3*time.Second {
			fmt.Fprintf(progress, "  %d/%d intents decided\n", n, total)
			lastLine = time.Now()
		}
		if n >= total {
			if bar != nil {
				_ = bar.Finish()
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-done:
			return fmt.Errorf("demo: worker stopped early: %v", err)
		case <-tick.C:
		}
	}
}

func sumCounter(reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

type outputs struct{ deliveries, suppressed, dlq []kafka.Message }

func readOutputs(ctx context.Context, brokers []string) (outputs, error) {
	var o outputs
	var err error
	if o.deliveries, err = audit.ReadTopic(ctx, brokers, topicDel); err != nil {
		return o, err
	}
	if o.suppressed, err = audit.ReadTopic(ctx, brokers, topicSup); err != nil {
		return o, err
	}
	o.dlq, err = audit.ReadTopic(ctx, brokers, topicDLQ)
	return o, err
}

// ErrAudit is returned when the audit finds a user above a limit.
var ErrAudit = errors.New("audit failed")

// auditDeliveries checks the deliveries read back from Kafka and prints the
// verdict: "audit: ok, ..." or the violations (and then returns ErrAudit).
func auditDeliveries(w io.Writer, cfg *config.Config, deliveries []kafka.Message) error {
	sends, err := audit.Sends(deliveries)
	if err != nil {
		return fmt.Errorf("demo: audit: %w", err)
	}
	rules, err := demoRules(cfg)
	if err != nil {
		return fmt.Errorf("demo: audit: %w", err)
	}
	v := audit.Check(rules, sends)
	if len(v) == 0 {
		fmt.Fprintf(w, "audit: ok, no user above any limit (%d deliveries checked against every window)\n", len(sends))
		return nil
	}
	fmt.Fprintf(w, "audit: %d violations\n", len(v))
	for i, x := range v {
		if i == 20 {
			fmt.Fprintf(w, "  ... and %d more\n", len(v)-20)
			break
		}
		fmt.Fprintf(w, "  %s\n", x)
	}
	return fmt.Errorf("%w: %d windows above their limit", ErrAudit, len(v))
}
