package control

// The follower: every worker reads the whole control topic, outside the
// consumer group (every worker needs every record): at start to its end,
// before the first decision, then live. One goroutine owns the state: the
// partitions' readers only hand it records, so the state it publishes is
// always the one it built last (two publishers could store an older copy
// over a newer one and lose a stop). A malformed record is logged, counted
// and skipped: the key keeps its previous state, so nothing written by
// something else can turn a stop into nothing; and since compaction keeps
// only a key's latest record, the follower writes the key's last valid
// record again after it (reassert.go), so the topic keeps the state too.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/capper-dev/capper/internal/retry"
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

// Writer writes a record to one partition of the control topic (acks=all)
// and returns its offset: the follower re-asserts a key's last valid record
// with it. Implemented by internal/dispatch.
type Writer interface {
	WriteRecord(ctx context.Context, partition int, key, value []byte) (int64, error)
}

// FollowerOptions configure NewFollower.
type FollowerOptions struct {
	Source     Source
	Topic      string // for positions and logs
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Now        func() time.Time // when a record is applied (the decision clock)
	// Writer, when set, re-asserts the last valid record of a key that a
	// foreign record (malformed, a tombstone, another campaign's) followed,
	// so that compaction cannot take the state away. Workers set it; a
	// command that only reads the state does not.
	Writer Writer
	// ReassertAfter is how long a foreign record may stand before this
	// follower re-asserts (default 1s, plus up to as much again at random:
	// several workers see the same record, and the first re-assertion
	// spares the others theirs).
	ReassertAfter time.Duration
}

// Follower keeps the control state current. It is an actor: Run reads
// until its context ends; Load and Ready may be called at any time.
type Follower struct {
	o       FollowerOptions
	current atomic.Pointer[Snapshot]
	ready   chan struct{} // closed once the topic was read to its end
	m       followerMetrics
}

type followerMetrics struct {
	applied, lag       *prometheus.GaugeVec
	appliedAt          prometheus.Gauge
	campaigns          *prometheus.GaugeVec
	malformed, readErr prometheus.Counter
	reasserted         prometheus.Counter
}

