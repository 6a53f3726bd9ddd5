package control

// The follower: every worker reads the whole control topic, outside the
// consumer group (every worker needs every record): at start to its end,
// before the first decision, then live. A malformed record is logged,
// counted and skipped: the key keeps its previous state, so nothing
// written by something else can turn a stop into nothing.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Message is a record of the control topic as a Source reads it.
type Message struct {
	Partition     int
	Offset        int64
	HighWaterMark int64 // the partition's end when it was read
	Key, Value    []byte
}

// Source reads the control topic (defined here, implemented on kafka-go
// by internal/dispatch).
type Source interface {
	// Ends is each partition's end offset now.
	Ends(ctx context.Context) (map[int]int64, error)
	// Read blocks for the next record of partition at or after offset.
	Read(ctx context.Context, partition int, offset int64) (Message, error)
}

// FollowerOptions configure NewFollower.
type FollowerOptions struct {
	Source     Source
	Topic      string // for positions and logs
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Now        func() time.Time // when a record is applied (the decision clock)
}

// Follower keeps the control state current. It is an actor: Run reads
// until its context ends; Load and Ready may be called at any time.
type Follower struct {
	o       FollowerOptions
	current atomic.Pointer[Snapshot]
	ready   chan struct{} // closed once the topic was read to its end
	m       followerMetrics

	mu        sync.Mutex // the state being built
	campaigns map[string]*Entry
	all       *Entry
	ends      map[int]int64 // at start
	read      map[int]int64 // the last offset applied, per partition
}

type followerMetrics struct {
	applied, lag       *prometheus.GaugeVec
	appliedAt          prometheus.Gauge
	campaigns          *prometheus.GaugeVec
	malformed, readErr prometheus.Counter
}

// NewFollower registers the follower's metrics.
func NewFollower(o FollowerOptions) *Follower {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	f := promauto.With(o.Registerer)
	fl := &Follower{o: o, ready: make(chan struct{}), campaigns: map[string]*Entry{}, read: map[int]int64{}, m: followerMetrics{
		applied: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "capper_control_applied_offset",
			Help: "The offset of the last control record this worker applied, per partition of the control topic.",
		}, []string{"partition"}),
		lag: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "capper_control_lag",
			Help: "Control records written but not yet applied by this worker, per partition (as of its last read).",
		}, []string{"partition"}),
		appliedAt: f.NewGauge(prometheus.GaugeOpts{
			Name: "capper_control_applied_timestamp_seconds",
			Help: "When this worker applied its last control record (its decision clock, Unix seconds).",
		}),
		campaigns: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "capper_control_campaigns",
			Help: "Campaigns per state in this worker's control state (stopped, paused, active: resumed after a record).",
		}, []string{"state"}),
		malformed: f.NewCounter(prometheus.CounterOpts{
			Name: "capper_control_malformed_records_total",
			Help: "Control records that could not be read (skipped: their key keeps its previous state).",
		}),
		readErr: f.NewCounter(prometheus.CounterOpts{
			Name: "capper_control_read_errors_total",
			Help: "Failed reads of the control topic (retried; the state in use stays).",
		}),
	}}
	for _, s := range stateNames {
		fl.m.campaigns.WithLabelValues(s)
	}
	return fl
}

// Load is the state now (nil before the topic was read to its end).
func (f *Follower) Load() *Snapshot { return f.current.Load() }

// Ready is nil once the topic was read to its end.
func (f *Follower) Ready() error {
	select {
	case <-f.ready:
		return nil
	default:
		return errors.New("control: the control topic " + f.o.Topic + " is not read to its end yet")
	}
}

// Wait blocks until the topic was read to its end, or ctx ends.
func (f *Follower) Wait(ctx context.Context) error {
	select {
	case <-f.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run reads every partition until ctx ends; it returns nil then. A failed
// read is counted, logged and retried.
func (f *Follower) Run(ctx context.Context) error {
	for {
		ends, err := f.o.Source.Ends(ctx)
		if err == nil {
			f.mu.Lock()
			f.ends = ends
			f.mu.Unlock()
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		f.readError(err)
		sleep(ctx, time.Second)
	}
	var wg sync.WaitGroup
	caught := make(chan int, len(f.ends))
	for p, end := range f.ends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.follow(ctx, p, end, caught)
		}()
	}
	for range f.ends {
		select {
		case <-caught:
		case <-ctx.Done():
			wg.Wait()
			return nil
		}
	}
	f.publish()
	close(f.ready)
	f.o.Logger.Info("control topic read to its end", "topic", f.o.Topic, "campaigns", len(f.Load().campaigns),
		"stopped", f.Load().Count(Stopped), "paused", f.Load().Count(Paused))
	wg.Wait()
	return nil
}

// follow reads partition p from its start; once past end it says so on
// caught, and from then on publishes what it applies.
func (f *Follower) follow(ctx context.Context, p int, end int64, caught chan<- int) {
	label := strconv.Itoa(p)
	f.m.lag.WithLabelValues(label).Set(float64(end))
	next, live := int64(0), false
	if next >= end {
		caught <- p
		live = true
	}
	for ctx.Err() == nil {
		m, err := f.o.Source.Read(ctx, p, next)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.readError(err)
			sleep(ctx, time.Second)
			continue
		}
		f.apply(m)
		next = m.Offset + 1
		f.m.lag.WithLabelValues(label).Set(float64(max(m.HighWaterMark-next, 0)))
		switch {
		case !live && next >= end:
			live = true
			caught <- p
		case live && next >= m.HighWaterMark:
			// Publish once the partition holds no more: a burst of
			// records costs one copy of the state.
			f.publish()
		}
	}
}

func (f *Follower) readError(err error) {
	f.m.readErr.Inc()
	f.o.Logger.Warn("cannot read the control topic; the state in use stays", "topic", f.o.Topic, "error", err)
}

// apply takes a record into the state being built.
func (f *Follower) apply(m Message) {
	f.mu.Lock()
	f.read[m.Partition] = m.Offset // applied, malformed or not
	f.mu.Unlock()
	pos := Position{Topic: f.o.Topic, Partition: m.Partition, Offset: m.Offset}
	r, err := Parse(m.Key, m.Value)
	if err != nil {
		f.m.malformed.Inc()
		f.o.Logger.Error("control record skipped: its key keeps its previous state", "position", pos.String(),
			"key", string(m.Key), "error", err)
		return
	}
	e := &Entry{Record: *r, Pos: pos}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.All {
		f.all = e
	} else {
		f.campaigns[r.Campaign] = e
	}
}

// publish makes the state built so far the one workers decide by, then
// notes when (the decision clock) and which offsets it holds: whoever sees
// an offset applied sees the time it took effect, or a later one.
func (f *Follower) publish() {
	f.mu.Lock()
	s := newSnapshot(maps.Clone(f.campaigns), f.all)
	read := maps.Clone(f.read)
	f.mu.Unlock()
	f.current.Store(s)
	f.m.appliedAt.Set(float64(f.o.Now().UnixMilli()) / 1000)
	for p, off := range read {
		f.m.applied.WithLabelValues(strconv.Itoa(p)).Set(float64(off))
	}
	for st, n := range s.counts {
		f.m.campaigns.WithLabelValues(State(st).String()).Set(float64(n))
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// String is for logs.
func (e *Entry) String() string {
	what := "campaign " + strconv.Quote(e.Campaign)
	if e.All {
		what = "every intent"
	}
	return fmt.Sprintf("%s %s since %s by %q: %s (%s)", what, e.State, e.Since.Format(time.RFC3339), e.By, e.Reason, e.Pos)
}
