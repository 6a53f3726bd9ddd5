package app

// capper replay: what a policy would have done on past traffic. The
// policies are read like `capper policy check` reads them (with their
// budgets, which pace the replay as they pace the worker), the snapshot
// like the worker loads it; internal/replay does the rest, in memory.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/plans"
	"github.com/capper-dev/capper/internal/replay"
	"github.com/capper-dev/capper/internal/segments"
)

// ReplayOptions are capper replay's flags.
type ReplayOptions struct {
	Policy   string // --policy: the candidate (policy document or worker config)
	Baseline string // --baseline: optional
	// Snapshot is STORE or STORE@version (a directory, file:// or s3://);
	// empty: every user in no segment.
	Snapshot string
	S3       objstore.S3Options
	// Store, when set, is the snapshot store instead of opening Snapshot's
	// (whose version part still applies).
	Store objstore.Store
	// Plans is a plan store, STORE[@SET] (the set LATEST names, or an
	// older one): the candidate is replayed first come, first served and
	// with the set's plans (every plan in it, ended or not: the records'
	// times say which are in force). Not with Baseline.
	Plans             string
	From              string   // --from: intents.jsonl[.gz] or kafka://topic@FROM..TO
	Brokers           []string // --brokers, for kafka://
	IdempotencyWindow time.Duration
	// Progress shows a bar when it is a terminal; nil shows nothing.
	Progress io.Writer
	// Observe sees every record and its decisions (tests).
	Observe func(rec *replay.Record, ds []replay.Outcome)
	// Released sees every paced intent when its budget releases it (tests).
	Released func(side string, r *replay.Release)
}

// DefaultIdempotencyWindow is the worker config's default.
func DefaultIdempotencyWindow() time.Duration {
	return config.Default().Capping.IdempotencyWindow.D()
}

// Replay runs capper replay and returns its report. Bad input is an error
// naming the flag and the file.
func Replay(ctx context.Context, o ReplayOptions, log *slog.Logger) (*replay.Report, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.IdempotencyWindow == 0 {
		o.IdempotencyWindow = DefaultIdempotencyWindow()
	}
	if o.IdempotencyWindow < time.Second {
		return nil, fmt.Errorf("--idempotency-window %s: must be at least 1s", o.IdempotencyWindow)
	}
	cand, err := replayPolicy("--policy", o.Policy)
	if err != nil {
		return nil, err
	}
	ro := replay.Options{Candidate: *cand, IdempotencyWindow: o.IdempotencyWindow, Observe: o.Observe, Released: o.Released}
	if o.Baseline != "" {
		if ro.Baseline, err = replayPolicy("--baseline", o.Baseline); err != nil {
			return nil, err
		}
	}
	if o.Plans != "" {
		if o.Baseline != "" {
			return nil, errors.New("--plans compares first come, first served with plans under --policy: it takes no --baseline")
		}
		set, err := loadReplayPlans(ctx, o, log)
		if err != nil {
			return nil, err
		}
		ro.Plans = set
	}
	if o.Snapshot != "" || o.Store != nil {
		snap, err := loadReplaySnapshot(ctx, o, log)
		if err != nil {
			return nil, err
		}
		ro.Lookup, ro.Snapshot = snap.Lookup, snap.Version()
	}
	src, err := replay.Open(ctx, o.From, o.Brokers)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	bar := newReplayProgress(o.Progress, src)
	ro.Progress = bar.update
	rep, err := replay.Run(ctx, src, ro)
	bar.done()
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// replayPolicy reads a policy file as `capper policy check` does.
func replayPolicy(flag, path string) (*replay.Policy, error) {
	if path == "" {
		return nil, fmt.Errorf("%s is required", flag)
	}
	d, problems, err := config.ReadPolicy(path)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s %s: %w (capper policy check lists them): %w", flag, path, ErrPolicyProblems, problems.Err())
	}
	rules, problems := d.Rules()
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s %s: %w: %w", flag, path, ErrPolicyProblems, problems.Err())
	}
	return &replay.Policy{Name: path, Rules: rules, Decoder: dispatch.DecoderOptions{
		Channels: d.Channels, Categories: d.Categories, DefaultCategory: d.DefaultCategory,
		MaxBytes: config.Default().Kafka.MaxIntentBytes,
	}, Budgets: d.PacingSet().WithExempt(rules.ExemptCategories)}, nil
}

// splitSnapshot reads STORE@version; an @ that is not followed by a
// version is part of the store's name.
func splitSnapshot(s string) (store, version string) {
	if i := strings.LastIndexByte(s, '@'); i >= 0 && segments.ValidateVersion(s[i+1:]) == nil {
		return s[:i], s[i+1:]
	}
	return s, ""
}

func loadReplaySnapshot(ctx context.Context, o ReplayOptions, log *slog.Logger) (*segments.Snapshot, error) {
	name, version := splitSnapshot(o.Snapshot)
	st := o.Store
	if st == nil {
		var err error
		if st, err = objstore.Open(ctx, name, objstore.Options{S3: withLogger(o.S3, log)}); err != nil {
			return nil, fmt.Errorf("--snapshot %s: %w", o.Snapshot, err)
		}
	}
	var snap *segments.Snapshot
	var err error
	if version == "" {
		snap, err = segments.Load(ctx, st, segments.LoadOptions{})
	} else {
		snap, err = segments.LoadVersion(ctx, st, version, segments.LoadOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("--snapshot %s: %w", o.Snapshot, err)
	}
	return snap, nil
}

func loadReplayPlans(ctx context.Context, o ReplayOptions, log *slog.Logger) (*plans.Set, error) {
	name, version := plans.SplitStore(o.Plans)
	st, err := objstore.Open(ctx, name, objstore.Options{S3: withLogger(o.S3, log)})
	if err != nil {
		return nil, fmt.Errorf("--plans %s: %w", o.Plans, err)
	}
	set, err := plans.Load(ctx, st, version, nil, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("--plans %s: %w", o.Plans, err)
	}
	if len(set.Plans()) == 0 {
		return nil, fmt.Errorf("--plans %s: the set holds no plan", o.Plans)
	}
	log.Info("replaying with campaign plans", "plans", set.Version(), "count", len(set.Plans()))
	return set, nil
}

func withLogger(s objstore.S3Options, log *slog.Logger) objstore.S3Options {
	s.Logger = log
	return s
}

// replayProgress is a bar on a terminal (bytes of a file, records of a
// topic range); nothing elsewhere.
type replayProgress struct {
	bar *progressbar.ProgressBar
	src replay.Progressor
}

func newReplayProgress(w io.Writer, src replay.Source) *replayProgress {
	f, ok := w.(*os.File)
	p, canTell := src.(replay.Progressor)
	if !ok || !canTell || !term.IsTerminal(int(f.Fd())) {
		return &replayProgress{}
	}
	_, total, unit := p.Progress()
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(w),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionShowCount(),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionSetDescription("replaying"),
	}
	if unit == "bytes" {
		opts = append(opts, progressbar.OptionShowBytes(true))
	} else {
		opts = append(opts, progressbar.OptionShowIts(), progressbar.OptionSetItsString(unit))
	}
	return &replayProgress{bar: progressbar.NewOptions64(total, opts...), src: p}
}

func (p *replayProgress) update(int64) {
	if p.bar != nil {
		done, _, _ := p.src.Progress()
		_ = p.bar.Set64(done)
	}
}

func (p *replayProgress) done() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