// NewFollower registers the follower's metrics.
func NewFollower(o FollowerOptions) *Follower {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ReassertAfter <= 0 {
		o.ReassertAfter = time.Second
	}
	f := promauto.With(o.Registerer)
	fl := &Follower{o: o, ready: make(chan struct{}), m: followerMetrics{
		applied: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "capper_control_applied_offset",
			Help: "The offset of the last control record this worker applied, per partition of the control topic (-1: none yet).",
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
		reasserted: f.NewCounter(prometheus.CounterOpts{
			Name: "capper_control_reasserted_total",
			Help: "Valid control records this worker wrote again after a foreign record under their key (so that compaction keeps them).",
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
	var ends map[int]int64
	for {
		var err error
		if ends, err = f.o.Source.Ends(ctx); err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		f.readError(err)
		_ = retry.Sleep(ctx, time.Second)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	records := make(chan Message, 256)
	done := make(chan struct{}, len(ends))
	for p := range ends {
		go func() {
			defer func() { done <- struct{}{} }()
			f.read(ctx, p, records)
		}()
	}
	st := newBuilder(f, ends)
	st.run(ctx, records)
	cancel()
	for range ends {
		<-done
	}
	return nil
}

// read hands partition p's records, from its start, to the state's owner.
func (f *Follower) read(ctx context.Context, p int, out chan<- Message) {
	next := int64(0)
	for ctx.Err() == nil {
		m, err := f.o.Source.Read(ctx, p, next)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.readError(err)
			_ = retry.Sleep(ctx, time.Second)
			continue
		}
		next = m.Offset + 1
		select {
		case out <- m:
		case <-ctx.Done():
			return
		}
	}
}

func (f *Follower) readError(err error) {
	f.m.readErr.Inc()
	f.o.Logger.Warn("cannot read the control topic; the state in use stays", "topic", f.o.Topic, "error", err)
}

// builder is the state being built; only its run goroutine touches it.
type builder struct {
	f         *Follower
	campaigns map[string]*Entry
	all       *Entry
	ends      map[int]int64 // at start
	read      map[int]int64 // the last offset applied, per partition
	behind    map[int]bool  // partitions not yet read to their end at start
	keys      map[keyAt]*keyState
	reassert  *reasserter
}

func newBuilder(f *Follower, ends map[int]int64) *builder {
	b := &builder{f: f, campaigns: map[string]*Entry{}, ends: ends, read: map[int]int64{}, behind: map[int]bool{},
		keys: map[keyAt]*keyState{}}
	b.reassert = newReasserter(f)
	for p, end := range ends {
		label := strconv.Itoa(p)
		f.m.lag.WithLabelValues(label).Set(float64(end))
		f.m.applied.WithLabelValues(label).Set(-1)
		b.read[p] = -1
		if end > 0 {
			b.behind[p] = true
		}
	}
	return b
}

// run applies records until ctx ends: ready once every partition was read
// to its end at start; then published whenever a partition holds no more.
func (b *builder) run(ctx context.Context, records <-chan Message) {
	if len(b.behind) == 0 {
		b.caughtUp()
	}
	for {
		select {
		case <-ctx.Done():
			b.reassert.wait()
			return
		case m := <-records:
			b.apply(m)
			next := m.Offset + 1
			b.f.m.lag.WithLabelValues(strconv.Itoa(m.Partition)).Set(float64(max(m.HighWaterMark-next, 0)))
			switch {
			case len(b.behind) > 0:
				if b.behind[m.Partition] && next >= b.ends[m.Partition] {
					delete(b.behind, m.Partition)
					if len(b.behind) == 0 {
						b.caughtUp()
					}
				}
			case next >= m.HighWaterMark:
				// Publish once the partition holds no more: a burst of
				// records costs one copy of the state.
				b.publish()
			}
		case k := <-b.reassert.due():
			b.reassertDue(ctx, k)
		}
	}
}

func (b *builder) caughtUp() {
	b.publish()
	close(b.f.ready)
	s := b.f.Load()
	b.f.o.Logger.Info("control topic read to its end", "topic", b.f.o.Topic, "campaigns", len(s.campaigns),
		"stopped", s.Count(Stopped), "paused", s.Count(Paused))
	// Keys whose latest record is foreign are re-asserted from now on (not
	// while reading the past: a later valid record may follow).
	for k, ks := range b.keys {
		if ks.foreign && ks.valid != nil {
			b.reassert.schedule(k)
		}
	}
}

// apply takes a record into the state being built.
func (b *builder) apply(m Message) {
	b.read[m.Partition] = m.Offset // applied, malformed or not
	pos := Position{Topic: b.f.o.Topic, Partition: m.Partition, Offset: m.Offset}
	k := keyAt{partition: m.Partition, key: string(m.Key)}
	ks := b.keys[k]
	if ks == nil {
		ks = &keyState{}
		b.keys[k] = ks
	}
	r, err := Parse(m.Key, m.Value)
	if err != nil {
		b.f.m.malformed.Inc()
		b.f.o.Logger.Error("control record skipped: its key keeps its previous state", "position", pos.String(),
			"key", string(m.Key), "error", err)
		ks.foreign = true
		if ks.valid != nil && len(b.behind) == 0 {
			b.reassert.schedule(k)
		}
		return
	}
	ks.foreign, ks.valid = false, bytes.Clone(m.Value) // kept: not a slice of the fetch's buffer
	e := &Entry{Record: *r, Pos: pos}
	if r.All {
		b.all = e
	} else {
		b.campaigns[r.Campaign] = e
	}
}

// publish makes the state built so far the one workers decide by, then
// notes when (the decision clock) and which offsets it holds: whoever sees
// an offset applied sees the time it took effect, or a later one.
func (b *builder) publish() {
	s := newSnapshot(maps.Clone(b.campaigns), b.all)
	b.f.current.Store(s)
	b.f.m.appliedAt.Set(float64(b.f.o.Now().UnixMilli()) / 1000)
	for p, off := range b.read {
		b.f.m.applied.WithLabelValues(strconv.Itoa(p)).Set(float64(off))
	}
	for st, n := range s.counts {
		b.f.m.campaigns.WithLabelValues(State(st).String()).Set(float64(n))
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
