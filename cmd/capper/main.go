// Command capper is the frequency-capping worker: it consumes send-intents
// from Kafka, checks each user's caps in Redis and forwards only the allowed
// intents (see README.md).
//
// `capper run` writes only log lines (log/slog, JSON by default) on stderr,
// its fatal error included; the other commands are for humans and print
// plain text.
package main

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/objstore"
)

// version and revision are stamped at build time:
// -ldflags "-X main.version=v1.2.3 -X main.revision=<git sha>".
var version, revision = "dev", ""

type commands struct {
	Run         runCmd            `cmd:"" help:"Run the worker (consume, decide, forward)."`
	CheckConfig checkConfigCmd    `cmd:"" name:"check-config" help:"Validate a config file and print the effective config, secrets masked. Exit 2 on a problem, or when its policy (a file or inline) needs a key it leaves unset."`
	Inspect     inspectCmd        `cmd:"" help:"Show a user's segment and caps (read-only)."`
	Policy      policyCmd         `cmd:"" help:"Check, compare, publish and list cap policies (docs/operations/changing-caps.md)."`
	Migrate     migrateCmd        `cmd:"" help:"Convert the first version's Redis keys (sorted sets) into records; the workers must be stopped."`
	Replay      replayCmd         `cmd:"" help:"Decide past intents with a candidate policy (and a baseline) in memory: what would it have done? No Redis, no writes."`
	Campaign    campaignCmd       `cmd:"" help:"Stop, pause and resume campaigns (and every intent at once), and list their states: the workers apply it to every intent they hold, within seconds."`
	Topics      topicsCmd         `cmd:"" help:"Check the Kafka topics the config names and the lane topics of its policy's budgets (partitions, compaction), and create the missing ones."`
	Budgets     budgetsCmd        `cmd:"" help:"List the send-pacing budgets of the policy in force, with the intents waiting in their lanes and when they drain."`
	Group       groupCmd          `cmd:"" help:"Consumer groups: remove static workers that were scaled down (docs/operations/restarts-deploys-scaling.md)."`
	User        userCmd           `cmd:"" help:"Show and change a user's own limits (snooze, tier, channels, quiet hours) through the user-limits topic, and erase a user."`
	Version     cli.VersionCmd    `cmd:"" help:"Print the version, VCS revision and Go version."`
	Completion  cli.CompletionCmd `cmd:"" help:"Print a shell completion script (bash, zsh or fish)."`
	Docs        cli.DocsCmd       `cmd:"" hidden:"" help:"Print reference pages generated from the code."`
}

// clidoc is the hand-written part of docs/reference/cli.md (`capper docs
// cli`, make docs).
//
//go:embed clidoc.md
var clidoc string

type env struct {
	ctx            context.Context
	stdout, stderr io.Writer
}

// humanLog is the logger of a command a person runs: warnings (the S3
// client's) go to stderr as text, the answer is on stdout.
func (e *env) humanLog() (*slog.Logger, error) {
	return cli.NewLogger(e.stderr, "warn", cli.LogText)
}

// loadConfig reads a config file: one that cannot be read, or is wrong,
// exits 2, as a wrong command line does.
func loadConfig(path string) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, cli.UsageError(err)
	}
	return cfg, nil
}

// forHuman loads a config for a person's command, with humanLog.
func (e *env) forHuman(path string) (*config.Config, *slog.Logger, error) {
	cfg, err := loadConfig(path)
	if err != nil {
		return nil, nil, err
	}
	log, err := e.humanLog()
	return cfg, log, err
}

type runCmd struct {
	Config string `required:"" type:"existingfile" help:"Config file (see configs/capper.yaml)." completion:"<file>"`
}

