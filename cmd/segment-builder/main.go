// Command segment-builder builds a segment snapshot (one roaring bitmap per
// segment) from CSV/TSV rows or per-segment id lists, verifies that segments
// are mutually exclusive, and publishes it to a directory or S3 for capper
// workers to load.
//
//	segment-builder --input PATH|URL [--input ...] --out DIR|file://DIR|s3://BUCKET/PREFIX
//	                [--config FILE] [--on-conflict error|priority] [--max-errors N] [--dry-run]
//
//	segment-builder version
//
// Exit status: 0 published (or built, with --dry-run); 1 the build or the
// publish failed (conflicts, bad input, unreadable input, store errors);
// 2 the command line or the config is wrong. A failed build publishes
// nothing.
//
// The summary is printed on stdout; warnings and errors are log lines on
// stderr (log/slog, JSON unless --log-format text), except a wrong command
// line, which is printed for a human. No user id is logged above debug:
// conflicts and malformed lines are named by their file:line.
//
// Conflicts are reported with the file:line of both rows. The first row's
// position is found by re-reading the inputs for the reported users only;
// stdin cannot be re-read, so a first row read from stdin is reported
// without its line.
package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/segbuild"
	"github.com/capper-dev/capper/internal/segments"
)

// version and revision are stamped at build time:
// -ldflags "-X main.version=v1.2.3 -X main.revision=<git sha>".
var version, revision = "dev", ""

// commands is the command line: the build flags, and a version command.
// Without a command, segment-builder builds (the hidden default command).
type commands struct {
	flags
	Build   buildCmd       `cmd:"" default:"1" hidden:"" help:"Build and publish a snapshot (the default)."`
	Plan    planCmd        `cmd:"" help:"Campaign plans: build an audience and publish a plan; list; withdraw."`
	Version cli.VersionCmd `cmd:"" help:"Print the version, VCS revision and Go version."`
	Docs    cli.DocsCmd    `cmd:"" hidden:"" help:"Print reference pages generated from the code."`
}

// clidoc is the hand-written part of segment-builder's section of
// docs/reference/cli.md (`segment-builder docs cli`, make docs).
//
//go:embed clidoc.md
var clidoc string

// flags are the build's flags (deploy/chart_test.go reads their names from
// this struct).
type flags struct {
	Input      []string `name:"input" short:"i" sep:"none" placeholder:"PATH|URL" help:"Rows to read (repeatable): a CSV/TSV file of user_id,segment; a directory of <segment>.txt id lists; - for stdin; an s3://bucket/key object. .gz is read transparently."`
	Out        string   `name:"out" short:"o" placeholder:"DIR|file://DIR|s3://BUCKET/PREFIX" help:"Where to publish the snapshot (default: segments.source from --config)."`
	Config     string   `name:"config" placeholder:"FILE" help:"capper policy file, or worker config (its policy: the file policy.source names, or the inline one): segment names must be the policy's segments, in its priority order; a worker config also gives --out and S3 settings."`
	OnConflict string   `name:"on-conflict" enum:"error,priority" default:"error" help:"A user in two segments: error fails the build; priority keeps the segment that comes first in the config."`
	MaxErrors  int      `name:"max-errors" default:"0" placeholder:"N" help:"Malformed lines to tolerate (and list) before failing."`
	DryRun     bool     `name:"dry-run" help:"Build and report, publish nothing."`
	Keep       int      `name:"keep" default:"${keep}" placeholder:"N" help:"Snapshot versions to keep in the store (the one LATEST names is never deleted)."`
	Progress   string   `name:"progress" enum:"auto,always,never" default:"auto" help:"Progress on stderr: auto shows it when stderr is a terminal."`
	LogFormat  string   `name:"log-format" enum:"json,text" default:"json" help:"Log lines (warnings, errors) on stderr as json or text."`
	LogLevel   string   `name:"log-level" enum:"debug,info,warn,error" default:"info" help:"Least level logged; user ids are only logged at debug."`

	S3Region    string `name:"s3-region" placeholder:"REGION" help:"S3 region (default: the AWS default chain, or the config's segments.s3.region; us-east-1 with a custom endpoint)."`
	S3Endpoint  string `name:"s3-endpoint" placeholder:"URL" help:"S3-compatible endpoint, e.g. http://minio:9000."`
	S3PathStyle bool   `name:"s3-path-style" help:"Path-style S3 addressing (most S3-compatible stores need it)."`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program; its result is the exit code (see the package
// comment).
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var c commands
	kctx, code, ok := cli.Parse("segment-builder", "Build a segment snapshot (one roaring bitmap per segment) and publish it. Without a command, builds.",
		&c, args, stdout, stderr, kong.Vars{"keep": strconv.Itoa(segbuild.DefaultKeep)}, cli.VersionVars("segment-builder", cli.BuildOf(version, revision)), cli.DocNotes(clidoc))
	if !ok {
		return code
	}
	return cli.ExitWithUsage("segment-builder", kctx, kctx.Run(&env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr, flags: c.flags}), stderr)
}

