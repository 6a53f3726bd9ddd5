package dispatch

// The worker: what it needs (small interfaces), its options and their
// checks. The stage pipeline is in pipeline.go; each step of a batch has its
// own file (batch, decide, route, headers, write, commit).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/control"
	"github.com/capper-dev/capper/internal/plans"
	"github.com/capper-dev/capper/internal/segments"
)

// Reader is what the worker needs of its input (*Consumer).
type Reader interface {
	FetchMessage(ctx context.Context) (kafka.Message, error)
	CommitMessages(ctx context.Context, msgs ...kafka.Message) error
}

// batchReader hands over several records at once (*Consumer): up to max,
// waiting only for the first.
type batchReader interface {
	FetchBatch(ctx context.Context, dst []kafka.Message, max int) ([]kafka.Message, error)
}

// cacheGate says where the refusal cache is exact (*Consumer.Cacheable);
// a Reader without it gets no answer from the cache. TierPartitions tells
// a tier record in the partition of its user (see copartition.go).
type cacheGate interface {
	Cacheable(m *kafka.Message, home int) bool
	TierPartitions(topic string) int
}

// Writer is one output topic (*kafka.Writer with RequiredAcks=all). It
// must not change msgs: a batch's first attempt hands it the records
// without a copy.
type Writer interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Decider decides a batch against the caps (*capping.Engine).
type Decider interface {
	Decide(ctx context.Context, reqs []capping.Request) ([]capping.Decision, error)
}

// Refunder gives a failed send's slot back (*capping.Engine).
type Refunder interface {
	Refund(ctx context.Context, reqs []capping.RefundRequest) ([]capping.RefundOutcome, error)
}

// Snapshots gives the segment snapshot in use (*segments.Current). A nil
// snapshot puts every user in no segment.
type Snapshots interface {
	Load() *segments.Snapshot
}

// Plans gives the campaign plans in use (a nil set: none).
type Plans interface {
	Load() *plans.Set
}

// Control gives the campaign control state in use (*control.Follower; a
// nil snapshot: every campaign active).
type Control interface {
	Load() *control.Snapshot
}

// Output is an output topic: its name (for metrics, logs and the error of
// a refused record) and its writer.
type Output struct {
	Topic  string
	Writer Writer
}

// Options configures a Worker. Every field is required except Suppressed,
// Shadow, FailOpen, Segments and the plumbing (Now, Logger, Registerer);
// the values come from the configuration, which owns their defaults.
type Options struct {
	Reader     Reader
	Deliveries Output
	Suppressed Output // no Writer: capped intents are counted, then dropped
	DeadLetter Output
	Decider    Decider
	Snapshots  Snapshots
	// Plans are the campaign plans whose bookings the engine counts (nil:
	// none).
	Plans   Plans
	Decoder *Decoder
	// Policy names the policy version in use (capper-policy of the records
	// the engine did not decide; its decisions carry their own); nil: none.
	Policy func() string
	// Segments are the segment names the metrics start at 0 for (the
	// configured ones); others appear when first seen.
	Segments []string
	// Control is campaign control's state, which each request carries to
	// the Decider with MaxPause (capping.Campaigns; nil: every campaign
	// active, intents' send_by still holds). A paused campaign's intents
	// wait in the first delay tier, so it needs Tiers.
	Control  Control
	MaxPause time.Duration

	// Tiers are the delay tiers, shortest first: Deferred intents wait
	// there (their writers put a record in the partition its Partition
	// names: NewTierWriter). The Reader must give their due records too
	// (a Consumer with the tiers). None: a policy that defers is not allowed (Deferred
	// becomes Capped).
	Tiers []Tier
	// Pacer paces the intents a budget covers (pacing.go): they are
	// written undecided to their lane's topic, <LanePrefix>.<budget>.<lane>
	// (LaneWriter makes its writer, which puts a record in the partition
	// its Partition names, like a tier's), and decided when the Reader
	// gives them back released. Nil: nothing is paced.
	Pacer      Pacer
	LanePrefix string
	LaneWriter func(topic string) (Writer, error)
	// CompactLanes writes lane records in their compact form (capper-held,
	// lanerecord.go; kafka.lane_records: compact). Both forms are read.
	CompactLanes bool
	// Parked is the parked topic (parked.go): an intent waiting for a
	// pause goes there, once, instead of the first delay tier (its writer
	// puts a record in the partition its Partition names, like a tier's).
	// The Reader gives its records back when their pause may be over. No
	// Writer: paused intents wait in the first tier.
	Parked Output

	// StatusTopic names the delivery-status topic the Reader also gives
	// (empty: none); a status of RefundStatuses is a refund, which Refunder
	// applies. Refunder also gives back what a lost answer may have
	// counted (giveback.go); nil: the Decider, when it is one.
	StatusTopic    string
	RefundStatuses []string
	Refunder       Refunder

	BatchSize int           // intents per batch at most
	BatchWait time.Duration // a batch closes this long after its first intent

	// Shadow is shadow mode: what the policy would have held back is
	// delivered, marked shadow-capped and not recorded; campaign control,
	// send-by and users' own limits hold as when enforcing
	// (capping.Decision.Shadowed). The zero value enforces.
	Shadow bool
	// FailOpen forwards intents that Redis could not decide as allowed
	// (marked capper-unchecked) instead of waiting for Redis.
	FailOpen bool

	RetryInitial time.Duration // backoff after a Redis or Kafka error...
	RetryMax     time.Duration // ...doubling up to this
	// ShutdownTimeout bounds the batch in flight once Run's context ends;
	// past it the batch is abandoned uncommitted and will be redelivered.
	ShutdownTimeout time.Duration
	// StuckTimeout: a worker with records in hand whose loops take no
	// step for this long leaves its groups (stuck.go); 0: never.
	StuckTimeout time.Duration

	Now        func() time.Time // the decision clock; nil is time.Now
	Logger     *slog.Logger     // nil discards
	Registerer prometheus.Registerer
}

