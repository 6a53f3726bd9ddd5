package app

// `capper inspect`: a user's segment and caps, read-only.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/segments"
)

// Inspection is a user's segment and, for each limit of its policy, the
// current count and when the next slot frees, as of At.
type Inspection struct {
	User      uint64
	Segment   string
	Snapshot  string // "" when none is loaded
	Algorithm string
	At        time.Time
	Limits    []capping.LimitState
}

// Inspect reads a user's segment and caps; it writes nothing to Redis. log
// receives the S3 client's and the engine's messages (nil discards them).
func Inspect(ctx context.Context, cfg *config.Config, userID uint64, log *slog.Logger) (*Inspection, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	st, err := OpenSegmentStore(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	snap, err := segments.Load(ctx, st, segments.LoadOptions{Accept: acceptSnapshot(cfg)})
	if err != nil {
		if cfg.Segments.Required {
			return nil, fmt.Errorf("load segment snapshot: %w", err)
		}
		snap = nil // as the worker would: everyone in no segment
	}
	rdb, err := NewRedisClient(cfg)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	engine, err := NewEngine(ctx, cfg, rdb, prometheus.NewRegistry(), log)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	segment := snap.Lookup(userID)
	states, err := engine.Inspect(ctx, userID, segment, now)
	if err != nil {
		return nil, fmt.Errorf("inspect user %d: %w", userID, err)
	}
	return &Inspection{
		User: userID, Segment: segment, Snapshot: snap.Version(), Algorithm: cfg.Capping.Algorithm,
		At: now, Limits: states,
	}, nil
}

// WriteTable prints the inspection for a human.
func (in *Inspection) WriteTable(w io.Writer) error {
	version := in.Snapshot
	if version == "" {
		version = "none loaded"
	}
	fmt.Fprintf(w, "user      %d\nsegment   %s (snapshot %s)\nalgorithm %s\n\n", in.User, in.Segment, version, in.Algorithm)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT\tWINDOW\tCHANNEL\tCOUNT\tMAX\tNEXT SLOT FREE")
	for _, s := range in.Limits {
		ch := s.Limit.Channel
		if ch == "" {
			ch = "any"
		}
		next := "now"
		if s.Limit.Max == 0 {
			next = "never (max 0)"
		} else if s.NextFree.After(in.At) {
			next = fmt.Sprintf("%s (in %s)", s.NextFree.UTC().Format(time.RFC3339), s.NextFree.Sub(in.At).Round(time.Second))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", s.Limit.Name, config.Duration(s.Limit.Window).String(), ch, s.Count, s.Limit.Max, next)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("print inspection: %w", err)
	}
	return nil
}

// inspectionJSON is the JSON form of an Inspection (`capper inspect -o
// json`). Times are RFC 3339 in UTC with milliseconds.
type inspectionJSON struct {
	User      uint64      `json:"user"`
	Segment   string      `json:"segment"`
	Snapshot  *string     `json:"snapshot"` // null: none loaded
	Algorithm string      `json:"algorithm"`
	At        string      `json:"at"`
	Limits    []limitJSON `json:"limits"`
}

type limitJSON struct {
	Name     string  `json:"name"`
	Window   string  `json:"window"`  // as the config writes it: "30m", "1d", "7d"
	Channel  *string `json:"channel"` // null: every channel
	Count    int64   `json:"count"`
	Max      int     `json:"max"`
	NextFree *string `json:"next_free"` // null: never (max 0); At when a slot is free now
}

// rfc3339ms is the format of every time in the JSON form.
const rfc3339ms = "2006-01-02T15:04:05.000Z07:00"

// WriteJSON prints the inspection as one JSON document.
func (in *Inspection) WriteJSON(w io.Writer) error {
	out := inspectionJSON{
		User: in.User, Segment: in.Segment, Algorithm: in.Algorithm,
		At: in.At.UTC().Format(rfc3339ms), Limits: []limitJSON{},
	}
	if in.Snapshot != "" {
		out.Snapshot = &in.Snapshot
	}
	for _, s := range in.Limits {
		l := limitJSON{
			Name: s.Limit.Name, Window: config.Duration(s.Limit.Window).String(),
			Count: s.Count, Max: s.Limit.Max,
		}
		if s.Limit.Channel != "" {
			ch := s.Limit.Channel
			l.Channel = &ch
		}
		if s.Limit.Max > 0 && !s.NextFree.IsZero() {
			next := s.NextFree
			if next.Before(in.At) {
				next = in.At
			}
			t := next.UTC().Format(rfc3339ms)
			l.NextFree = &t
		}
		out.Limits = append(out.Limits, l)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("print inspection: %w", err)
	}
	return nil
}
