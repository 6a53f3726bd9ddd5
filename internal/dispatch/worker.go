package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
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

// Options configures a Worker. Reader, Deliveries, DeadLetter, Decider,
// Snapshots and Decoder are required.
type Options struct {
	Reader     Reader
	Deliveries Writer
	Suppressed Writer // nil: capped intents are counted, then dropped
	DeadLetter Writer
	Decider    Decider
	Snapshots  Snapshots
	Decoder    *Decoder

	BatchSize int           // default 500
	BatchWait time.Duration // default 50ms: a batch closes this long after its first intent

	// Shadow forwards everything; would-be-capped intents are marked
	// shadow-capped. The zero value enforces.
	Shadow bool
	// FailOpen forwards intents that Redis could not decide as allowed
	// (marked capper-unchecked) instead of waiting for Redis.
	FailOpen bool

	RetryInitial time.Duration // default 100ms: backoff after a Redis or Kafka error
	RetryMax     time.Duration // default 5s
	// ShutdownTimeout bounds the batch in flight once Run's context ends
	// (default 25s); past it the batch is abandoned uncommitted and will be
	// redelivered.
	ShutdownTimeout time.Duration

	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Worker consumes send-intents in micro-batches, decides them, writes every
// outcome and commits the batch's offsets only after Kafka acknowledged all
// of its outcomes.
//
// Two stages overlap: while batch N's outcomes are written and committed,
// batch N+1 is fetched, decoded and decided. Each stage handles one batch at
// a time and hands batches on in order, so a user's intents are still
// decided in partition order and their outcomes written in that order, and
// offsets are still committed only after their outcomes are acknowledged.
type Worker struct {
	o       Options
	m       *metrics
	ready   atomic.Pointer[error] // nil pointer: ready
	batches atomic.Int64
}

// New checks the options and registers the worker's metrics.
func New(o Options) (*Worker, error) {
	switch {
	case o.Reader == nil:
		return nil, errors.New("dispatch: Reader is required")
	case o.Deliveries == nil || o.DeadLetter == nil:
		return nil, errors.New("dispatch: Deliveries and DeadLetter writers are required")
	case o.Decider == nil:
		return nil, errors.New("dispatch: Decider is required")
	case o.Snapshots == nil:
		return nil, errors.New("dispatch: Snapshots is required")
	case o.Decoder == nil:
		return nil, errors.New("dispatch: Decoder is required")
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 500
	}
	if o.BatchWait <= 0 {
		o.BatchWait = 50 * time.Millisecond
	}
	if o.RetryInitial <= 0 {
		o.RetryInitial = 100 * time.Millisecond
	}
	if o.RetryMax < o.RetryInitial {
		o.RetryMax = max(5*time.Second, o.RetryInitial)
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 25 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
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

// Batches is the number of batches committed so far.
func (w *Worker) Batches() int64 { return w.batches.Load() }

// Run consumes until ctx ends, then finishes the batches in flight
// (decide, write, commit) within ShutdownTimeout and returns nil. It returns
// an error when the reader fails or a batch in flight could not be finished
// in time.
func (w *Worker) Run(ctx context.Context) error {
	// work outlives ctx by up to ShutdownTimeout, so that fetched batches are
	// finished and committed after a SIGTERM instead of being redelivered.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopTimer := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(w.o.ShutdownTimeout, cancelWork)
		context.AfterFunc(work, func() { t.Stop() })
	})
	defer stopTimer()

	// Two batch buffers: one in each stage. Stage 1 waits for a free one,
	// which is the pipeline's backpressure.
	free := make(chan []kafka.Message, 2)
	for range 2 {
		free <- make([]kafka.Message, 0, w.o.BatchSize)
	}
	decided := make(chan *decided, 1)
	failed := make(chan struct{}) // closed when stage 2 gives up
	stage2 := make(chan error, 1)
	go func() {
		var err error
		for d := range decided {
			if err == nil {
				if err = w.finish(work, d); err != nil {
					close(failed)
				}
			}
			free <- d.batch[:0]
		}
		stage2 <- err
	}()

	err := w.produce(ctx, work, free, decided, failed)
	close(decided)
	if err2 := <-stage2; err2 != nil {
		return err2
	}
	return err
}

// produce is stage 1: fetch, decode, decide, hand on.
func (w *Worker) produce(ctx, work context.Context, free chan []kafka.Message, out chan<- *decided, failed <-chan struct{}) error {
	for {
		var buf []kafka.Message
		select {
		case buf = <-free:
		case <-failed:
			return nil // stage 2 reports why
		}
		batch, ferr := w.fetch(ctx, buf)
		if len(batch) > 0 {
			d, err := w.decideBatch(work, batch)
			if err != nil {
				return fmt.Errorf("batch of %d intents left uncommitted (it will be redelivered): %w", len(batch), err)
			}
			select {
			case out <- d:
			case <-failed:
				return nil
			}
		} else {
			free <- buf
		}
		if ferr != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("fetch send-intents: %w", ferr)
		}
	}
}