func (c *runCmd) Run(e *env) error {
	app.TuneGC()
	cfg, err := loadConfig(c.Config)
	if err != nil {
		// No config, so no log settings: the defaults (JSON at info).
		cli.DefaultLogger(e.stderr).Error("capper cannot start: config", "error", err)
		return cli.Reported(err)
	}
	log, err := app.NewLogger(e.stderr, cfg.Log)
	if err != nil {
		cli.DefaultLogger(e.stderr).Error("capper cannot start: logger", "error", err)
		return cli.Reported(err)
	}
	// go-redis has one process-wide logger.
	redis.SetLogger(app.RedisLogger(log, app.RedisLogEvery, time.Now))
	if err := app.Run(e.ctx, app.Options{Config: cfg, Logger: log, Build: cli.BuildOf(version, revision)}); err != nil {
		log.Error("capper stopped on an error", "error", err)
		return cli.Reported(err)
	}
	return nil
}

type policyCmd struct {
	Check   policyCheckCmd   `cmd:"" help:"Check policy documents (or worker configs): every problem, with its line and field path; a worker config's policy also against that config. Exit 1 on any."`
	Diff    policyDiffCmd    `cmd:"" help:"Say what changes from one policy to another, per segment and limit."`
	Publish policyPublishCmd `cmd:"" help:"Check a policy and publish it to a policy store as a new version; workers switch at their next poll."`
	History policyHistoryCmd `cmd:"" help:"List a policy store's versions, the one in use marked, with what each changed."`
}

// s3Flags reach an S3-compatible store (AWS needs none of them): the
// worker config's segments.s3 (--config), each flag given overriding it.
type s3Flags struct {
	S3Endpoint  string `name:"s3-endpoint" placeholder:"URL" help:"S3-compatible endpoint (MinIO, ...); default segments.s3.endpoint of --config, else AWS."`
	S3Region    string `name:"s3-region" help:"S3 region; default segments.s3.region of --config, else from the AWS environment."`
	S3PathStyle bool   `name:"s3-path-style" help:"Address buckets as endpoint/bucket (most S3-compatible stores); default segments.s3.use_path_style of --config."`
}

// options are the flags over cfg's segments.s3 (cfg may be nil).
func (f s3Flags) options(cfg *config.Config) objstore.S3Options {
	var o objstore.S3Options
	if cfg != nil {
		s := cfg.Segments.S3
		o = objstore.S3Options{Endpoint: s.Endpoint, Region: s.Region, UsePathStyle: s.UsePathStyle}
	}
	if f.S3Endpoint != "" {
		o.Endpoint = f.S3Endpoint
	}
	if f.S3Region != "" {
		o.Region = f.S3Region
	}
	o.UsePathStyle = o.UsePathStyle || f.S3PathStyle
	return o
}

// storeConfig is a command's --config: the worker config whose store
// settings it uses.
type storeConfig struct {
	Config string `type:"existingfile" help:"Worker config: the S3 settings (segments.s3) and the default store (policy.source)." completion:"<file>"`
}

// load is the config, nil without --config.
func (c storeConfig) load() (*config.Config, error) {
	if c.Config == "" {
		return nil, nil
	}
	return loadConfig(c.Config)
}

// policyStore is the store a flag names, else the config's policy.source
// when that is a store.
func policyStore(flag, name string, cfg *config.Config) (string, error) {
	switch {
	case flag != "":
		return flag, nil
	case cfg != nil && cfg.Policy.Source != "" && !cfg.Policy.IsFile():
		return cfg.Policy.Source, nil
	case cfg != nil:
		return "", cli.UsageError(fmt.Errorf("%s: the config's policy.source (%q) is not a policy store: give %s STORE", name, cfg.Policy.Source, name))
	}
	return "", cli.UsageError(fmt.Errorf("%s: a policy store is required (or --config, whose policy.source is one)", name))
}

type policyPublishCmd struct {
	File string `arg:"" type:"existingfile" help:"Policy document." completion:"<file>"`
	To   string `placeholder:"STORE" help:"Policy store: a directory or s3://bucket/prefix (the workers' policy.source); default policy.source of --config."`
	storeConfig
	s3Flags
}

func (c *policyPublishCmd) Run(e *env) error {
	cfg, err := c.load()
	if err != nil {
		return err
	}
	store, err := policyStore(c.To, "--to", cfg)
	if err != nil {
		return err
	}
	err = app.PublishPolicy(e.ctx, e.stdout, c.File, app.PolicyStoreOptions{Store: store, S3: c.options(cfg), Config: cfg})
	if errors.Is(err, app.ErrPolicyProblems) {
		return cli.Reported(err)
	}
	return err
}

