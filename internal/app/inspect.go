package app

// `capper inspect`: a user's segment and caps, read-only.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/segments"
)

// Inspect prints a user's segment and, for each limit of its policy, the
// current count and when the next slot frees. It writes nothing to Redis.
func Inspect(ctx context.Context, cfg *config.Config, userID uint64, w io.Writer) error {
	st, err := OpenSegmentStore(ctx, cfg)
	if err != nil {
		return err
	}
	snap, err := segments.Load(ctx, st, segments.LoadOptions{Accept: acceptSnapshot(cfg)})
	if err != nil {
		if cfg.Segments.Required {
			return fmt.Errorf("load segment snapshot: %w", err)
		}
		snap = nil // as the worker would: everyone in no segment
	}
	rdb, err := NewRedisClient(cfg)
	if err != nil {
		return err
	}
	defer rdb.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	engine, err := NewEngine(ctx, cfg, rdb, prometheus.NewRegistry(), quiet)
	if err != nil {
		return err
	}
	now := time.Now()
	segment := snap.Lookup(userID)
	states, err := engine.Inspect(ctx, userID, segment, now)
	if err != nil {
		return fmt.Errorf("inspect user %d: %w", userID, err)
	}
	version := snap.Version()
	if version == "" {
		version = "none loaded"
	}
	fmt.Fprintf(w, "user      %d\nsegment   %s (snapshot %s)\nalgorithm %s\n\n", userID, segment, version, cfg.Capping.Algorithm)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT\tWINDOW\tCHANNEL\tCOUNT\tMAX\tNEXT SLOT FREE")
	for _, s := range states {
		ch := s.Limit.Channel
		if ch == "" {
			ch = "any"
		}
		next := "now"
		if s.Limit.Max == 0 {
			next = "never (max 0)"
		} else if s.NextFree.After(now) {
			next = fmt.Sprintf("%s (in %s)", s.NextFree.UTC().Format(time.RFC3339), s.NextFree.Sub(now).Round(time.Second))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", s.Limit.Name, config.Duration(s.Limit.Window).String(), ch, s.Count, s.Limit.Max, next)
	}
	return tw.Flush()
}
