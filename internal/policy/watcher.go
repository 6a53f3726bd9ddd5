package policy

// The watcher: keeps the worker's policy in step with its source (a file,
// or a store's LATEST). A new version is read, checked whole and handed to
// Apply; one with any problem is refused and the policy in use keeps
// deciding.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/yamldoc"
)

// Loaded is a policy that passed every check.
type Loaded struct {
	Version  string
	Document *Document
	Rules    capping.Rules
	// Budgets are the document's budgets as the worker paces by them
	// (empty without budgets).
	Budgets *pacing.Set
}

// Load checks a policy's bytes; version names it.
func Load(data []byte, version string) (*Loaded, error) {
	d, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", version, err)
	}
	r, ps := d.Rules()
	budgets, bps := d.Pacing()
	if err := yamldoc.Locate(data, append(ps, bps...)).Err(); err != nil {
		return nil, fmt.Errorf("policy %s:\n%w", version, err)
	}
	return &Loaded{Version: version, Document: d, Rules: r, Budgets: budgets}, nil
}

// WatcherOptions configure NewWatcher. Exactly one of File, Store and
// Fixed is set.
type WatcherOptions struct {
	// File is a policy document's path, read whole at every poll (a
	// Kubernetes ConfigMap update swaps the file under it). Its version
	// is the content's hash.
	File string
	// Store is a policy store: the version LATEST names.
	Store objstore.Store
	// Fixed is a policy that never changes (the deprecated policy inside
	// the worker's config): applied at the first poll, then left alone.
	Fixed *Loaded
	// Interval between polls (required).
	Interval time.Duration
	// Apply makes a checked policy the one in use (required); an error
	// refuses the policy like a failed check.
	Apply func(ctx context.Context, l *Loaded) error
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer receives the watcher's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Now stamps the last check; nil is time.Now.
	Now func() time.Time
}

// Watcher polls the source and applies new versions.
type Watcher struct {
	o   WatcherOptions
	log *slog.Logger

	mu      sync.Mutex // serializes polls; guards etag and refused
	etag    string     // the store's LATEST ETag last read
	refused string     // the version last refused (logged once)
	// refusal is the last poll's failure (nil: it did not fail).
	refusal atomic.Pointer[Refusal]

	current   atomic.Pointer[Loaded]
	loads     atomic.Uint64
	failures  atomic.Uint64
	lastCheck atomic.Int64 // unix ns of the last poll that ended without failure
}

// NewWatcher returns a watcher; nothing is read until Poll or Run.
func NewWatcher(o WatcherOptions) (*Watcher, error) {
	switch {
	case btoi(o.File != "")+btoi(o.Store != nil)+btoi(o.Fixed != nil) != 1:
		return nil, errors.New("policy watcher: set one of a file, a store and a fixed policy")
	case o.Interval <= 0:
		return nil, fmt.Errorf("policy watcher: interval %s must be above 0", o.Interval)
	case o.Apply == nil:
		return nil, errors.New("policy watcher: no Apply")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	w := &Watcher{o: o, log: o.Logger}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if o.Registerer != nil {
		if err := o.Registerer.Register(&watcherCollector{w: w}); err != nil {
			return nil, fmt.Errorf("policy watcher: register metrics: %w", err)
		}
	}
	return w, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Source names where the policy comes from.
func (w *Watcher) Source() string {
	switch {
	case w.o.File != "":
		return w.o.File
	case w.o.Store != nil:
		return w.o.Store.String()
	}
	return "the worker's config (capping section)"
}

// Current is the policy in use (nil before the first successful poll).
func (w *Watcher) Current() *Loaded { return w.current.Load() }

// Run polls every Interval until ctx ends (then it returns nil). A failed
// poll is logged, counted and retried at the next tick.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		_ = w.Poll(ctx) // logged and counted by Poll
	}
}

// Poll reads the source once and applies a new version. A version that
// does not load is refused: counted, logged (once per version; not while
// none is in use: the caller says it) and returned; the policy in use
// stays.
func (w *Watcher) Poll(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	version, err := w.poll(ctx)
	switch {
	case err == nil:
		w.refused = ""
		w.refusal.Store(nil)
		w.lastCheck.Store(w.o.Now().UnixNano())
	case ctx.Err() != nil:
		// Shutting down: not the policy's failure.
	default:
		w.failures.Add(1)
		// With none in use yet, the caller has the error and says it (a
		// worker does not start): there is no policy that keeps deciding.
		if w.current.Load() != nil && (version == "" || version != w.refused) {
			w.log.Error("policy refused; the policy in use keeps deciding",
				"source", w.Source(), "version", version, "in_use", w.current.Load().version(), "err", err)
		}
		w.refused = version
		w.refusal.Store(&Refusal{Version: version, Err: err})
	}
	return err
}

