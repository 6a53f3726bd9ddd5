// Command capper-demo runs the whole capper pipeline on one machine with
// nothing installed: a synthetic segment snapshot, an in-process Kafka
// broker and Redis (or a real Redis), a campaign blast decided by the real
// worker and, in the same run, a campaign plan, deferral and quiet hours,
// refunds, a campaign stopped mid-blast and send pacing; a report and an
// independent audit of what it reads back from Kafka (see README.md, "Quick
// start"). It is a binary of its own so that the production capper binary
// does not link the embedded broker and Redis.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/demo"
)

// version and revision are stamped at build time:
// -ldflags "-X main.version=v1.2.3 -X main.revision=<git sha>".
var version, revision = "dev", ""

type flags struct {
	Version   kong.VersionFlag `help:"Print the version, VCS revision and Go version."`
	Users     int              `default:"${users}" help:"Users in the synthetic snapshot."`
	Intents   int              `default:"${intents}" help:"Send-intents in the campaign blast."`
	RedisAddr string           `name:"redis-addr" placeholder:"HOST:PORT" help:"Use this Redis instead of the embedded one (keys under the capper-demo prefix)."`
	Seed      int64            `default:"1" help:"Random seed of the synthetic data."`
	// For capper replay: the blast and the snapshot it was decided with.
	SaveIntents  string `name:"save-intents" placeholder:"FILE" help:"Also write the blast to FILE, one intent per line (gzipped for .gz), for capper replay --from."`
	SaveSnapshot string `name:"save-snapshot" placeholder:"DIR" help:"Publish the snapshot to DIR and keep it, for capper replay --snapshot."`
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole program; its result is the exit code: 0 ok, 1 failure
// (including an audit that found a violation), 2 usage error.
func run(args []string, stdout, stderr io.Writer) int {
	var c flags
	if _, code, ok := cli.Parse("capper-demo", "Run capper end to end on embedded Kafka and Redis, then audit the deliveries.",
		&c, args, stdout, stderr,
		kong.Vars{"users": strconv.Itoa(demo.DefaultUsers), "intents": strconv.Itoa(demo.DefaultIntents)},
		cli.VersionVars("capper-demo", cli.BuildOf(version, revision))); !ok {
		return code
	}
	app.TuneGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo.Run(ctx, demo.Options{
		Users: c.Users, Intents: c.Intents, RedisAddr: c.RedisAddr, Seed: c.Seed,
		SaveIntents: c.SaveIntents, SaveSnapshot: c.SaveSnapshot,
		Out: stdout, Progress: stderr,
	}); err != nil {
		return cli.Exit("capper-demo", err, stderr)
	}
	return cli.ExitOK
}