func (o Options) validate() error {
	var errs []error
	required := func(ok bool, name string) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s is required", name))
		}
	}
	required(o.Reader != nil, "Reader")
	required(o.Deliveries.Writer != nil && o.Deliveries.Topic != "", "Deliveries")
	required(o.DeadLetter.Writer != nil && o.DeadLetter.Topic != "", "DeadLetter")
	required(o.Suppressed.Writer == nil || o.Suppressed.Topic != "", "Suppressed.Topic")
	required(o.Decider != nil, "Decider")
	required(o.Snapshots != nil, "Snapshots")
	required(o.Decoder != nil, "Decoder")
	required(o.Refunder != nil, "Refunder (refunds and give-backs; the Decider is used when it is one)")
	required(o.Control == nil || len(o.Tiers) > 0 && o.MaxPause > 0, "Tiers and MaxPause with Control (paused intents wait in a tier)")
	required(o.Pacer == nil || o.LanePrefix != "" && o.LaneWriter != nil, "LanePrefix and LaneWriter with Pacer")
	required(o.Parked.Writer == nil || o.Parked.Topic != "" && o.Control != nil, "Parked.Topic and Control with a Parked writer")
	for i, t := range o.Tiers {
		required(t.Writer != nil && t.Topic != "", fmt.Sprintf("Tiers[%d]", i))
		if t.Delay <= 0 || i > 0 && t.Delay <= o.Tiers[i-1].Delay {
			errs = append(errs, fmt.Errorf("delay tier %d: delay %s must be above 0 and above the previous tier's", i, t.Delay))
		}
	}
	if o.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("BatchSize %d must be at least 1", o.BatchSize))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"BatchWait", o.BatchWait}, {"RetryInitial", o.RetryInitial}, {"ShutdownTimeout", o.ShutdownTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %s must be above 0", d.name, d.v))
		}
	}
	if o.RetryMax < o.RetryInitial {
		errs = append(errs, fmt.Errorf("RetryMax %s must be at least RetryInitial %s", o.RetryMax, o.RetryInitial))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("dispatch: %w", err)
	}
	return nil
}

// Worker consumes send-intents in micro-batches, decides them, writes every
// outcome and commits the batch's offsets only after Kafka acknowledged all
// of its outcomes.
type Worker struct {
	o                                  Options
	m                                  *metrics
	deliveries, suppressed, deadLetter output
	// tiers: the delay tiers' topics; lanes: the lane topics' writers;
	// parked: the parked topic.
	tiers   map[string]bool
	lanes   laneWriters
	parked  output
	refunds map[string]bool // delivery statuses that refund
	// recent: the ids whose entries this second's answers recorded
	// (stage 1's alone, like decide).
	recent recent
	// laneTopics, laneNames: names stage 1 makes once (lanecache.go).
	laneTopics laneTopics
	laneNames  laneNames
	// campaignsAt is the campaign control of the last control state seen
	// (campaigns): one per state, not one per record.
	campaignsAt atomic.Pointer[capping.Campaigns]

	mu       sync.Mutex
	notReady map[string]error // by what fails: "redis", "kafka <topic>"

	// progress: when the loops last took a step (unix ns); busy: the
	// batches the stages hold; stuck: why the worker left its groups.
	progress atomic.Int64
	busy     atomic.Int32
	stuck    atomic.Pointer[error]
}

// New checks the options and registers the worker's metrics.
func New(o Options) (*Worker, error) {
	if r, ok := o.Decider.(Refunder); ok && o.Refunder == nil {
		o.Refunder = r
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Worker{o: o, notReady: map[string]error{},
		tiers: map[string]bool{}, refunds: map[string]bool{},
		deliveries: output{o.Deliveries.Topic, o.Deliveries.Writer},
		suppressed: output{o.Suppressed.Topic, o.Suppressed.Writer},
		deadLetter: output{o.DeadLetter.Topic, o.DeadLetter.Writer},
	}
	w.lanes.new = o.LaneWriter
	w.parked = output{o.Parked.Topic, o.Parked.Writer}
	for _, s := range o.RefundStatuses {
		w.refunds[s] = true
	}
	topics := []string{o.Deliveries.Topic, o.DeadLetter.Topic}
	for _, t := range o.Tiers {
		w.tiers[t.Topic] = true
		topics = append(topics, t.Topic)
	}
	if o.Suppressed.Writer != nil {
		topics = append(topics, o.Suppressed.Topic)
	}
	if o.Parked.Writer != nil {
		topics = append(topics, o.Parked.Topic)
	}
	w.m = newMetrics(o.Registerer, topics, o.Segments)
	return w, nil
}

// Ready reports whether the worker can make progress (for /readyz): an
// error while Redis cannot decide or Kafka refuses writes and intents are
// waiting. It never names a user or an intent.
func (w *Worker) Ready() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	errs := make([]error, 0, len(w.notReady))
	for _, k := range slices.Sorted(maps.Keys(w.notReady)) {
		errs = append(errs, w.notReady[k])
	}
	return errors.Join(errs...)
}

func (w *Worker) setNotReady(what string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notReady[what] = err
}

func (w *Worker) setReady(what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.notReady, what)
}
