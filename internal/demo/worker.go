package demo

// The worker's side of the demo: its config, producing to the embedded
// broker, following the worker through its metrics until what the demo
// waits for is done, and reading the outputs back.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/capper-dev/capper/configs"
	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/control"
	"github.com/capper-dev/capper/internal/segments"
)

func describeSegments(m *segments.Manifest) string {
	var parts []string
	for _, s := range m.Segments {
		parts = append(parts, fmt.Sprintf("%s %d", s.Name, s.Users))
	}
	return strings.Join(parts, ", ") + " users"
}

// demoConfig is configs/capper.yaml pointed at the embedded servers, with
// configs/policy.yaml, the sections' segments, the pacing section's budget
// and users' own limits (the demo's caps) as its policy file in dir, the
// delay tiers, the delivery-status, control and user-limits topics, the
// budget's lanes, and the plan store plans. Keys go under their own prefix, so that a demo against a
// real Redis never touches a production worker's counts.
func demoConfig(brokers []string, redisAddr, dir, plans string) (*config.Config, error) {
	cfg, err := config.Parse(configs.Example(), nil)
	if err != nil {
		return nil, fmt.Errorf("demo config: %w", err)
	}
	policy, err := withSections(configs.ExamplePolicy())
	if err != nil {
		return nil, err
	}
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, policy, 0o644); err != nil {
		return nil, fmt.Errorf("demo policy: %w", err)
	}
	cfg.Policy.Source = "file://" + filepath.ToSlash(policyFile)
	cfg.Capping.KeyPrefix = "capper-demo"
	cfg.Kafka.Brokers = brokers
	cfg.Kafka.GroupID = "capper-demo"
	cfg.Kafka.FetchMaxWait = config.Duration(100 * time.Millisecond)
	cfg.Kafka.SessionTimeout = config.Duration(6 * time.Second)
	cfg.Kafka.HeartbeatInterval = config.Duration(500 * time.Millisecond)
	cfg.Kafka.DelayTiers = demoTiers
	cfg.Kafka.Topics.DeliveryStatus = topicStatus
	cfg.Kafka.Topics.Control = topicControl
	cfg.Kafka.Topics.Lanes, cfg.Kafka.LaneRecords = topicLanes, "compact" // a new deployment's
	cfg.Kafka.Topics.UserLimits = topicUsers
	cfg.Plans.Source = plans
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

func produce(ctx context.Context, brokers []string, topic string, msgs []kafka.Message) error {
	w, err := kafka.NewWriter(kafka.ToolOptions(brokers), topic)
	if err != nil {
		return err
	}
	defer w.Close()
	for lo := 0; lo < len(msgs); lo += 1000 { // a stream, not one lump
		chunk := msgs[lo:min(lo+1000, len(msgs))]
		if err := w.WriteMessages(ctx, chunk...); err != nil {
			var werrs kafka.WriteErrors
			if errors.As(err, &werrs) {
				return fmt.Errorf("demo: produce %s: %d of %d records failed", topic, werrs.Count(), len(werrs))
			}
			return fmt.Errorf("demo: produce %s: %w", topic, err)
		}
	}
	return nil
}

// runner follows the worker through its metrics.
type runner struct {
	reg      *prometheus.Registry
	done     <-chan error
	progress io.Writer
	produced int // input records produced so far
	// handedBack: delivery statuses that handed a throttled push back,
	// written so far (inputs too: each has an outcome).
	handedBack atomic.Int64
}

// counts are the worker's metrics the demo waits on.
type counts struct {
	produced int
	final    int // decisions that are an intent's outcome (not a deferral)
	deferred int // deferrals (to a delay tier)
	due      int // deferred intents read back and decided again
	statuses int // delivery statuses read
	batches  int
}

// waiting is how many intents wait in the delay tiers.
func (c counts) waiting() int { return c.deferred - c.due }

// decidedAll: every input produced has an outcome or waits in a tier.
func decidedAll(c counts) bool { return c.final+c.waiting() >= c.produced }

// nothingWaits: every input produced has its outcome.
func nothingWaits(c counts) bool { return c.final >= c.produced && c.waiting() == 0 }

