package app

// The cap policy's source: a file or a store, watched, or the deprecated
// policy inside the config; and the segments a policy leaves to
// default_policy.

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/policy"
	"github.com/capper-dev/capper/internal/segments"
)

// newPolicyWatcher builds the watcher of cfg's policy source; apply
// receives each new version.
func newPolicyWatcher(ctx context.Context, cfg *config.Config, apply func(context.Context, *policy.Loaded) error,
	reg prometheus.Registerer, log *slog.Logger, now func() time.Time) (*policy.Watcher, error) {
	o := policy.WatcherOptions{Interval: cfg.Policy.PollInterval.D(), Apply: apply, Logger: log, Registerer: reg, Now: now}
	switch src := cfg.Policy.Source; {
	case src == "":
		l, err := inlinePolicy(cfg)
		if err != nil {
			return nil, err
		}
		o.Fixed = l
	case cfg.Policy.IsFile():
		path, err := cfg.PolicyFile()
		if err != nil {
			return nil, err
		}
		o.File = path
	default:
		s3 := cfg.Segments.S3
		st, err := objstore.Open(ctx, src, objstore.Options{S3: objstore.S3Options{
			Region: s3.Region, Endpoint: s3.Endpoint, UsePathStyle: s3.UsePathStyle, Logger: log,
		}})
		if err != nil {
			return nil, fmt.Errorf("policy.source %s: %w", src, err)
		}
		o.Store = st
	}
	w, err := policy.NewWatcher(o)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// inlinePolicy is the policy under capping (deprecated), named by the hash
// of its effective form.
func inlinePolicy(cfg *config.Config) (*policy.Loaded, error) {
	d := cfg.Capping.Document
	data, err := yaml.Marshal(&d)
	if err != nil {
		return nil, fmt.Errorf("inline policy: %w", err)
	}
	return &policy.Loaded{Version: "inline-" + policy.ContentHash(data), Document: &d, Rules: cfg.Rules(), Budgets: d.PacingSet()}, nil
}

// LoadPolicy reads the policy cfg's workers use, once (inspect, migrate).
func LoadPolicy(ctx context.Context, cfg *config.Config, log *slog.Logger) (*policy.Loaded, error) {
	w, err := newPolicyWatcher(ctx, cfg, func(context.Context, *policy.Loaded) error { return nil }, nil, log, time.Now)
	if err != nil {
		return nil, err
	}
	if err := w.Poll(ctx); err != nil {
		return nil, fmt.Errorf("no usable cap policy from %s: %w", w.Source(), err)
	}
	return w.Current(), nil
}

// unpoliced lists the snapshot's segments the policy has no limits for:
// their users get default_policy.
func unpoliced(s *segments.Snapshot, l *policy.Loaded) []segments.SegmentInfo {
	if s == nil || l == nil {
		return nil
	}
	names := l.Document.SegmentNames()
	var out []segments.SegmentInfo
	for _, seg := range s.Segments() {
		if !slices.Contains(names, seg.Name) {
			out = append(out, seg)
		}
	}
	return out
}

// warnUnpoliced logs the segments that get default_policy.
func warnUnpoliced(log *slog.Logger, s *segments.Snapshot, l *policy.Loaded) {
	for _, seg := range unpoliced(s, l) {
		log.Warn("segment has no policy: its users get default_policy", "segment", seg.Name, "users", seg.Users,
			"snapshot", s.Version(), "policy", l.Version)
	}
}

// unpolicedCollector exports, at scrape time, the users of the snapshot's
// segments that get default_policy.
type unpolicedCollector struct {
	snap   *segments.Current
	policy *policy.Watcher
}

var unpolicedDesc = prometheus.NewDesc("capper_segment_default_policy_users",
	"Users of a snapshot segment that the policy in use has no limits for: they get default_policy.", []string{"segment"}, nil)

func (c unpolicedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- unpolicedDesc }

func (c unpolicedCollector) Collect(ch chan<- prometheus.Metric) {
	for _, seg := range unpoliced(c.snap.Load(), c.policy.Current()) {
		ch <- prometheus.MustNewConstMetric(unpolicedDesc, prometheus.GaugeValue, float64(seg.Users), seg.Name)
	}
}
