package app

// Building the components from the configuration: Redis, the engine, the
// segment store and watcher.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/plans"
	"github.com/capper-dev/capper/internal/policy"
	"github.com/capper-dev/capper/internal/segments"
)

// NewRedisClient connects to Redis as the config says.
func NewRedisClient(cfg *config.Config) (redis.UniversalClient, error) {
	r := cfg.Redis
	tlsCfg, err := r.TLS.Build()
	if err != nil {
		return nil, fmt.Errorf("redis.tls: %w", err)
	}
	c, err := capping.NewClient(capping.ClientOptions{
		Mode:             r.Mode,
		ClientName:       "capper",
		Addrs:            r.Addrs,
		MasterName:       r.MasterName,
		Username:         r.Username,
		Password:         string(r.Password),
		SentinelPassword: string(r.SentinelPassword),
		DB:               r.DB,
		TLS:              tlsCfg,
		DialTimeout:      r.DialTimeout.D(),
		ReadTimeout:      r.ReadTimeout.D(),
		WriteTimeout:     r.WriteTimeout.D(),
		PoolSize:         r.PoolSize,
		MaxRetries:       r.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("redis client: %w", err)
	}
	return c, nil
}

// NewEngine builds the capping engine deciding by pol (and loads its
// script into Redis); now is the decision clock (nil: time.Now).
func NewEngine(ctx context.Context, cfg *config.Config, pol *policy.Loaded, rdb redis.UniversalClient, reg prometheus.Registerer, log *slog.Logger, now func() time.Time) (*capping.Engine, error) {
	c := cfg.Capping
	e, err := capping.New(ctx, capping.Options{
		Client:            rdb,
		Rules:             pol.Rules,
		PolicyVersion:     pol.Version,
		KeyPrefix:         c.KeyPrefix,
		IdempotencyWindow: c.IdempotencyWindow.D(),
		SkewWarn:          c.ClockSkewWarn.D(),
		RefusalCacheSize:  c.RefusalCache.Size,
		RefusalCacheBytes: c.RefusalCache.MaxBytes,
		RefusalCacheTTL:   c.RefusalCache.TTL.D(),
		WaitReplicas:      cfg.Redis.WaitReplicas,
		WaitTimeout:       cfg.Redis.WaitTimeout.D(),
		StallAfter:        stallAfter(&cfg.Redis),
		Registerer:        reg,
		Logger:            log,
		Clock:             now,
	})
	if err != nil {
		if redisFailed(err) {
			return nil, fmt.Errorf("connect to Redis (redis.addrs %v): %w", cfg.Redis.Addrs, err)
		}
		return nil, fmt.Errorf("capping engine: %w", err)
	}
	return e, nil
}

// redisFailed reports whether err is Redis' (out of reach, or an error
// reply) rather than the engine's own.
func redisFailed(err error) bool {
	var ne net.Error
	var re redis.Error
	return errors.As(err, &ne) || errors.As(err, &re) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNREFUSED)
}

// stallAfter is how long calls may wait for Redis before the worker is not
// ready: an attempt longer than the read timeout (go-redis' default 3s when
// unset), plus the WAIT for replicas, has failed.
func stallAfter(r *config.Redis) time.Duration {
	d := cmp.Or(r.ReadTimeout.D(), 3*time.Second)
	if r.WaitReplicas > 0 {
		d += r.WaitTimeout.D()
	}
	return d
}

