package replay

// Deferred intents in a replay: a side holds what its policy deferred
// (on_cap: defer, quiet hours) and decides each again at its due time, as
// the worker does when the intent comes out of its delay tier (the worker a
// tier's granularity later at most), before the records decided after it.
// One a budget paces waits in its lane again when it comes due (pacing.go),
// as the worker holds it again.

import (
	"container/heap"
	"slices"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/pacing"
)

// waiting is one deferred intent of a side (or one held in a budget's
// lane).
type waiting struct {
	req  capping.Request // its strings its own (a source reuses its buffers)
	pace pacing.Intent   // what budgets match it on
	seq  int64           // order of deferral: equal due times keep it
	// what its first decision said of plans (Outcome.Own, HeldFor)
	own     bool
	heldFor string
	// decided: it was decided before (a paced intent is not decided when
	// it arrives; a deferred one is, once)
	decided bool
}

// waitQueue is a side's deferred intents, the earliest due first.
type waitQueue []waiting

func (q waitQueue) Len() int { return len(q) }
func (q waitQueue) Less(i, j int) bool {
	if c := q[i].req.At.Compare(q[j].req.At); c != 0 {
		return c < 0
	}
	return q[i].seq < q[j].seq
}
func (q waitQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *waitQueue) Push(x any)   { *q = append(*q, x.(waiting)) }
func (q *waitQueue) Pop() any {
	old := *q
	w := old[len(old)-1]
	*q = old[:len(old)-1]
	return w
}

// hold queues a record's r (pi: what budgets match it on), deferred as o
// says, to be decided again at its NotBefore.
func (s *side) hold(r *capping.Request, pi pacing.Intent, o *Outcome) {
	w := ownRequest(r, pi, o.Own, o.HeldFor)
	w.decided = true
	s.requeue(w, &o.Decision)
}

// ownRequest is r (pi: what budgets match it on) with its strings its
// own, to wait.
func ownRequest(r *capping.Request, pi pacing.Intent, own bool, heldFor string) waiting {
	w := waiting{req: *r, pace: pi.Clone(), own: own, heldFor: strings.Clone(heldFor)}
	w.req.IntentID, w.req.Channel, w.req.Category = strings.Clone(r.IntentID), strings.Clone(r.Channel), strings.Clone(r.Category)
	w.req.Campaign, w.req.Segment = strings.Clone(r.Campaign), strings.Clone(r.Segment)
	w.req.Tags = slices.Clone(r.Tags)
	for i, t := range w.req.Tags {
		w.req.Tags[i] = strings.Clone(t)
	}
	w.req.Planned = nil
	return w
}

// requeue queues w, deferred (again) by d: its deferral advances as the
// worker's does (capping.Deferral), and it is due at d.NotBefore, after
// what was deferred before it.
func (s *side) requeue(w waiting, d *capping.Decision) {
	w.req.DeferredSince = capping.Deferral{Since: w.req.DeferredSince}.Next(d).Since
	w.req.At, w.seq = d.NotBefore, s.seq
	s.seq++
	heap.Push(&s.waiting, w)
}

// due decides again a deferred intent w that comes due (at w.req.At), or
// holds it in its budget's lane, as the worker does.
func (s *side) due(w waiting) {
	at := w.req.At
	w.req.ReleaseAt = time.Time{}
	sim, lane, charge := s.place(&w.req, w.pace)
	if sim != nil {
		t, late := sim.late(lane, at, w.req.SendBy)
		if !late {
			sim.hold(w, lane, at)
			return
		}
		w.req.ReleaseAt = t
	}
	d := s.decide(&w.req)
	switch {
	case sim != nil:
		sim.expired(&w.req, &d)
	case charge != nil:
		charge.charge(at, &d)
	}
	s.settle(w, d)
}

// settle counts what a deferred or paced intent w was decided as (d), or
// queues it again when d defers it.
func (s *side) settle(w waiting, d capping.Decision) {
	if d.Err != nil { // it was valid when it arrived
		d = capping.Decision{Outcome: capping.Invalid}
	}
	if !w.decided { // a paced intent's first decision
		w.heldFor = strings.Clone(d.HeldFor)
	}
	if d.Outcome == capping.Deferred { // its strings are already its own
		if w.decided {
			s.stats.Hops++
		} else {
			s.stats.Deferred++
		}
		w.decided = true
		s.requeue(w, &d)
		return
	}
	o := Outcome{Segment: w.req.Segment, Decision: d, User: w.req.UserID, Priority: w.req.Priority, Own: w.own, HeldFor: w.heldFor}
	s.stats.count(w.req.Channel, w.req.Campaign, &o)
	s.users.add(w.req.UserID, s.idx, d.Outcome == capping.Allowed)
}

// popWaiting takes the deferred intent due first.
func (s *side) popWaiting() waiting { return heap.Pop(&s.waiting).(waiting) }
