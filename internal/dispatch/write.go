package dispatch

// Writing a batch's outcomes: retried until Kafka acknowledged each, except
// what a topic refuses for good, which goes to the dead-letter topic instead
// (smaller if need be) so that every intent still gets one outcome.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/capper-dev/capper/internal/kafka"
)

// output is one topic the worker writes to.
type output struct {
	topic string // its name, for metrics, logs and messages
	wr    Writer
}

// writeRefusal is a record a topic refused for good (its index in the
// records written), and why.
type writeRefusal struct {
	idx int
	err error
}

// writeAll writes a batch's outcomes, the topics in parallel, then sends
// what deliveries, suppressed or a delay tier refused for good to the dead-letter
// topic, and what the dead-letter topic refused, reduced, again.
func (w *Worker) writeAll(ctx context.Context, o outputs) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	var fallback []deadLetter
	type topicMsgs struct {
		out  output
		msgs []kafka.Message
		dlq  bool
	}
	all := []topicMsgs{
		{w.deliveries, o.deliveries, false},
		{w.suppressed, o.suppressed, false},
		{w.deadLetter, o.deadLetter, true},
	}
	for i, t := range w.o.Tiers {
		all = append(all, topicMsgs{output{t.Topic, t.Writer}, o.delayed[i], false})
	}
	all = append(all, topicMsgs{w.parked, o.parked, false})
	for topic, msgs := range o.held {
		wr, err := w.lanes.get(topic)
		if err != nil {
			return fmt.Errorf("write to lane %s: %w", topic, err)
		}
		all = append(all, topicMsgs{output{topic, wr}, msgs, false})
	}
	for _, t := range all {
		if len(t.msgs) == 0 || t.out.wr == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			refused, err := w.write(ctx, t.out, t.msgs)
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, err)
			for _, r := range refused {
				fallback = append(fallback, w.fallback(t.out.topic, t.dlq, deadLetter{msg: t.msgs[r.idx]}, r.err))
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return w.writeFallback(ctx, fallback)
}

// deadLetter is a record on its way to the dead-letter topic after a
// refusal; reduced counts how far it was cut down.
type deadLetter struct {
	msg     kafka.Message
	reduced int // 0 whole, 1 value truncated to max_intent_bytes, 2 value left out
}

// fallback makes the next dead-letter record for a refused one: a record
// refused by deliveries or suppressed goes to the dead-letter topic as is,
// with capper-error saying what refused it; one the dead-letter topic
// refused is cut down, first to max_intent_bytes of its value, then to no
// value at all.
func (w *Worker) fallback(topic string, fromDLQ bool, d deadLetter, cause error) deadLetter {
	w.m.refused.WithLabelValues(topic).Inc()
	w.o.Logger.Warn("kafka refused a record for good; sending it to the dead-letter topic",
		"topic", topic, "reduced", d.reduced, "error", summarize(cause))
	why := fmt.Sprintf("%s refused the record: %s", topic, summarize(cause))
	if !fromDLQ {
		d.msg.Headers = setHeader(d.msg.Headers, HeaderError, []byte(why))
		return d
	}
	if d.reduced == 0 && len(d.msg.Value) > w.o.Decoder.maxBytes {
		d.msg.Value = d.msg.Value[:w.o.Decoder.maxBytes]
		d.msg.Headers = setHeader(d.msg.Headers, HeaderTruncated, vTrue)
		d.reduced = 1
		return d
	}
	// Keep the key and capper's own headers; the value and the producer's
	// headers are what made the record too large or unacceptable.
	h := slices.DeleteFunc(slices.Clone(d.msg.Headers), func(x kafka.Header) bool { return !strings.HasPrefix(x.Key, capperPrefix) })
	prev := findHeader(h, HeaderError)
	if prev != "" {
		why = prev + "; " + why
	}
	h = setHeader(h, HeaderError, []byte(why+", so its value and headers are left out"))
	h = setHeader(h, HeaderTruncated, vTrue)
	d.msg = kafka.Message{Key: d.msg.Key, Value: []byte{}, Headers: h}
	d.reduced = 2
	return d
}

// writeFallback writes dead-letter records made after refusals until each
// is acknowledged. A refused one is cut down further; one that cannot be cut
// down further is retried like a failed write (the worker stalls, not
// ready, rather than lose the intent's outcome).
func (w *Worker) writeFallback(ctx context.Context, pending []deadLetter) error {
	for len(pending) > 0 {
		msgs := make([]kafka.Message, len(pending))
		for i, d := range pending {
			msgs[i] = d.msg
		}
		refused, err := w.write(ctx, w.deadLetter, msgs)
		if err != nil {
			return err
		}
		next := pending[:0:0]
		for _, r := range refused {
			d := pending[r.idx]
			if d.reduced == 2 {
				if err := w.stall(ctx, w.deadLetter, d.msg, r.err); err != nil {
					return err
				}
				continue
			}
			next = append(next, w.fallback(w.deadLetter.topic, true, d, r.err))
		}
		pending = next
	}
	return nil
}