// fetch blocks for the first intent, then collects more until the batch is
// full or BatchWait has passed since the first.
func (w *Worker) fetch(ctx context.Context, batch []kafka.Message) ([]kafka.Message, error) {
	first, err := w.o.Reader.FetchMessage(ctx)
	if err != nil {
		return batch, err
	}
	batch = append(batch, first)
	bctx, cancel := context.WithTimeout(ctx, w.o.BatchWait)
	defer cancel()
	for len(batch) < w.o.BatchSize {
		m, err := w.o.Reader.FetchMessage(bctx)
		if err != nil {
			if ctx.Err() != nil {
				return batch, ctx.Err() // stopping: finish what was fetched
			}
			if bctx.Err() != nil {
				return batch, nil // the batch's wait is over
			}
			return batch, err
		}
		batch = append(batch, m)
	}
	return batch, nil
}

// item is one intent of a batch on its way to an output topic.
type item struct {
	invalid   *InvalidError
	segment   string
	req       int // index in the batch's requests
	decision  capping.Decision
	unchecked bool // failed open: Redis could not decide
}

// decided is a batch on its way from stage 1 to stage 2.
type decided struct {
	batch []kafka.Message
	items []item
	at    []time.Time
	snap  string // snapshot version the segments came from
	start time.Time
}

// decideBatch decodes the batch, resolves segments from one snapshot and
// decides it.
func (w *Worker) decideBatch(ctx context.Context, batch []kafka.Message) (*decided, error) {
	start := time.Now()
	snap := w.o.Snapshots.Load()
	items := make([]item, len(batch))
	reqs := make([]capping.Request, 0, len(batch))
	for i := range batch {
		in, err := w.o.Decoder.Decode(batch[i].Key, batch[i].Value)
		if err != nil {
			items[i].invalid = err.(*InvalidError)
			continue
		}
		items[i].segment = snap.Lookup(in.UserID)
		items[i].req = len(reqs)
		reqs = append(reqs, capping.Request{
			UserID: in.UserID, Segment: items[i].segment, IntentID: in.ID,
			Channel: in.Channel, Category: in.Category,
		})
	}
	decisions, unchecked, at, err := w.decide(ctx, reqs)
	if err != nil {
		return nil, err
	}
	for i := range items {
		if items[i].invalid == nil {
			items[i].decision = decisions[items[i].req]
			items[i].unchecked = unchecked[items[i].req]
		}
	}
	return &decided{batch: batch, items: items, at: at, snap: snap.Version(), start: start}, nil
}

// finish is stage 2: write every outcome, then commit.
func (w *Worker) finish(ctx context.Context, d *decided) error {
	out := w.route(d.batch, d.items, d.snap, d.at)
	if err := w.writeAll(ctx, out); err != nil {
		return fmt.Errorf("batch of %d intents left uncommitted (it will be redelivered): %w", len(d.batch), err)
	}
	if err := w.commit(ctx, d.batch); err != nil {
		return fmt.Errorf("batch of %d intents left uncommitted (it will be redelivered): %w", len(d.batch), err)
	}
	w.batches.Add(1)
	w.observe(d.batch, d.items, d.start)
	return nil
}

