package dispatch

// A batch on its way through the stages: one entry per fetched message, of
// a kind known once it is read, filled once by decideBatch, then only read
// by route, the headers and observe.

import (
	"context"
	"errors"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/plans"
)

// batch is the fetched messages and what became of each.
type batch struct {
	msgs    []kafka.Message
	entries []entry // entries[i] is msgs[i]'s
	snap    string  // snapshot version the segments came from
	policy  string  // policy version in use when the batch started
	start   time.Time
	// now is the batch's time for what the engine does not decide: a hop
	// is placed in its next tier from now.
	now time.Time
	// controlSeq is the control state's Released before the batch was
	// decided (a paused intent's capper-control-seq: parked.go).
	controlSeq map[int]int64
	// written is closed once stage 2 is done writing the batch (or gave
	// up); prev is the batch before's. A batch's early writes wait for
	// prev: a user's outcomes are written in order.
	written, prev chan struct{}
}

// kind is what a fetched message is. It is known once the message is read
// (decideBatch), and route, headers and observe switch on it.
type kind uint8

const (
	// kindIntent: a send-intent of the input, decided by the engine.
	kindIntent kind = iota
	// kindDue: a delay tier's record whose intent is due: decided again.
	kindDue
	// kindHop: a delay tier's record passed on to the next tier
	// undecided: not due yet, or moved to its user's partition first.
	kindHop
	// kindStatus: a delivery status; it may refund a send, and has no
	// output.
	kindStatus
	// kindUnreadable: a message that could not be read (an intent's or a
	// status's value, a tier record's headers): dead-lettered, the engine
	// never saw it.
	kindUnreadable
	// kindHold: an intent a budget covers, written undecided to its
	// lane's topic (pacing.go); it is decided when its budget releases
	// it (a kindDue entry of the lane's topic then).
	kindHold
)

// decided reports whether the engine decides an entry of kind k.
func (k kind) decided() bool { return k == kindIntent || k == kindDue }

// entry is one fetched message and what became of it.
type entry struct {
	kind kind
	// invalid says why it is dead-lettered (Outcome Invalid): it is
	// kindUnreadable, or the engine refused its intent.
	invalid *InvalidError
	// truncated: dead-lettered with only the start of its value (route).
	truncated bool
	segment   string
	// decision is the final one of a decided kind: the engine's, or
	// Invalid, FailOpen, or ShadowCapped for what the policy held back in
	// shadow mode. An unreadable entry's says Invalid.
	decision capping.Decision
	// tier is what a delay tier's record says (kindDue, kindHop; what was
	// read of a kindUnreadable one).
	tier tierHeaders
	// next is a decided entry's deferral after its decision: what its
	// headers carry on.
	next capping.Deferral
	// dueAt: a deferred or hopping entry's tier hands it over then (route).
	dueAt time.Time
	// refund is what became of a kindStatus entry; throttle what a
	// throttled one reports to its budget.
	refund   string
	throttle *throttleReport
	// back: a throttled send its status handed back (handback.go), decided
	// or held as its intent; throttledAt: a released lane record's
	// capper-throttled-at (a Duplicate at that time is its own delivery).
	back        *handBack
	throttledAt time.Time
	// home: the user's input partition, the index of the tier partition a
	// deferral of it waits in (copartition.go).
	home int
	// held: a kindHold entry's lane; lane: what a released lane record
	// says; charge: the budget an exempt intent is charged to if it is
	// delivered (pacing.go). held and lane point to heldAt and laneAt:
	// the entries are reused batch after batch, and these with them.
	held   *heldEntry
	lane   *laneInfo
	heldAt heldEntry
	laneAt laneInfo
	charge string
	// expiring: the lane an intent would have waited in, had it not been
	// past its send-by by its release (it is cancelled at once).
	expiring *laneInfo
	// parked: read back from the parked topic; campaign: the intent's
	// campaign_id (a parked record carries it).
	parked   bool
	campaign string
	// settled: its decision is in (settle); early: written before its
	// batch-mates were decided (writeEarly), not again by stage 2.
	settled, early bool
}

// setUnreadable dead-letters e: it could not be read, as err says (an
// *InvalidError names the field at fault).
func (e *entry) setUnreadable(err error) {
	e.kind = kindUnreadable
	if !errors.As(err, &e.invalid) {
		e.invalid = &InvalidError{Field: "value", Reason: err.Error()}
	}
	e.decision.Outcome = capping.Invalid
}