// env is what the commands run with.
type env struct {
	ctx            context.Context
	stdin          io.Reader
	stdout, stderr io.Writer
	flags          flags
}

type buildCmd struct{}

// Run builds and publishes. A wrong command line is printed for a human
// (exit 2); once it is right, every warning and error is a log line.
func (buildCmd) Run(e *env) error {
	c := e.flags
	opts, err := c.options()
	if err != nil {
		return cli.UsageError(err)
	}
	logger, err := cli.NewLogger(e.stderr, c.LogLevel, c.LogFormat)
	if err != nil {
		return cli.UsageError(err)
	}
	opts.s3.Logger = logger
	if err := build(e.ctx, c, opts, e.stdin, e.stdout, e.stderr, logger); err != nil {
		logFailure(logger, err)
		return cli.Reported(err)
	}
	return nil
}

// options checks the flags together and reads the config.
type options struct {
	segments []string // config order, empty without --config
	policy   segbuild.ConflictPolicy
	out      string
	s3       objstore.S3Options
}

func (c flags) options() (options, error) {
	var o options
	if len(c.Input) == 0 {
		return o, errors.New("missing --input")
	}
	policy, err := segbuild.ParseConflictPolicy(c.OnConflict)
	if err != nil {
		return o, err
	}
	o.policy, o.out = policy, c.Out
	if c.Config != "" {
		d, problems, err := config.ReadPolicy(c.Config)
		if err != nil {
			return o, err
		}
		if err := problems.Err(); err != nil {
			return o, fmt.Errorf("policy %s:\n%w", c.Config, err)
		}
		o.segments = d.SegmentNames()
		if cfg, err := config.Load(c.Config); err == nil { // a worker config
			if o.out == "" {
				o.out = cfg.Segments.Source
			}
			o.s3 = objstore.S3Options{Region: cfg.Segments.S3.Region, Endpoint: cfg.Segments.S3.Endpoint, UsePathStyle: cfg.Segments.S3.UsePathStyle}
		}
	}
	if policy == segbuild.ConflictPriority && c.Config == "" {
		return o, errors.New("--on-conflict=priority needs --config for the segment order")
	}
	if o.out == "" && !c.DryRun {
		return o, errors.New("missing --out (or a config with segments.source)")
	}
	if c.MaxErrors < 0 {
		return o, fmt.Errorf("--max-errors=%d: must be 0 or more", c.MaxErrors)
	}
	if c.Keep < 1 {
		return o, fmt.Errorf("--keep=%d: must be at least 1", c.Keep)
	}
	if c.S3Region != "" {
		o.s3.Region = c.S3Region
	}
	if c.S3Endpoint != "" {
		o.s3.Endpoint = c.S3Endpoint
	}
	o.s3.UsePathStyle = o.s3.UsePathStyle || c.S3PathStyle
	return o, nil
}

func build(ctx context.Context, c flags, o options, stdin io.Reader, stdout, stderr io.Writer, logger *slog.Logger) error {
	start := time.Now()
	var store objstore.Store
	if !c.DryRun {
		// Open the destination first, and reach it (LATEST need not exist
		// yet): a wrong --out, a missing bucket or refused credentials
		// should not cost a whole build.
		st, err := objstore.Open(ctx, o.out, objstore.Options{S3: o.s3})
		if err != nil {
			return err
		}
		if _, err := st.Size(ctx, segments.LatestKey); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("check --out %s: %w", st, err)
		}
		store = st
	}
	inputs, err := segbuild.ResolveInputs(ctx, c.Input, segbuild.InputOptions{Stdin: stdin, S3: o.s3})
	if err != nil {
		return err
	}
	bar := newProgress(c.Progress, stderr, inputs)
	b := segbuild.NewBuilder(segbuild.BuilderOptions{
		Segments:   o.segments,
		OnConflict: o.policy,
		MaxErrors:  c.MaxErrors,
		Logger:     logger,
		Progress:   bar.update,
	})
	for _, in := range inputs {
		if err := b.ReadInput(ctx, in); err != nil {
			bar.done()
			return fmt.Errorf("build failed, nothing published: %w", err)
		}
	}
	bar.done()
	result, err := b.Finish(ctx)
	if err != nil {
		return fmt.Errorf("build failed, nothing published: %w", err)
	}
	if len(result.BadLines) > 0 {
		logSkipped(logger, result.BadLines, c.MaxErrors)
	}
	if err := result.WriteSummary(stdout, time.Since(start)); err != nil {
		return err
	}
	if c.DryRun {
		fmt.Fprintf(stdout, "dry run: nothing published (version would be %s)\n", result.Manifest(time.Now()).Version)
		return nil
	}
	m, err := segbuild.Publish(ctx, store, result, segbuild.PublishOptions{Keep: c.Keep, Logger: logger})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "published %s to %s\n", m.Version, store)
	return nil
}