// decide asks the Decider until every request has an answer. Requests that
// failed are retried with capped exponential backoff (nothing undecided is
// forwarded and nothing is committed meanwhile), unless FailOpen is set.
// It returns the decision time of each request, as sent to Redis.
func (w *Worker) decide(ctx context.Context, reqs []capping.Request) ([]capping.Decision, []bool, []time.Time, error) {
	out := make([]capping.Decision, len(reqs))
	unchecked := make([]bool, len(reqs))
	at := make([]time.Time, len(reqs))
	pending := make([]int, len(reqs))
	for i := range pending {
		pending[i] = i
	}
	sub := make([]capping.Request, 0, len(reqs))
	backoff := w.o.RetryInitial
	for attempt := 1; len(pending) > 0; attempt++ {
		// The decision time is taken per attempt: a retried intent is decided
		// now, not when it first arrived.
		now := w.o.Now().Truncate(time.Millisecond)
		sub = sub[:0]
		for _, i := range pending {
			r := reqs[i]
			r.At = now
			sub = append(sub, r)
		}
		t0 := time.Now()
		ds, err := w.o.Decider.Decide(ctx, sub)
		w.m.decision.Observe(time.Since(t0).Seconds())
		if err != nil && ctx.Err() != nil {
			return nil, nil, nil, fmt.Errorf("decide: %w", err)
		}
		var still []int
		var lastErr error
		for j, i := range pending {
			switch {
			case err != nil:
				lastErr = err
			case ds[j].Err != nil:
				lastErr = ds[j].Err
			default:
				out[i], at[i] = ds[j], now
				if ds[j].Outcome == capping.Duplicate && !ds[j].Recorded.IsZero() {
					at[i] = ds[j].Recorded // the time it is counted at
				}
				continue
			}
			still = append(still, i)
		}
		if len(still) == 0 {
			w.ready.Store(nil)
			return out, unchecked, at, nil
		}
		if w.o.FailOpen {
			for _, i := range still {
				out[i] = capping.Decision{Outcome: capping.Allowed}
				unchecked[i], at[i] = true, now
			}
			w.o.Logger.Warn("redis could not decide; failing open as configured",
				"intents", len(still), "error", lastErr)
			return out, unchecked, at, nil
		}
		notReady := fmt.Errorf("redis cannot decide %d intents: %w", len(still), lastErr)
		w.ready.Store(&notReady)
		w.m.redisRetries.Add(float64(len(still)))
		if attempt == 1 || attempt%10 == 0 {
			w.o.Logger.Warn("redis could not decide; waiting and retrying", "intents", len(still),
				"attempt", attempt, "backoff", backoff, "error", lastErr)
		}
		if err := sleep(ctx, backoff); err != nil {
			return nil, nil, nil, fmt.Errorf("decide: %w (last redis error: %v)", err, lastErr)
		}
		backoff = min(2*backoff, w.o.RetryMax)
		pending = still
	}
	return out, unchecked, at, nil
}

// Header names of the output contract (design.md).
const (
	HeaderDecision   = "capper-decision"
	HeaderSegment    = "capper-segment"
	HeaderSnapshot   = "capper-snapshot"
	HeaderLimit      = "capper-limit"
	HeaderRetryAfter = "capper-retry-after-ms"
	HeaderError      = "capper-error"
	// Additions where the design is silent (README, "Output topics").
	HeaderDecidedAt = "capper-decided-at" // RFC 3339, ms: the time the caps were checked at (a duplicate: when it was first allowed)
	HeaderDuplicate = "capper-duplicate"  // "true": this id was allowed before (a redelivery)
	HeaderUnchecked = "capper-unchecked"  // "true": failed open, Redis did not decide
	HeaderSource    = "capper-source"     // <topic>/<partition>/<offset> of the input record
)

// Decision header values.
const (
	DecisionAllowed      = "allowed"
	DecisionExempt       = "exempt"
	DecisionShadowCapped = "shadow-capped"
	DecisionCapped       = "capped"
)

// TimeLayout is the format of capper-decided-at.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

type outputs struct {
	deliveries, suppressed, deadLetter []kafka.Message
}

// Header values that never change, as bytes once: kafka-go only reads them.
var (
	vAllowed      = []byte(DecisionAllowed)
	vExempt       = []byte(DecisionExempt)
	vShadowCapped = []byte(DecisionShadowCapped)
	vCapped       = []byte(DecisionCapped)
	vTrue         = []byte("true")
)