// decideBatch reads the messages, resolves segments from one snapshot and
// decides what the engine decides. Its entries are cut from entries (a
// free buffer, cleared here; grown when too small).
func (w *Worker) decideBatch(ctx context.Context, msgs []kafka.Message, entries []entry, prev chan struct{}) (*batch, error) {
	w.noteRebalance()
	if cap(entries) < len(msgs) {
		entries = make([]entry, len(msgs))
	} else {
		entries = entries[:len(msgs)]
		clear(entries)
	}
	b := &batch{msgs: msgs, entries: entries, start: time.Now(), written: make(chan struct{}), prev: prev}
	if w.o.Policy != nil {
		// For the records the engine does not decide; its decisions name
		// the policy that made them.
		b.policy = w.o.Policy()
	}
	b.now = w.o.Now().Truncate(time.Millisecond)
	if w.o.Control != nil {
		b.controlSeq = w.o.Control.Load().Released()
	}
	reqs, refunds := w.read(b)
	// Refunds first: a slot they free is there for this batch's intents.
	if err := w.refund(ctx, b.entries, refunds); err != nil {
		return nil, err
	}
	w.reportThrottles(ctx, b.entries)
	// byReq[j] is reqs[j]'s entry: reqs are the decided entries', in
	// batch order.
	byReq := make([]int, 0, len(reqs))
	for i := range b.entries {
		if b.entries[i].kind.decided() {
			byReq = append(byReq, i)
		}
	}
	var owns [][]lostAttempt // a handed-back send's throttled delivery that may still count
	for j, i := range byReq {
		if l := handedBackLost(&b.entries[i]); l != nil {
			if owns == nil {
				owns = make([][]lostAttempt, len(byReq))
			}
			owns[j] = l
		}
	}
	decisions, err := w.decide(ctx, reqs, owns, func(out []capping.Decision, still []int) {
		w.writeEarly(ctx, b, reqs, byReq, out, still)
	})
	if err != nil {
		return nil, err
	}
	for j, i := range byReq {
		if e := &b.entries[i]; !e.settled {
			w.settle(e, decisions[j])
		}
	}
	return b, nil
}

// read reads the batch's messages: the requests to decide (the segments
// from one snapshot, the plans from one set), in batch order, and the
// refunds the delivery statuses ask for.
func (w *Worker) read(b *batch) (reqs []capping.Request, refunds []refundReq) {
	snap := w.o.Snapshots.Load()
	b.snap = snap.Version()
	var ps *plans.Set
	if w.o.Plans != nil {
		ps = w.o.Plans.Load()
	}
	var planned []capping.Planned // the batch's bookings, cut per request
	var f fields                  // an intent's, for its lane record if it is held
	for i := range b.msgs {
		m, e := &b.msgs[i], &b.entries[i]
		e.home = m.Partition
		// e is a kindIntent (the zero kind) unless its topic says otherwise.
		switch {
		case m.Topic == w.o.StatusTopic:
			if r, ok := w.readStatus(m, e); ok {
				refunds = append(refunds, refundReq{i, r})
			}
			if e.back == nil {
				continue
			}
		case w.tiers[m.Topic]:
			if !w.readTier(m, e, b.now) { // a hop, or unreadable
				continue
			}
		case w.isLane(m.Topic):
			if !w.readLane(m, e, b.now) { // unreadable
				continue
			}
		case m.Topic == w.parked.topic && w.parked.topic != "":
			if !w.readParked(m, e) { // unreadable
				continue
			}
		}
		in, err := w.decodeIntent(m, e, &f)
		if err != nil {
			e.setUnreadable(err)
			continue
		}
		if !checkHandBack(e, &in) {
			continue
		}
		held, releaseAt := w.hold(e, &in, b.now)
		if held {
			e.held.fields = encodeSpans(m.Value, &f)
			continue
		}
		e.segment, e.campaign = snap.Lookup(in.UserID), in.CampaignID
		r := NewRequest(&in, e.segment)
		r.ReleaseAt = releaseAt
		r.Redelivered = !w.cacheable(m, e)
		r.DeferredSince = e.tier.Since
		r.SendBy = in.SendBy
		if n := len(planned); ps != nil {
			planned = ps.For(planned, in.UserID, r.Priority, b.now)
			r.Planned = planned[n:len(planned):len(planned)]
		}
		if reqs == nil { // made on the first: a batch of held intents has none
			reqs = make([]capping.Request, 0, len(b.msgs)-i)
		}
		reqs = append(reqs, r)
	}
	return reqs, refunds
}

