// Command capper is the frequency-capping worker: it consumes send-intents
// from Kafka, checks each user's caps in Redis and forwards only the allowed
// intents (see README.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/alecthomas/kong"
	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/demo"
)

// version is stamped at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

type cli struct {
	Run         runCmd         `cmd:"" help:"Run the worker (consume, decide, forward)."`
	CheckConfig checkConfigCmd `cmd:"" name:"check-config" help:"Validate a config file and print the effective config, secrets masked."`
	Inspect     inspectCmd     `cmd:"" help:"Show a user's segment and caps (read-only)."`
	Demo        demoCmd        `cmd:"" help:"Run the whole pipeline in-process on embedded Kafka and Redis, then audit it."`
	Version     versionCmd     `cmd:"" help:"Print the version."`
}

type env struct {
	ctx            context.Context
	stdout, stderr io.Writer
}

type runCmd struct {
	Config string `required:"" type:"existingfile" help:"Config file (see configs/capper.yaml)."`
}

func (c *runCmd) Run(e *env) error {
	setGCPercent()
	cfg, err := config.Load(c.Config)
	if err != nil {
		return err
	}
	log, err := app.NewLogger(e.stderr, cfg.Log)
	if err != nil {
		return err
	}
	redis.SetLogger(app.RedisLogger(log)) // go-redis has one process-wide logger
	return app.Run(e.ctx, app.Options{Config: cfg, Logger: log, Version: version})
}

type checkConfigCmd struct {
	Config string `required:"" type:"existingfile" help:"Config file to check."`
}

func (c *checkConfigCmd) Run(e *env) error {
	cfg, err := config.Load(c.Config)
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
	fmt.Fprintf(e.stderr, "%s: ok\n", c.Config)
	_, err = e.stdout.Write(out)
	return err
}

type inspectCmd struct {
	Config string `required:"" type:"existingfile" help:"Config file (Redis, snapshot store, policies)."`
	User   uint64 `required:"" help:"User id."`
}

func (c *inspectCmd) Run(e *env) error {
	cfg, err := config.Load(c.Config)
	if err != nil {
		return err
	}
	return app.Inspect(e.ctx, cfg, c.User, e.stdout)
}

type demoCmd struct {
	Users     int    `default:"20000" help:"Users in the synthetic snapshot."`
	Intents   int    `default:"40000" help:"Send-intents in the campaign blast."`
	RedisAddr string `name:"redis-addr" placeholder:"HOST:PORT" help:"Use this Redis instead of the embedded one."`
	Seed      int64  `default:"1" help:"Random seed of the synthetic data."`
}

func (c *demoCmd) Run(e *env) error {
	setGCPercent()
	return demo.Run(e.ctx, demo.Options{
		Users: c.Users, Intents: c.Intents, RedisAddr: c.RedisAddr, Seed: c.Seed,
		Out: e.stdout, Progress: e.stderr,
	})
}

// setGCPercent makes GOGC=200 the default of the worker. Its live heap is
// small (the snapshot and two batches) and its allocation rate high, so with
// Go's default of 100 it spends about a fifth of its CPU in the garbage
// collector; 200 cuts that by about a third for a few MiB of heap. GOGC in
// the environment wins (and GOMEMLIMIT still bounds the heap).
func setGCPercent() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(200)
	}
}

type versionCmd struct{}

func (versionCmd) Run(e *env) error {
	_, err := fmt.Fprintf(e.stdout, "capper %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return err
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; its result is the exit code: 0 ok, 1 failure,
// 2 usage error.
func run(args []string, stdout, stderr io.Writer) int {
	var c cli
	exitCode := -1
	parser, err := kong.New(&c,
		kong.Name("capper"),
		kong.Description("Frequency caps for marketing messages."),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { exitCode = code }), // --help: exit after parsing, not inside kong
		kong.UsageOnError(),
	)
	if err != nil {
		fmt.Fprintln(stderr, "capper:", err)
		return 2
	}
	kctx, err := parser.Parse(args)
	if exitCode >= 0 {
		return exitCode
	}
	if err != nil {
		fmt.Fprintln(stderr, "capper:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := kctx.Run(&env{ctx: ctx, stdout: stdout, stderr: stderr}); err != nil {
		var exit interface{ ExitCode() int }
		fmt.Fprintln(stderr, "capper:", err)
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		return 1
	}
	return 0
}