type policyHistoryCmd struct {
	From string `placeholder:"STORE" help:"Policy store: a directory or s3://bucket/prefix; default policy.source of --config."`
	storeConfig
	s3Flags
}

func (c *policyHistoryCmd) Run(e *env) error {
	cfg, err := c.load()
	if err != nil {
		return err
	}
	store, err := policyStore(c.From, "--from", cfg)
	if err != nil {
		return err
	}
	return app.PolicyHistory(e.ctx, e.stdout, app.PolicyStoreOptions{Store: store, S3: c.options(cfg)})
}

type policyCheckCmd struct {
	Files []string `arg:"" type:"existingfile" help:"Policy documents or worker configs." completion:"<file>"`
}

func (c *policyCheckCmd) Run(e *env) error {
	if err := app.CheckPolicies(e.stdout, c.Files); err != nil {
		return cli.Reported(err)
	}
	return nil
}

type policyDiffCmd struct {
	Old string `arg:"" type:"existingfile" help:"The policy in use (document or worker config)." completion:"<file>"`
	New string `arg:"" type:"existingfile" help:"The candidate." completion:"<file>"`
}

func (c *policyDiffCmd) Run(e *env) error { return app.DiffPolicies(e.stdout, c.Old, c.New) }

type checkConfigCmd struct {
	Config string `required:"" type:"existingfile" help:"Config file to check." completion:"<file>"`
}

func (c *checkConfigCmd) Run(e *env) error {
	cfg, err := loadConfig(c.Config)
	if err != nil {
		return err
	}
	out, err := cfg.Effective()
	if err != nil {
		return err
	}
	for _, name := range cfg.IgnoredEnv {
		fmt.Fprintf(e.stderr, "warning: %s matches no config key; ignored\n", name)
	}
	for _, msg := range cfg.Deprecations {
		fmt.Fprintf(e.stderr, "warning: %s\n", msg)
	}
	if err := checkConfigPolicy(e, c.Config, cfg); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "%s: ok\n", c.Config)
	_, err = e.stdout.Write(out)
	return err
}

// checkConfigPolicy refuses a config that leaves unset a key its policy
// needs (config.PolicyNeeds), when the policy is on this machine (a file
// or inline; a store's is checked by capper policy publish --config). A
// policy that cannot be read or has problems is only warned about: capper
// policy check says it all.
func checkConfigPolicy(e *env, path string, cfg *config.Config) error {
	r, ok, err := cfg.LocalPolicy()
	switch {
	case !ok:
		return nil
	case err != nil:
		fmt.Fprintf(e.stderr, "warning: policy not checked against this config: %v\n", err)
		return nil
	case len(r.Problems) > 0:
		fmt.Fprintf(e.stderr, "warning: the policy %s has problems, not checked against this config: capper policy check %s lists them\n", r.File, path)
		return nil
	}
	needs := cfg.PolicyNeeds(r.Document)
	if len(needs) == 0 {
		return nil
	}
	return cli.UsageError(fmt.Errorf("%s: its policy (%s) needs what it leaves unset; a worker would not start:\n%w", path, cmp.Or(r.File, "inline"), needs.Err()))
}

type inspectCmd struct {
	Config   string       `required:"" type:"existingfile" help:"Config file (Redis, snapshot store, policies)." completion:"<file>"`
	User     uint64       `required:"" help:"User id."`
	At       time.Time    `help:"The time to look at (RFC 3339); default now."`
	TimeZone cli.TimeZone `name:"time-zone" help:"The user's IANA time zone, for calendar limits; default the policy's."`
	Campaign string       `help:"Per-campaign limits: show this campaign (the record keeps only hashes of campaign names)."`
	Output   string       `short:"o" enum:"table,json" default:"table" help:"Output format: table or json."`
}