// stall retries a record the dead-letter topic refuses even without a value
// (e.g. no write access): nothing is committed past it, the worker is not
// ready, and the logs say why, until the topic accepts it or ctx ends.
func (w *Worker) stall(ctx context.Context, out output, msg kafka.Message, cause error) error {
	w.o.Logger.Error("the dead-letter topic refuses even a record without value; retrying until it accepts it",
		"topic", out.topic, "error", summarize(cause))
	backoff := w.retryBackoff()
	for {
		w.setNotReady("kafka "+out.topic, fmt.Errorf("the dead-letter topic %s refuses records: %s", out.topic, summarize(cause)))
		if err := backoff.Wait(ctx); err != nil {
			return fmt.Errorf("write to %s: %w (it refuses records: %s)", out.topic, err, summarize(cause))
		}
		if cause = out.wr.WriteMessages(ctx, msg); cause == nil {
			w.setReady("kafka " + out.topic)
			return nil
		}
		w.m.writeErrors.WithLabelValues(out.topic).Inc()
	}
}

// write sends msgs to one topic until each is acknowledged or refused for
// good, and returns the refused ones. Temporary failures (a broker down, a
// leader election, a missing topic) are retried with backoff, only the
// failed records (a retry of a record whose ack was lost duplicates it, with
// the same id). A refusal of a multi-record batch (the broker measures
// max.message.bytes per batch) is tried again one record at a time before it
// counts.
func (w *Worker) write(ctx context.Context, out output, msgs []kafka.Message) ([]writeRefusal, error) {
	var refused []writeRefusal
	all := make([]int, len(msgs))
	for i := range all {
		all[i] = i
	}
	groups := [][]int{all} // each group is one WriteMessages call
	var temporary []int
	var lastErr error
	backoff := w.retryBackoff()
	for attempt := 1; len(groups) > 0 || len(temporary) > 0; attempt++ {
		w.step()
		if len(groups) == 0 {
			// Only temporary failures are left: wait, then send them again.
			w.setNotReady("kafka "+out.topic, fmt.Errorf("writes to %s fail: %s", out.topic, summarize(lastErr)))
			if attempt == 2 || attempt%10 == 0 {
				w.o.Logger.Warn("kafka write failed; retrying", "topic", out.topic, "records", len(temporary),
					"attempt", attempt, "error", summarize(lastErr))
			}
			if err := backoff.Wait(ctx); err != nil {
				return nil, fmt.Errorf("write %d records to %s: %w (last error: %s)", len(temporary), out.topic, err, summarize(lastErr))
			}
			groups, temporary = [][]int{temporary}, nil
		}
		group := groups[0]
		groups = groups[1:]
		batch := msgs // every record, in order (a first attempt): no copy
		if len(group) < len(msgs) {
			batch = make([]kafka.Message, len(group))
			for k, i := range group {
				batch[k] = msgs[i]
			}
		}
		err := out.wr.WriteMessages(ctx, batch...)
		if err == nil {
			continue
		}
		lastErr = err
		w.m.writeErrors.WithLabelValues(out.topic).Inc()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("write %d records to %s: %s", len(group), out.topic, summarize(err))
		}
		for k, e := range recordErrors(err, batch) {
			switch {
			case e == nil:
			case !permanent(e):
				temporary = append(temporary, group[k])
			case len(group) > 1:
				groups = append(groups, group[k:k+1])
			default:
				refused = append(refused, writeRefusal{idx: group[k], err: e})
			}
		}
	}
	w.setReady("kafka " + out.topic)
	return refused, nil
}

// recordErrors spreads a WriteMessages error over its records (nil: written).
func recordErrors(err error, group []kafka.Message) []error {
	out := make([]error, len(group))
	var werrs kafka.WriteErrors
	var tooLarge kafka.MessageTooLargeError
	switch {
	case errors.As(err, &werrs) && len(werrs) == len(group):
		copy(out, werrs)
	case errors.As(err, &tooLarge):
		// kafka-go's own size check, before anything was sent: that record
		// is refused, the others were not tried.
		for i := range out {
			out[i] = errNotSent
			if sameRecord(group[i], tooLarge.Message) {
				out[i] = err
			}
		}
	default:
		for i := range out {
			out[i] = err
		}
	}
	return out
}

var errNotSent = errors.New("not sent: another record of the call was too large")

// permanent reports whether a write error cannot succeed on a retry
// (the Kafka room's Permanent).
func permanent(err error) bool { return kafka.Permanent(err) }

// sameRecord: a and b are the same record of a batch (its key and value
// bytes are the same memory).
func sameRecord(a, b kafka.Message) bool {
	return len(a.Value) == len(b.Value) && len(a.Key) == len(b.Key) &&
		(len(a.Value) == 0 || &a.Value[0] == &b.Value[0]) && (len(a.Key) == 0 || &a.Key[0] == &b.Key[0]) &&
		len(a.Headers) == len(b.Headers) && (len(a.Headers) == 0 || &a.Headers[0] == &b.Headers[0])
}

// summarize shortens a batch's WriteErrors to a count and the first.
func summarize(err error) string { return kafka.Summarize(err) }