// settle records a decided entry's final decision d: what the output
// makes of it (dead-lettered, shadow-capped) and its deferral after it.
func (w *Worker) settle(e *entry, d capping.Decision) {
	e.decision, e.settled = d, true
	switch o := &e.decision.Outcome; {
	case *o == capping.Invalid:
		e.invalid = engineInvalid(e.decision.Err)
	case w.o.Shadow && e.decision.Shadowed():
		// Shadow mode tries the policy: its verdicts are marked; an
		// operator's order and a user's own limits hold (capping's reason
		// table says which is which).
		*o = capping.ShadowCapped
	case *o == capping.Deferred && len(w.o.Tiers) == 0:
		// The app refuses a policy that defers without tiers; should
		// one get here, the intent is capped rather than lost.
		*o = capping.Capped
	}
	if w.o.Pacer != nil {
		w.settlePacing(e)
	}
	e.next = e.tier.Next(&e.decision)
	if e.tier.paused && e.decision.Reason == capping.ReasonPaused {
		// Still paused: the same wait, looked at again.
		e.next = e.tier.Deferral
	}
}

// engineInvalid is the dead-letter reason of a request the engine refused.
func engineInvalid(err error) *InvalidError {
	var ir *capping.InvalidRequestError
	if errors.As(err, &ir) {
		return invalid(ir.Field, "%s", ir.Reason)
	}
	return invalid("value", "%v", err)
}

type topicPartition struct {
	topic     string
	partition int
}

// rebalanceCounter is a Reader that counts its groups' rebalances
// (*Consumer: Rebalanced counts them since the last call).
type rebalanceCounter interface{ Rebalanced() int64 }

// refusalForgetter is a Decider that remembers refusals (*capping.Engine).
type refusalForgetter interface{ ForgetRefusals() }

// noteRebalance empties the Decider's refusal cache when the worker's
// partitions may have changed since the last batch (the first join
// counts): users of a partition it lost are decided elsewhere now.
func (w *Worker) noteRebalance() {
	r, ok := w.o.Reader.(rebalanceCounter)
	if !ok || r.Rebalanced() == 0 {
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
func (w *Worker) cacheable(m *kafka.Message, e *entry) bool {
	if e.back != nil {
		return false // a send handed back: on the status topic, decided by Redis
	}
	g, ok := w.o.Reader.(cacheGate)
	return ok && g.Cacheable(m, e.home)
}

// writeEarly writes the deliveries of batch b that have their final
// decision while batch-mates wait for a retry (out and still are
// decideEarly's; byReq[j] is request j's entry), once the batch before is
// written: a delivery reaches its topic moments after its decision, not
// after its slowest batch-mate's (a paced release's capper-decided-at is at
// most a second older than its record). Stage 2 writes the rest and commits
// the whole batch, as before; a delivery this write failed is written
// there. A user's later intents in the batch wait for an earlier one that
// is undecided (capping), and a user's deliveries go early only up to
// their first outcome written with the batch, so a user's outcomes stay in
// order even when the batch is never written (its partition moved on).
func (w *Worker) writeEarly(ctx context.Context, b *batch, reqs []capping.Request, byReq []int, out []capping.Decision, still []int) {
	if b.prev == nil {
		return // not in the pipeline (a test's batch): written by its caller
	}
	waiting := make(map[int]bool, len(still))
	for _, j := range still {
		waiting[j] = true
	}
	var sub batch
	var picked []int
	// A user's deliveries go early only up to their first outcome that
	// does not (one written with the batch, or still undecided): should the
	// batch never be written (its partition moved on), the next owner
	// decides that one again, and it would come after a later delivery.
	held := map[uint64]bool{}
	for j, i := range byReq {
		e := &b.entries[i]
		if e.early {
			continue
		}
		if waiting[j] || held[reqs[j].UserID] {
			held[reqs[j].UserID] = true
			continue
		}
		if !e.settled {
			w.settle(e, out[j])
		}
		switch e.decision.Outcome {
		case capping.Invalid, capping.Capped, capping.Cancelled, capping.Deferred:
			held[reqs[j].UserID] = true
			continue
		}
		picked = append(picked, i)
		sub.msgs, sub.entries = append(sub.msgs, b.msgs[i]), append(sub.entries, *e)
	}
	if len(picked) == 0 {
		return
	}
	select {
	case <-b.prev:
	case <-ctx.Done():
		return
	}
	sub.snap, sub.policy, sub.now, sub.controlSeq = b.snap, b.policy, b.now, b.controlSeq
	if err := w.writeAll(ctx, w.route(&sub, nil)); err != nil {
		w.o.Logger.Debug("deliveries decided before their batch-mates not written early; written with the batch", "deliveries", len(picked), "error", err)
		return
	}
	for _, i := range picked {
		b.entries[i].early = true
	}
}
