package plans

// The watcher: polls the plan store's LATEST, loads a new set and swaps it
// in. A set that fails to load (a plan whose audience does not verify, say)
// never replaces the one in use: it is counted, logged, and tried again at
// the next poll.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/capper-dev/capper/internal/objstore"
)

// WatcherOptions configure NewWatcher.
type WatcherOptions struct {
	Store    objstore.Store // required
	Current  *Current       // receives each set; nil: the watcher makes one
	Interval time.Duration  // between polls (required: plans.poll_interval)
	Logger   *slog.Logger
	// Registerer receives the watcher's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	Now        func() time.Time // the clock of the active count; nil: time.Now
}

// Watcher keeps Current up to date with the store's LATEST.
type Watcher struct {
	o       WatcherOptions
	current *Current
	etag    string // of the LATEST whose set is in use

	active    prometheus.GaugeFunc
	loads     prometheus.Counter
	failures  prometheus.Counter
	lastCheck prometheus.Gauge
}

// NewWatcher returns a watcher; it loads nothing until Poll or Run.
func NewWatcher(o WatcherOptions) (*Watcher, error) {
	if o.Store == nil {
		return nil, errors.New("plan watcher: no store")
	}
	if o.Interval <= 0 {
		return nil, fmt.Errorf("plan watcher: interval %s must be above 0", o.Interval)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	w := &Watcher{o: o, current: o.Current}
	if w.current == nil {
		w.current = &Current{}
	}
	f := promauto.With(o.Registerer)
	w.active = f.NewGaugeFunc(prometheus.GaugeOpts{Name: "capper_plans_active",
		Help: "Campaign plans in use whose window has not ended."}, func() float64 {
		n, now := 0, w.o.Now()
		for _, p := range w.current.Load().Plans() {
			if now.Before(p.Ends) {
				n++
			}
		}
		return float64(n)
	})
	f.NewGaugeFunc(prometheus.GaugeOpts{Name: "capper_plans_memory_bytes",
		Help: "Memory the audiences of the plans in use take (their membership index)."}, func() float64 {
		return float64(w.current.Load().Bytes())
	})
	w.loads = f.NewCounter(prometheus.CounterOpts{Name: "capper_plan_loads_total", Help: "Sets of campaign plans loaded and swapped in."})
	w.failures = f.NewCounter(prometheus.CounterOpts{Name: "capper_plan_load_failures_total",
		Help: "Polls of the plan store that failed (unreadable, or a plan that did not verify); the set in use stays."})
	w.lastCheck = f.NewGauge(prometheus.GaugeOpts{Name: "capper_plans_last_check_timestamp_seconds",
		Help: "When the plan store was last read successfully."})
	return w, nil
}

// Current is the set in use.
func (w *Watcher) Current() *Current { return w.current }

// Run polls now and then every Interval until ctx ends (then nil).
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.o.Interval)
	defer t.Stop()
	for {
		if err := w.Poll(ctx); err != nil && ctx.Err() == nil {
			w.o.Logger.Warn("campaign plans not updated; the set in use stays", "plans", w.current.Load().Version(), "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Poll checks LATEST once (one conditional request when it did not
// change) and loads and swaps in a new set.
func (w *Watcher) Poll(ctx context.Context) error {
	err := w.poll(ctx)
	switch {
	case err == nil:
		w.lastCheck.Set(float64(w.o.Now().Unix()))
	case ctx.Err() == nil:
		w.failures.Inc()
	}
	return err
}

func (w *Watcher) poll(ctx context.Context) error {
	data, etag, err := w.o.Store.GetIfChanged(ctx, LatestKey, w.etag)
	switch {
	case errors.Is(err, objstore.ErrNotModified):
		// Ended plans leave memory without a new set.
		if cur := w.current.Load(); cur != nil {
			if s := cur.withoutEnded(w.o.Now()); s != cur {
				w.current.Store(s)
			}
		}
		return nil
	case isNotExist(err):
		return nil // no plan published yet: none active
	case err != nil:
		return fmt.Errorf("read %s of %s: %w", LatestKey, w.o.Store, err)
	}
	idx, err := readIndex(ctx, w.o.Store, trim(data))
	if err != nil {
		return err
	}
	s, err := loadIndex(ctx, w.o.Store, idx, w.current.Load(), w.o.Now())
	if err != nil {
		return err
	}
	w.current.Store(s)
	w.etag = etag
	w.loads.Inc()
	w.o.Logger.Info("campaign plans loaded", "plans", s.Version(), "count", len(s.plans))
	return nil
}
