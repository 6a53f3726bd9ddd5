package app

// `capper migrate`: the first version's keys into records, offline.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
)

// MigrateOptions say what `capper migrate` does.
type MigrateOptions struct {
	FromPrefix string // the first version's key prefix; "" = capping.key_prefix
	DryRun     bool
	Progress   io.Writer // a line every few seconds; nil: none
	Now        func() time.Time
}

// Migrate converts the first version's sorted sets into this version's
// records (see capping.Engine.MigrateV1). The workers must be stopped.
func Migrate(ctx context.Context, cfg *config.Config, o MigrateOptions, log *slog.Logger) (capping.MigrateReport, error) {
	if o.FromPrefix == "" {
		o.FromPrefix = cfg.Capping.KeyPrefix
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	pol, err := LoadPolicy(ctx, cfg, log)
	if err != nil {
		return capping.MigrateReport{}, err
	}
	rdb, err := NewRedisClient(cfg)
	if err != nil {
		return capping.MigrateReport{}, err
	}
	defer rdb.Close()
	engine, err := NewEngine(ctx, cfg, pol, rdb, prometheus.NewRegistry(), log, nil)
	if err != nil {
		return capping.MigrateReport{}, err
	}
	last := time.Now()
	rep, err := engine.MigrateV1(ctx, capping.MigrateOptions{FromPrefix: o.FromPrefix, At: o.Now(), DryRun: o.DryRun,
		Progress: func(r capping.MigrateReport) {
			if o.Progress != nil && time.Since(last) > 3*time.Second {
				fmt.Fprintf(o.Progress, "  %d users read, %d records\n", r.Users, r.Migrated)
				last = time.Now()
			}
		}})
	if err != nil {
		return rep, fmt.Errorf("migrate: %w", err)
	}
	return rep, nil
}

// WriteMigrateReport prints a migration report for a human.
func WriteMigrateReport(w io.Writer, rep capping.MigrateReport, dryRun bool) {
	verb := "written"
	if dryRun {
		verb = "that would be written (dry run)"
	}
	list := func(l []string) string {
		if len(l) == 0 {
			return "none"
		}
		return strings.Join(l, "; ")
	}
	fmt.Fprintf(w, "users of the first version found: %d\n", rep.Users)
	fmt.Fprintf(w, "records %s: %d (%d idempotency entries, %d sends; users with nothing left in any window are skipped)\n",
		verb, rep.Migrated, rep.IdemEntries, rep.Sends)
	fmt.Fprintf(w, "scopes filled from the user logs: %s\n", list(rep.FromLog))
	fmt.Fprintf(w, "scopes filled from channel logs: %s\n", list(rep.FromChannel))
	fmt.Fprintf(w, "scopes starting empty (the first version did not record them): %s\n", list(rep.Empty))
	if rep.WindowKeys > 0 {
		fmt.Fprintf(w, "sliding_window keys left alone (their counters are not sends): %d\n", rep.WindowKeys)
	}
}
