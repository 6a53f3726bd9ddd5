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
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/config"
)

// version is stamped at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

type commands struct {
	Run         runCmd         `cmd:"" help:"Run the worker (consume, decide, forward)."`
	CheckConfig checkConfigCmd `cmd:"" name:"check-config" help:"Validate a config file and print the effective config, secrets masked."`
	Inspect     inspectCmd     `cmd:"" help:"Show a user's segment and caps (read-only)."`
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
	app.TuneGC()
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
	var c commands
	kctx, code, ok := cli.Parse("capper", "Frequency caps for marketing messages.", &c, args, stdout, stderr)
	if !ok {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := kctx.Run(&env{ctx: ctx, stdout: stdout, stderr: stderr}); err != nil {
		var exit interface{ ExitCode() int }
		fmt.Fprintln(stderr, "capper:", err)
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		return cli.ExitFailure
	}
	return cli.ExitOK
}
