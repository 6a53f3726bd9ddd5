package dispatch

// The worker: what it needs (small interfaces), its options and their
// checks. The stage pipeline is in pipeline.go; each step of a batch has its
// own file (batch, decide, route, headers, write, commit).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/segments"
)

// Reader is what the worker needs of a consumer-group reader (*kafka.Reader).
type Reader interface {
	FetchMessage(ctx context.Context) (kafka.Message, error)
	CommitMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Writer is one output topic (*kafka.Writer with RequiredAcks=all).
type Writer interface {
	WriteMessages(ctx context.Context, msgs ...kafka.Message) error
}

// Decider decides a batch against the caps (*capping.Engine).
type Decider interface {
	Decide(ctx context.Context, reqs []capping.Request) ([]capping.Decision, error)
}

// Snapshots gives the segment snapshot in use (*segments.Current). A nil
// snapshot puts every user in no segment.
type Snapshots interface {
	Load() *segments.Snapshot
}

// Options configures a Worker. Every field is required except Suppressed,
// Shadow, FailOpen and the plumbing (Now, Logger, Registerer); the values
// come from the configuration, which owns their defaults.
type Options struct {
	Reader     Reader
	Deliveries Writer
	Suppressed Writer // nil: capped intents are counted, then dropped
	DeadLetter Writer
	Decider    Decider
	Snapshots  Snapshots
	Decoder    *Decoder

	BatchSize int           // intents per batch at most
	BatchWait time.Duration // a batch closes this long after its first intent

	// Shadow forwards everything; would-be-capped intents are marked
	// shadow-capped. The zero value enforces.
	Shadow bool
	// FailOpen forwards intents that Redis could not decide as allowed
	// (marked capper-unchecked) instead of waiting for Redis.
	FailOpen bool

	RetryInitial time.Duration // backoff after a Redis or Kafka error...
	RetryMax     time.Duration // ...doubling up to this
	// ShutdownTimeout bounds the batch in flight once Run's context ends;
	// past it the batch is abandoned uncommitted and will be redelivered.
	ShutdownTimeout time.Duration

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
	required(o.Deliveries != nil, "Deliveries")
	required(o.DeadLetter != nil, "DeadLetter")
	required(o.Decider != nil, "Decider")
	required(o.Snapshots != nil, "Snapshots")
	required(o.Decoder != nil, "Decoder")
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
	o     Options
	m     *metrics
	ready atomic.Pointer[error] // nil pointer: ready
}

// New checks the options and registers the worker's metrics.
func New(o Options) (*Worker, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Worker{o: o, m: newMetrics(o.Registerer)}, nil
}

// Ready reports whether the worker can decide: an error while Redis is
// failing and intents are waiting (for /readyz).
func (w *Worker) Ready() error {
	if p := w.ready.Load(); p != nil {
		return *p
	}
	return nil
}