func (c *inspectCmd) Run(e *env) error {
	cfg, log, err := e.forHuman(c.Config)
	if err != nil {
		return err
	}
	in, err := app.Inspect(e.ctx, cfg, c.User, app.InspectOptions{At: c.At, TimeZone: c.TimeZone.Location, Campaign: c.Campaign}, log)
	if err != nil {
		return err
	}
	if c.Output == "json" {
		return in.WriteJSON(e.stdout)
	}
	return in.WriteTable(e.stdout)
}

type migrateCmd struct {
	Config     string `required:"" type:"existingfile" help:"Config file (Redis, and the policy the records are built for)." completion:"<file>"`
	FromPrefix string `name:"from-prefix" help:"The first version's capping.key_prefix; default the config's."`
	DryRun     bool   `name:"dry-run" help:"Read and report; write nothing."`
}

func (c *migrateCmd) Run(e *env) error {
	cfg, log, err := e.forHuman(c.Config)
	if err != nil {
		return err
	}
	rep, err := app.Migrate(e.ctx, cfg, app.MigrateOptions{FromPrefix: c.FromPrefix, DryRun: c.DryRun, Progress: e.stderr}, log)
	if err != nil {
		return err
	}
	app.WriteMigrateReport(e.stdout, rep, c.DryRun)
	return nil
}

type replayCmd struct {
	Policy            string        `required:"" help:"The candidate policy (policy document or worker config)." completion:"<file>"`
	Baseline          string        `help:"The policy to compare with, e.g. the one in use (document or worker config)." completion:"<file>"`
	Snapshot          string        `placeholder:"STORE[@VERSION]" help:"Segment snapshot store (directory, file:// or s3://, like segments.source), its LATEST or @version; default: every user in no segment."`
	From              string        `required:"" placeholder:"SRC" help:"The past intents: intents.jsonl[.gz] (decided at created_at) or kafka://TOPIC@FROM..TO (RFC 3339 times; decided at the record timestamps)."`
	Brokers           []string      `placeholder:"HOST:PORT" help:"Kafka brokers (comma-separated), for a kafka:// source."`
	Plans             string        `placeholder:"STORE[@SET]" help:"A plan store (like plans.source): replay --policy first come, first served and with the set's campaign plans, side by side (not with --baseline)."`
	IdempotencyWindow time.Duration `name:"idempotency-window" default:"${idempotency_window}" help:"Duplicates are recognised this long (capping.idempotency_window)."`
	Output            string        `short:"o" enum:"table,json,csv" default:"table" help:"Output format: table, json or csv."`
	Config            string        `type:"existingfile" help:"Worker config: the S3 settings (segments.s3) of --snapshot and --plans; default --policy when it is a worker config." completion:"<file>"`
	s3Flags
}

func (c *replayCmd) Run(e *env) error {
	app.TuneGC() // the records of every user are in the heap
	log, err := e.humanLog()
	if err != nil {
		return err
	}
	var cfg *config.Config
	if c.Config != "" {
		if cfg, err = loadConfig(c.Config); err != nil {
			return err
		}
	} else if pc, err := config.Load(c.Policy); err == nil { // --policy is a worker config
		cfg = pc
	}
	rep, err := app.Replay(e.ctx, app.ReplayOptions{
		Policy: c.Policy, Baseline: c.Baseline, Snapshot: c.Snapshot, Plans: c.Plans, From: c.From, Brokers: c.Brokers,
		IdempotencyWindow: c.IdempotencyWindow, Progress: e.stderr,
		S3: c.options(cfg),
	}, log)
	if err != nil {
		return err
	}
	return rep.Write(e.stdout, c.Output)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; its result is the exit code: 0 ok, 1 failure,
// 2 usage error.
func run(args []string, stdout, stderr io.Writer) int {
	var c commands
	kctx, code, ok := cli.Parse("capper", "Frequency caps for marketing messages.", &c, args, stdout, stderr,
		cli.VersionVars("capper", cli.BuildOf(version, revision)),
		kong.Vars{"idempotency_window": app.DefaultIdempotencyWindow().String()}, cli.DocNotes(clidoc))
	if !ok {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cli.ExitWithUsage("capper", kctx, kctx.Run(&env{ctx: ctx, stdout: stdout, stderr: stderr}), stderr)
}
