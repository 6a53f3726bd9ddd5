package replay

// Deferred intents in a replay: a side holds what its policy deferred
// (on_cap: defer, quiet hours) and decides each again at its due time, as
// the worker does when the intent comes out of its delay tier (the worker a
// tier's granularity later at most), before the records decided after it.

import (
	"container/heap"
	"slices"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/capping"
)

// waiting is one deferred intent of a side.
type waiting struct {
	req capping.Request // its strings its own (a source reuses its buffers)
	seq int64           // order of deferral: equal due times keep it
	// what its first decision said of plans (Outcome.Own, HeldFor)
	own     bool
	heldFor string
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

// hold queues a record's r, deferred as o says, to be decided again at
// its NotBefore.
func (s *side) hold(r *capping.Request, o *Outcome) {
	d := &o.Decision
	w := waiting{req: *r, own: o.Own, heldFor: strings.Clone(o.HeldFor)}
	w.req.IntentID, w.req.Channel, w.req.Category = strings.Clone(r.IntentID), strings.Clone(r.Channel), strings.Clone(r.Category)
	w.req.Campaign, w.req.Segment = strings.Clone(r.Campaign), strings.Clone(r.Segment)
	w.req.Tags = slices.Clone(r.Tags)
	for i, t := range w.req.Tags {
		w.req.Tags[i] = strings.Clone(t)
	}
	s.requeue(w, d)
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

// release decides again, in due order, every deferred intent due at or
// before t; users counts what they end up as.
func (s *side) release(t time.Time, users *userCounts, i int) {
	for len(s.waiting) > 0 && !s.waiting[0].req.At.After(t) {
		w := heap.Pop(&s.waiting).(waiting)
		d := s.decide(&w.req)
		if d.Err != nil { // it was valid when first decided
			d = capping.Decision{Outcome: capping.Invalid}
		}
		if d.Outcome == capping.Deferred { // its strings are already its own
			s.stats.Hops++
			s.requeue(w, &d)
			continue
		}
		o := Outcome{Segment: w.req.Segment, Decision: d, User: w.req.UserID, Priority: w.req.Priority, Own: w.own, HeldFor: w.heldFor}
		s.stats.count(w.req.Channel, w.req.Campaign, &o)
		users.add(w.req.UserID, i, d.Outcome == capping.Allowed)
	}
}