// startPlans returns the campaign plans' watcher (nil when plans.source is
// empty), its first poll done. A plan store that cannot be read at start
// is not fatal: the worker decides first come, first served (every cap
// holds either way) and the watcher keeps trying; capper_plan_load_failures_total
// counts the failures and the alert on it fires.
func startPlans(ctx context.Context, cfg *config.Config, reg prometheus.Registerer, log *slog.Logger, now func() time.Time) (*plans.Watcher, error) {
	if cfg.Plans.Source == "" {
		return nil, nil
	}
	st, err := openPlanStore(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	w, err := plans.NewWatcher(plans.WatcherOptions{
		Store: st, Interval: cfg.Plans.PollInterval.D(), Logger: log, Registerer: reg, Now: now,
	})
	if err != nil {
		return nil, fmt.Errorf("plan watcher: %w", err)
	}
	if err := w.Poll(ctx); err != nil {
		log.Warn("starting without campaign plans: intents are decided first come, first served until a set loads",
			"source", cfg.Plans.Source, "error", err)
	}
	return w, nil
}

// openPlanStore opens plans.source with segments.s3's settings.
func openPlanStore(ctx context.Context, cfg *config.Config, log *slog.Logger) (objstore.Store, error) {
	s3 := cfg.Segments.S3
	st, err := objstore.Open(ctx, cfg.Plans.Source, objstore.Options{S3: objstore.S3Options{
		Region: s3.Region, Endpoint: s3.Endpoint, UsePathStyle: s3.UsePathStyle, Logger: log,
	}})
	if err != nil {
		return nil, fmt.Errorf("plans.source %s: %w", cfg.Plans.Source, err)
	}
	return st, nil
}

// OpenSegmentStore opens the configured snapshot store; log receives the
// S3 client's own messages (nil discards them).
func OpenSegmentStore(ctx context.Context, cfg *config.Config, log *slog.Logger) (objstore.Store, error) {
	s := cfg.Segments
	st, err := objstore.Open(ctx, s.Source, objstore.Options{S3: objstore.S3Options{
		Region: s.S3.Region, Endpoint: s.S3.Endpoint, UsePathStyle: s.S3.UsePathStyle, Logger: log,
	}})
	if err != nil {
		return nil, fmt.Errorf("segments.source %s: %w", s.Source, err)
	}
	return st, nil
}

// startSegments loads the snapshot and returns its watcher; pol is the
// policy in use, for the warning about segments it has no limits for.
func startSegments(ctx context.Context, cfg *config.Config, cur *segments.Current, pol *policy.Watcher, reg prometheus.Registerer, log *slog.Logger, now func() time.Time) (*segments.Watcher, error) {
	st, err := OpenSegmentStore(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	w, err := segments.NewWatcher(segments.WatcherOptions{
		Store:    st,
		Current:  cur,
		Interval: cfg.Segments.PollInterval.D(),
		// A segment without a policy is not a reason to refuse a
		// snapshot (segments and policy change independently): it is
		// reported, and its users get default_policy.
		Accept: func(s *segments.Snapshot) error {
			warnUnpoliced(log, s, pol.Current())
			return nil
		},
		Logger:     log,
		Registerer: reg,
		Now:        now,
	})
	if err != nil {
		return nil, fmt.Errorf("segment watcher: %w", err)
	}
	// The start-up load is the watcher's first poll, so that it is counted
	// (capper_snapshot_loads_total or _load_failures_total) like any other.
	switch err := w.Poll(ctx); {
	case err == nil:
	case cfg.Segments.Required:
		return nil, snapshotError(cfg.Segments.Source, err)
	default:
		log.Warn("starting without a segment snapshot: every user gets the default policy until one loads",
			"source", cfg.Segments.Source, "error", err)
	}
	return w, nil
}

// snapshotError says what to fix when the worker cannot start without a
// snapshot: a bucket that is not there is a typo in segments.source (not a
// reason to start without snapshots); an empty store needs one published.
func snapshotError(source string, err error) error {
	switch {
	case errors.Is(err, objstore.ErrNoSuchBucket):
		return fmt.Errorf("segments.source %s: the bucket does not exist or is not reachable: check segments.source (and segments.s3.endpoint): %w", source, err)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("segments.source %s: no snapshot there: run segment-builder --config with this config to publish a snapshot first, or check segments.source: %w", source, err)
	}
	return fmt.Errorf("no usable segment snapshot at %s (segments.source; set segments.required: false to start without one): %w", source, err)
}