// headerBuilder makes the output headers of one batch. Values shared by many
// records (segment names, the snapshot version, decision times) are turned
// into bytes once, and the per-record bytes (capper-source, retry-after)
// come from one arena, so a record costs one allocation for its headers.
type headerBuilder struct {
	version  []byte
	segments map[string][]byte
	lastAt   time.Time
	lastAtB  []byte
	arena    []byte
	headers  []kafka.Header // backing array the records' header slices are cut from
}

func (hb *headerBuilder) segment(s string) []byte {
	b, ok := hb.segments[s]
	if !ok {
		b = []byte(s)
		hb.segments[s] = b
	}
	return b
}

func (hb *headerBuilder) at(t time.Time) []byte {
	if !t.Equal(hb.lastAt) || hb.lastAtB == nil {
		hb.lastAt, hb.lastAtB = t, []byte(t.UTC().Format(TimeLayout))
	}
	return hb.lastAtB
}

// bytes appends to the arena and returns the appended part; a full arena
// is replaced, not grown, so earlier slices stay valid.
func (hb *headerBuilder) bytes(f func([]byte) []byte) []byte {
	if cap(hb.arena)-len(hb.arena) < 64 {
		hb.arena = make([]byte, 0, 16<<10)
	}
	start := len(hb.arena)
	hb.arena = f(hb.arena)
	return hb.arena[start:len(hb.arena):len(hb.arena)]
}

// forward copies the record's key and value bytes untouched, keeps its
// headers except capper-* ones (capper owns that namespace, so an upstream
// producer cannot forge a decision) and adds ours and capper-source.
func (hb *headerBuilder) forward(m *kafka.Message, add ...kafka.Header) kafka.Message {
	n := len(m.Headers) + len(add) + 1
	if cap(hb.headers)-len(hb.headers) < n {
		hb.headers = make([]kafka.Header, 0, max(n, 1024))
	}
	h := hb.headers[len(hb.headers) : len(hb.headers) : len(hb.headers)+n]
	hb.headers = hb.headers[:len(hb.headers)+n]
	for _, x := range m.Headers {
		if !strings.HasPrefix(x.Key, "capper-") {
			h = append(h, x)
		}
	}
	h = append(h, add...)
	h = append(h, kafka.Header{Key: HeaderSource, Value: hb.bytes(func(b []byte) []byte {
		b = append(b, m.Topic...)
		b = append(b, '/')
		b = strconv.AppendInt(b, int64(m.Partition), 10)
		b = append(b, '/')
		return strconv.AppendInt(b, m.Offset, 10)
	})})
	return kafka.Message{Key: m.Key, Value: m.Value, Headers: h}
}

func (w *Worker) route(batch []kafka.Message, items []item, version string, at []time.Time) outputs {
	var o outputs
	hb := &headerBuilder{version: []byte(version), segments: map[string][]byte{}}
	for i := range batch {
		it := &items[i]
		m := &batch[i]
		if it.invalid != nil {
			o.deadLetter = append(o.deadLetter, hb.forward(m, kafka.Header{Key: HeaderError, Value: []byte(it.invalid.Error())}))
			continue
		}
		d := &it.decision
		seg := kafka.Header{Key: HeaderSegment, Value: hb.segment(it.segment)}
		snap := kafka.Header{Key: HeaderSnapshot, Value: hb.version}
		when := kafka.Header{Key: HeaderDecidedAt, Value: hb.at(at[it.req])}
		switch d.Outcome {
		case capping.Exempt:
			o.deliveries = append(o.deliveries, hb.forward(m, kafka.Header{Key: HeaderDecision, Value: vExempt}, seg, snap, when))
		case capping.Allowed, capping.Duplicate:
			var extra [2]kafka.Header
			n := 0
			if d.Outcome == capping.Duplicate {
				extra[n] = kafka.Header{Key: HeaderDuplicate, Value: vTrue}
				n++
			}
			if it.unchecked {
				extra[n] = kafka.Header{Key: HeaderUnchecked, Value: vTrue}
				n++
			}
			o.deliveries = append(o.deliveries, hb.forward(m, append([]kafka.Header{
				{Key: HeaderDecision, Value: vAllowed}, seg, snap, when}, extra[:n]...)...))
		case capping.Denied:
			limit := kafka.Header{Key: HeaderLimit, Value: hb.segment(d.Limit)}
			retry := kafka.Header{Key: HeaderRetryAfter, Value: hb.bytes(func(b []byte) []byte {
				return strconv.AppendInt(b, d.RetryAfter.Milliseconds(), 10)
			})}
			if w.o.Shadow {
				o.deliveries = append(o.deliveries, hb.forward(m, kafka.Header{Key: HeaderDecision, Value: vShadowCapped}, seg, snap, when, limit, retry))
			} else if w.o.Suppressed != nil {
				o.suppressed = append(o.suppressed, hb.forward(m, kafka.Header{Key: HeaderDecision, Value: vCapped}, seg, snap, when, limit, retry))
			}
		}
	}
	return o
}

