package dispatch

// A batch on its way through the stages: one record per fetched message,
// filled once by decode and decide, then only read by route and observe.

import (
	"context"
	"errors"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/capping"
)

// batch is the fetched messages and what became of each.
type batch struct {
	msgs    []kafka.Message
	records []record // records[i] is msgs[i]'s
	snap    string   // snapshot version the segments came from
	policy  string   // policy version in use when the batch started
	start   time.Time
}

// record is what became of one message.
type record struct {
	// invalid says why it could not be decoded (Outcome Invalid).
	invalid *InvalidError
	// truncated: dead-lettered with only the start of its value.
	truncated bool
	segment   string
	// decision is the final one: the engine's, or Invalid, FailOpen, or
	// ShadowCapped for what the engine capped in shadow mode.
	decision capping.Decision
	// asked: the engine decided it (decision is its answer).
	asked bool
	// delayed: it came from a delay tier, deferred as def says; hop: it is
	// not due yet and goes on to the next tier undecided.
	delayed, hop bool
	def          deferral
	dueAt        time.Time // deferred: when its tier hands it over (route)
	// status: a delivery-status record (no output unless invalid); refund
	// is what became of it.
	status bool
	refund string
}

// decideBatch decodes the messages, resolves segments from one snapshot and
// decides them.
func (w *Worker) decideBatch(ctx context.Context, msgs []kafka.Message) (*batch, error) {
	w.noteRebalance()
	b := &batch{msgs: msgs, records: make([]record, len(msgs)), start: time.Now()}
	snap := w.o.Snapshots.Load()
	b.snap = snap.Version()
	if w.o.Policy != nil {
		// For the records the engine does not decide; its decisions name
		// the policy that made them.
		b.policy = w.o.Policy()
	}
	now := w.o.Now().Truncate(time.Millisecond) // of the records not decided
	reqs := make([]capping.Request, 0, len(msgs))
	var refunds []refundReq
	for i := range msgs {
		m, rec := &msgs[i], &b.records[i]
		switch {
		case m.Topic == w.o.StatusTopic:
			rec.status = true
			if r, ok := w.readStatus(m, rec); ok {
				refunds = append(refunds, refundReq{i, r})
			}
			continue
		case w.tiers[m.Topic]:
			rec.delayed = true
			if rec.def, rec.invalid = readDeferral(m.Headers, &w.names); rec.invalid != nil {
				rec.decision.Outcome = capping.Invalid
				continue
			}
			if rec.def.notBefore.After(now) {
				// Not due yet (its tier was shorter than its wait): on to
				// the next tier, undecided. Its value was checked when it
				// was first deferred.
				rec.hop, rec.segment = true, rec.def.segment
				rec.decision = capping.Decision{Outcome: capping.Deferred, At: now, NotBefore: rec.def.notBefore,
					Reason: rec.def.reason, Limit: rec.def.limit}
				continue
			}
		}
		in, err := w.o.Decoder.Decode(m.Key, m.Value)
		if err != nil {
			if !errors.As(err, &rec.invalid) {
				rec.invalid = &InvalidError{Field: "value", Reason: err.Error()}
			}
			rec.decision.Outcome = capping.Invalid
			continue
		}
		rec.segment = snap.Lookup(in.UserID)
		r := NewRequest(&in, rec.segment)
		r.Redelivered = w.redelivered(m)
		r.DeferredSince = rec.def.since
		reqs = append(reqs, r)
		rec.asked = true
	}
	// Refunds first: a slot they free is there for this batch's intents.
	if err := w.refund(ctx, b.records, refunds); err != nil {
		return nil, err
	}
	decisions, err := w.decide(ctx, reqs)
	if err != nil {
		return nil, err
	}
	j := 0
	for i := range b.records {
		rec := &b.records[i]
		if !rec.asked {
			continue
		}
		rec.decision = decisions[j]
		j++
		switch o := &rec.decision.Outcome; {
		case *o == capping.Invalid:
			rec.invalid = engineInvalid(rec.decision.Err)
		case w.o.Shadow && (*o == capping.Capped || *o == capping.Deferred):
			*o = capping.ShadowCapped
		case *o == capping.Deferred && len(w.o.Tiers) == 0:
			// The app refuses a policy that defers without tiers; should
			// one get here, the intent is capped rather than lost.
			*o = capping.Capped
		}
	}
	return b, nil
}

// engineInvalid is the dead-letter reason of a request the engine refused.
func engineInvalid(err error) *InvalidError {
	var ir *capping.InvalidRequestError
	if errors.As(err, &ir) {
		return invalid(ir.Field, "%s", ir.Reason)
	}
	return invalid("value", "%v", err)
}

// NewRequest is the engine's request for a decoded intent of a user in
// segment (the snapshot's Lookup), without its decision time (the caller's
// clock) and Redelivered (the worker's takeover bookkeeping). The worker
// and capper replay build requests with it alike.
func NewRequest(in *Intent, segment string) capping.Request {
	return capping.Request{
		UserID: in.UserID, Segment: segment, IntentID: in.ID,
		Campaign: in.CampaignID, Channel: in.Channel, Category: in.Category,
		Tags: in.Tags, Priority: in.Priority, TimeZone: in.TimeZone, Override: in.Override,
	}
}

type topicPartition struct {
	topic     string
	partition int
}

// rebalanceCounter is a Reader that counts its group's rebalances
// (*kafka.Reader: Stats counts them since the last call).
type rebalanceCounter interface{ Stats() kafka.ReaderStats }

// refusalForgetter is a Decider that remembers refusals (*capping.Engine).
type refusalForgetter interface{ ForgetRefusals() }

// noteRebalance starts the takeover bookkeeping over, and empties the
// Decider's refusal cache, when the worker's partitions may have changed
// since the last batch (the group's first join counts).
func (w *Worker) noteRebalance() {
	r, ok := w.o.Reader.(rebalanceCounter)
	if !ok || r.Stats().Rebalances == 0 {
		return
	}
	clear(w.takeover)
	if f, ok := w.o.Decider.(refusalForgetter); ok {
		f.ForgetRefusals()
	}
}

// redelivered reports whether m may have been decided by the partition's
// previous owner: it existed when this worker took the partition over
// (below the high-water mark of the first fetch since). Such an intent
// that worker allowed must be answered a duplicate, which only Redis knows,
// so the refusal cache may not answer it (capping.Request.Redelivered).
func (w *Worker) redelivered(m *kafka.Message) bool {
	tp := topicPartition{m.Topic, m.Partition}
	h, ok := w.takeover[tp]
	if !ok {
		h = m.HighWaterMark
		w.takeover[tp] = h
	}
	return m.Offset < h
}
