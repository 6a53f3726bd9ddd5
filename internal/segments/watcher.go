package segments

// The watcher: polls LATEST, loads and swaps new versions in.

import (
	"github.com/capper-dev/capper/internal/objstore"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// WatcherOptions configures a Watcher.
type WatcherOptions struct {
	Store objstore.Store // required
	// Current receives each loaded snapshot; nil: the watcher makes one.
	Current *Current
	// Interval between polls (required: segments.poll_interval).
	Interval time.Duration
	// Accept is passed to LoadOptions: a rejected snapshot is a failed load.
	Accept func(*Snapshot) error
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer receives the watcher's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Now is the clock for the snapshot age; default time.Now.
	Now func() time.Time
}

// Watcher keeps Current up to date with the store's LATEST: it polls LATEST
// with a conditional request, loads a new version and swaps it in whole. A
// failed load keeps the current snapshot, is counted and reported, and is
// retried at the next poll.
type Watcher struct {
	st       objstore.Store
	current  *Current
	interval time.Duration
	accept   func(*Snapshot) error
	log      *slog.Logger
	now      func() time.Time

	mu   sync.Mutex // serializes polls; guards etag
	etag string     // ETag of the LATEST whose version is in current

	loads     atomic.Uint64
	failures  atomic.Uint64
	lastCheck atomic.Int64 // unix nanoseconds of the last successful poll
}

// NewWatcher returns a watcher; it loads nothing until Poll or Run.
func NewWatcher(opts WatcherOptions) (*Watcher, error) {
	if opts.Store == nil {
		return nil, errors.New("segment watcher: no store")
	}
	if opts.Interval <= 0 {
		return nil, fmt.Errorf("segment watcher: interval %s must be above 0", opts.Interval)
	}
	w := &Watcher{
		st: opts.Store, current: opts.Current, interval: opts.Interval,
		accept: opts.Accept, log: opts.Logger, now: opts.Now,
	}
	if w.current == nil {
		w.current = &Current{}
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.now == nil {
		w.now = time.Now
	}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(newWatcherCollector(w)); err != nil {
			return nil, fmt.Errorf("segment watcher: register metrics: %w", err)
		}
	}
	return w, nil
}

// Run polls now and then every Interval until ctx is done; it returns nil
// then. Failures are logged and retried at the next tick.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		if err := w.Poll(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("segment snapshot not updated; serving the current one",
				"current_version", w.current.Load().Version(), "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Poll checks LATEST once and, when it names another version, loads and
// verifies that version and swaps it in. An unchanged LATEST costs one
// conditional request and nothing else.
func (w *Watcher) Poll(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.poll(ctx)
	switch {
	case err == nil:
		w.lastCheck.Store(w.now().UnixNano())
	case ctx.Err() != nil:
		// Shutting down: not a failure of the snapshot.
	default:
		w.failures.Add(1)
	}
	return err
}

func (w *Watcher) poll(ctx context.Context) error {
	version, etag, err := readLatest(ctx, w.st, w.etag)
	if errors.Is(err, objstore.ErrNotModified) {
		return nil
	}
	if err != nil {
		return err
	}
	if cur := w.current.Load(); cur != nil && cur.Version() == version {
		// Rewritten with the same content, or someone else stored it.
		w.etag = etag
		return nil
	}
	s, err := LoadVersion(ctx, w.st, version, LoadOptions{Accept: w.accept})
	if err != nil {
		// w.etag stays: the next poll reads LATEST again and retries.
		return err
	}
	prev := w.current.Load()
	w.current.Store(s)
	w.etag = etag
	w.loads.Add(1)
	w.log.Info("segment snapshot loaded", "version", s.Version(), "previous", prev.Version(),
		"users", s.Users(), "id_bits", s.IDBits(), "created_at", s.CreatedAt())
	return nil
}

// watcherCollector reads the values at scrape time, so they always describe
// the snapshot in use.
type watcherCollector struct {
	w                                        *Watcher
	info, age, users, failures, loads, check *prometheus.Desc
}

func newWatcherCollector(w *Watcher) *watcherCollector {
	return &watcherCollector{
		w:        w,
		info:     prometheus.NewDesc("capper_snapshot_info", "The segment snapshot in use (1 for its version).", []string{"version"}, nil),
		age:      prometheus.NewDesc("capper_snapshot_age_seconds", "Seconds since the snapshot in use was created (manifest created_at).", nil, nil),
		users:    prometheus.NewDesc("capper_snapshot_users", "Users per segment in the snapshot in use.", []string{"segment"}, nil),
		failures: prometheus.NewDesc("capper_snapshot_load_failures_total", "Polls that failed to read LATEST or to load the version it names.", nil, nil),
		loads:    prometheus.NewDesc("capper_snapshot_loads_total", "Snapshots loaded and swapped in.", nil, nil),
		check:    prometheus.NewDesc("capper_snapshot_last_check_timestamp_seconds", "Unix time of the last successful poll of LATEST.", nil, nil),
	}
}

func (c *watcherCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.info, c.age, c.users, c.failures, c.loads, c.check} {
		ch <- d
	}
}

func (c *watcherCollector) Collect(ch chan<- prometheus.Metric) {
	if s := c.w.current.Load(); s != nil {
		ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, s.Version())
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, c.w.now().Sub(s.CreatedAt()).Seconds())
		for _, in := range s.infos {
			ch <- prometheus.MustNewConstMetric(c.users, prometheus.GaugeValue, float64(in.Users), in.Name)
		}
	}
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(c.w.failures.Load()))
	ch <- prometheus.MustNewConstMetric(c.loads, prometheus.CounterValue, float64(c.w.loads.Load()))
	var check float64
	if ns := c.w.lastCheck.Load(); ns != 0 {
		check = float64(ns) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(c.check, prometheus.GaugeValue, check)
}