// Refusal is a poll that failed: the version the source holds, refused
// (the worker keeps the one in use), or "" when it could not be read;
// and why.
type Refusal struct {
	Version string
	Err     error
}

// Refused is the last poll's failure; nil when it did not fail.
func (w *Watcher) Refused() *Refusal { return w.refusal.Load() }

func (l *Loaded) version() string {
	if l == nil {
		return ""
	}
	return l.Version
}

// poll returns the version it looked at (when it got that far).
func (w *Watcher) poll(ctx context.Context) (string, error) {
	l := w.o.Fixed
	if l == nil {
		data, version, err := w.read(ctx)
		if err != nil || data == nil {
			return version, err
		}
		if l, err = Load(data, version); err != nil {
			return version, err
		}
	} else if w.current.Load() != nil {
		return l.Version, nil
	}
	version := l.Version
	if err := w.o.Apply(ctx, l); err != nil {
		return version, fmt.Errorf("apply policy %s: %w", version, err)
	}
	prev := w.current.Swap(l)
	w.loads.Add(1)
	w.log.Info("policy loaded", "version", version, "previous", prev.version(), "source", w.Source(),
		"segments", strings.Join(l.Document.SegmentNames(), ","))
	return version, nil
}

// read returns the source's policy, or nil data when it is the one in use.
func (w *Watcher) read(ctx context.Context) (data []byte, version string, err error) {
	cur := w.current.Load().version()
	if w.o.File != "" {
		data, err := os.ReadFile(w.o.File)
		if err != nil {
			return nil, "", fmt.Errorf("read policy: %w", err)
		}
		v := ContentHash(data)
		if v == cur {
			return nil, v, nil
		}
		return data, v, nil
	}
	v, etag, err := latestIfChanged(ctx, w.o.Store, w.etag)
	if errors.Is(err, objstore.ErrNotModified) {
		return nil, cur, nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("read policy: %w", err)
	}
	if v == cur {
		w.etag = etag
		return nil, v, nil
	}
	data, err = ReadVersion(ctx, w.o.Store, v)
	if err != nil {
		return nil, v, err
	}
	// Remembered only now: a refused version is read again at the next
	// poll, so that fixing the store (or a transient read error) is seen.
	w.etag = etag
	return data, v, nil
}

// watcherCollector reads the values at scrape time.
type watcherCollector struct{ w *Watcher }

var (
	policyInfoDesc     = prometheus.NewDesc("capper_policy_info", "The cap policy in use (1 for its version).", []string{"version"}, nil)
	policyLoadsDesc    = prometheus.NewDesc("capper_policy_loads_total", "Policy versions loaded and swapped in (the first one included).", nil, nil)
	policyFailuresDesc = prometheus.NewDesc("capper_policy_load_failures_total", "Polls of the policy source that failed: unreadable, or a policy refused for its problems.", nil, nil)
	policyCheckDesc    = prometheus.NewDesc("capper_policy_last_check_timestamp_seconds", "Unix time of the last poll of the policy source that did not fail.", nil, nil)
)

func (c *watcherCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{policyInfoDesc, policyLoadsDesc, policyFailuresDesc, policyCheckDesc} {
		ch <- d
	}
}

func (c *watcherCollector) Collect(ch chan<- prometheus.Metric) {
	if l := c.w.current.Load(); l != nil {
		ch <- prometheus.MustNewConstMetric(policyInfoDesc, prometheus.GaugeValue, 1, l.Version)
	}
	ch <- prometheus.MustNewConstMetric(policyLoadsDesc, prometheus.CounterValue, float64(c.w.loads.Load()))
	ch <- prometheus.MustNewConstMetric(policyFailuresDesc, prometheus.CounterValue, float64(c.w.failures.Load()))
	var check float64
	if ns := c.w.lastCheck.Load(); ns != 0 {
		check = float64(ns) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(policyCheckDesc, prometheus.GaugeValue, check)
}