func (w *Worker) writeAll(ctx context.Context, o outputs) error {
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, t := range []struct {
		name string
		wr   Writer
		msgs []kafka.Message
	}{
		{"deliveries", w.o.Deliveries, o.deliveries},
		{"suppressed", w.o.Suppressed, o.suppressed},
		{"dead_letter", w.o.DeadLetter, o.deadLetter},
	} {
		if len(t.msgs) == 0 || t.wr == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.write(ctx, t.name, t.wr, t.msgs)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// write retries until every record is acknowledged. After a partial failure
// only the failed records are sent again; the others are already in the log
// (a retry of a record whose ack was lost duplicates it, with the same id).
func (w *Worker) write(ctx context.Context, topic string, wr Writer, msgs []kafka.Message) error {
	backoff := w.o.RetryInitial
	for attempt := 1; ; attempt++ {
		err := wr.WriteMessages(ctx, msgs...)
		if err == nil {
			return nil
		}
		w.m.writeErrors.WithLabelValues(topic).Inc()
		if ctx.Err() != nil {
			return fmt.Errorf("write %d records to %s: %s", len(msgs), topic, summarize(err))
		}
		var werrs kafka.WriteErrors
		if errors.As(err, &werrs) && len(werrs) == len(msgs) {
			failed := msgs[:0:0]
			for j, e := range werrs {
				if e != nil {
					failed = append(failed, msgs[j])
				}
			}
			msgs = failed
		}
		if attempt == 1 || attempt%10 == 0 {
			w.o.Logger.Warn("kafka write failed; retrying", "topic", topic, "records", len(msgs),
				"attempt", attempt, "error", summarize(err))
		}
		if len(msgs) == 0 {
			return nil
		}
		if serr := sleep(ctx, backoff); serr != nil {
			return fmt.Errorf("write %d records to %s: %w (last error: %s)", len(msgs), topic, serr, summarize(err))
		}
		backoff = min(2*backoff, w.o.RetryMax)
	}
}

// summarize shortens kafka.WriteErrors, whose text lists every record's
// error (thousands of lines for one failed batch), to a count and the first.
func summarize(err error) string {
	var werrs kafka.WriteErrors
	if !errors.As(err, &werrs) {
		return err.Error()
	}
	for _, e := range werrs {
		if e != nil {
			return fmt.Sprintf("%d of %d records failed, first: %v", werrs.Count(), len(werrs), e)
		}
	}
	return err.Error()
}

// commit commits the batch's offsets in one call. A failed commit is not
// retried: the outcomes are already written, so the worst case is a
// redelivery (answered duplicate by Redis), and the next batch's commit
// covers these offsets anyway. This is also why a stale commit after a
// rebalance (segmentio/kafka-go#1308) can only cause redelivery: every
// offset committed here was fully processed by this worker.
func (w *Worker) commit(ctx context.Context, batch []kafka.Message) error {
	if err := w.o.Reader.CommitMessages(ctx, batch...); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("commit: %w", err)
		}
		w.m.commitErrors.Inc()
		w.o.Logger.Warn("offset commit failed; the batch may be redelivered", "intents", len(batch), "error", err)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