func (r *runner) counts() counts {
	c := counts{produced: r.produced + int(r.handedBack.Load())}
	mfs, err := r.reg.Gather()
	if err != nil {
		return c
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "capper_intents_total":
			for _, m := range mf.GetMetric() {
				if heldUndecided(m) {
					continue
				}
				n := int(m.GetCounter().GetValue())
				if labelOf(m, "outcome") == "deferred" {
					c.deferred += n
				} else {
					c.final += n
				}
			}
		case "capper_defer_due_lag_seconds":
			for _, m := range mf.GetMetric() {
				c.due += int(m.GetHistogram().GetSampleCount())
			}
		case "capper_refunds_total":
			for _, m := range mf.GetMetric() {
				c.statuses += int(m.GetCounter().GetValue())
			}
		case "capper_batch_size":
			for _, m := range mf.GetMetric() {
				c.batches += int(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return c
}

// heldUndecided reports a capper_intents_total series that counts no
// decision: the worker counts an intent it holds for a budget (writes to
// a lane, undecided) with no segment and the zero outcome (allowed) when it
// holds it, then again by its outcome when it is released and decided.
// Every decision names a segment, but a dead letter's.
func heldUndecided(m *dto.Metric) bool {
	return labelOf(m, "segment") == "" && labelOf(m, "outcome") != "invalid"
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// errSlow: settle's condition did not hold within its timeout.
var errSlow = errors.New("not settled in time")

// settle follows the worker's metrics until cond holds; with a bar (named
// bar) while it does when progress is a terminal, else a line every few
// seconds. timeout 0 waits as long as the worker runs; past a timeout it
// returns the last counts and errSlow.
func (r *runner) settle(ctx context.Context, bar string, cond func(counts) bool, timeout time.Duration) (counts, error) {
	var pb *progressbar.ProgressBar
	if f, ok := r.progress.(*os.File); ok && bar != "" && term.IsTerminal(int(f.Fd())) {
		pb = progressbar.NewOptions(r.produced, progressbar.OptionSetWriter(r.progress),
			progressbar.OptionSetDescription(bar), progressbar.OptionShowCount(),
			progressbar.OptionShowIts(), progressbar.OptionSetItsString("intents"), progressbar.OptionClearOnFinish())
	}
	begin, lastLine := time.Now(), time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c := r.counts()
		if pb != nil {
			_ = pb.Set(min(c.final+c.waiting(), r.produced))
		} else if bar != "" && time.Since(lastLine) > 3*time.Second {
			fmt.Fprintf(r.progress, "  %d/%d intents decided\n", c.final+c.waiting(), r.produced)
			lastLine = time.Now()
		}
		if cond(c) {
			if pb != nil {
				_ = pb.Finish()
			}
			return c, nil
		}
		if timeout > 0 && time.Since(begin) > timeout {
			return c, errSlow
		}
		select {
		case <-ctx.Done():
			return c, ctx.Err()
		case err := <-r.done:
			return c, fmt.Errorf("demo: worker stopped early: %v", err)
		case <-tick.C:
		}
	}
}

// applied waits until the worker applied the control record at pos
// (capper_control_applied_offset) and returns when it did, on its clock
// (capper_control_applied_timestamp_seconds): a batch decided after that
// saw the record. The time is read by a gather after the one that saw the
// offset: one gather reads the two gauges at different moments, and may
// read the time from before the publish whose offset it reads.
func (r *runner) applied(ctx context.Context, pos control.Position) (time.Time, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		mfs, err := r.reg.Gather()
		if err != nil {
			return time.Time{}, fmt.Errorf("demo: metrics: %w", err)
		}
		seen := false
		for _, mf := range mfs {
			if mf.GetName() == "capper_control_applied_offset" {
				for _, m := range mf.GetMetric() {
					if labelOf(m, "partition") == strconv.Itoa(pos.Partition) && int64(m.GetGauge().GetValue()) >= pos.Offset {
						seen = true
					}
				}
			}
		}
		if seen {
			if mfs, err = r.reg.Gather(); err != nil {
				return time.Time{}, fmt.Errorf("demo: metrics: %w", err)
			}
			at := 0.0
			for _, mf := range mfs {
				if mf.GetName() == "capper_control_applied_timestamp_seconds" && len(mf.GetMetric()) > 0 {
					at = mf.GetMetric()[0].GetGauge().GetValue()
				}
			}
			return time.UnixMilli(int64(math.Round(at * 1000))).UTC(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("demo: the worker did not apply the control record %s in 30s", pos)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case err := <-r.done:
			return time.Time{}, fmt.Errorf("demo: worker stopped early: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// outputs are the records read back: the output topics, the delay
// tiers and the input.
type outputs struct{ deliveries, suppressed, dlq, tiers, input, statuses []kafka.Message }

func readOutputs(ctx context.Context, brokers []string) (outputs, error) {
	var o outputs
	read := []struct {
		topic string
		dst   *[]kafka.Message
	}{{topicDel, &o.deliveries}, {topicSup, &o.suppressed}, {topicDLQ, &o.dlq}, {topicIn, &o.input}, {topicStatus, &o.statuses}}
	tiers := make([][]kafka.Message, len(demoTiers))
	for i, t := range demoTiers {
		read = append(read, struct {
			topic string
			dst   *[]kafka.Message
		}{t.Topic, &tiers[i]})
	}
	errs := make([]error, len(read))
	var wg sync.WaitGroup
	for i, x := range read {
		wg.Add(1)
		go func() {
			defer wg.Done()
			*x.dst, errs[i] = audit.ReadTopic(ctx, brokers, x.topic)
		}()
	}
	wg.Wait()
	for _, t := range tiers {
		o.tiers = append(o.tiers, t...)
	}
	return o, errors.Join(errs...)
}
