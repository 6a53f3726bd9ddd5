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
	// home: the user's input partition, the index of the tier partition a
	// deferral of it waits in (copartition.go).
	home int
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
		rec.home = m.Partition
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
			if h := homeOf(rec.def.source); h >= 0 {
				rec.home = h
			}
			if rec.def.notBefore.After(now) || w.misplaced(m, rec.home) {
				// Not due yet (its tier was shorter than its wait): on to
				// the next tier, undecided. Its value was checked when it
				// was first deferred. One in another partition than its
				// user's (an earlier version wrote it) moves there first.
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
		r.Redelivered = !w.cacheable(m, rec)
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
// clock) and Redelivered (where the worker's refusal cache may answer). The worker
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

// rebalanceCounter is a Reader that counts its groups' rebalances
// (*Consumer: Stats counts them since the last call).
type rebalanceCounter interface{ Stats() kafka.ReaderStats }

// refusalForgetter is a Decider that remembers refusals (*capping.Engine).
type refusalForgetter interface{ ForgetRefusals() }

// noteRebalance empties the Decider's refusal cache when the worker's
// partitions may have changed since the last batch (the first join
// counts): users of a partition it lost are decided elsewhere now.
func (w *Worker) noteRebalance() {
	r, ok := w.o.Reader.(rebalanceCounter)
	if !ok || r.Stats().Rebalances == 0 {
		return
	}
	if f, ok := w.o.Decider.(refusalForgetter); ok {
		f.ForgetRefusals()
	}
}

// cacheable reports whether the refusal cache may answer m: only where no
// other worker can have decided the same id or changed its user's record
// since this worker's refusal (Consumer.Cacheable); its Request is marked
// Redelivered otherwise.
func (w *Worker) cacheable(m *kafka.Message, rec *record) bool {
	g, ok := w.o.Reader.(cacheGate)
	return ok && g.Cacheable(m, rec.home)
}

// misplaced reports whether a tier record waits in another partition than
// its user's (written by an earlier version): it moves there, undecided,
// so that the worker of its user decides it.
func (w *Worker) misplaced(m *kafka.Message, home int) bool {
	g, ok := w.o.Reader.(cacheGate)
	if !ok || home < 0 {
		return false
	}
	n := g.TierPartitions(m.Topic)
	return n > 0 && home%n != m.Partition
}
