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
	reqs := make([]capping.Request, 0, len(msgs))
	for i := range msgs {
		rec := &b.records[i]
		in, err := w.o.Decoder.Decode(msgs[i].Key, msgs[i].Value)
		if err != nil {
			if !errors.As(err, &rec.invalid) {
				rec.invalid = &InvalidError{Field: "value", Reason: err.Error()}
			}
			rec.decision.Outcome = capping.Invalid
			continue
		}
		rec.segment = snap.Lookup(in.UserID)
		r := NewRequest(&in, rec.segment)
		r.Redelivered = w.redelivered(&msgs[i])
		reqs = append(reqs, r)
	}
	decisions, err := w.decide(ctx, reqs)
	if err != nil {
		return nil, err
	}
	j := 0
	for i := range b.records {
		rec := &b.records[i]
		if rec.invalid != nil {
			continue
		}
		rec.decision = decisions[j]
		j++
		if w.o.Shadow && rec.decision.Outcome == capping.Capped {
			rec.decision.Outcome = capping.ShadowCapped
		}
	}
	return b, nil
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
	h, ok := w.takeover[m.Partition]
	if !ok {
		h = m.HighWaterMark
		w.takeover[m.Partition] = h
	}
	return m.Offset < h
}
