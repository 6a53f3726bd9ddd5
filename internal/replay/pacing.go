package replay

// Send pacing in a replay. Each budget of a side's policy is a token
// bucket on the replay's clock (its rate a second, its burst above it, full
// when first used), as the budget's bucket in Redis is on Redis' clock. An
// intent the budget covers (not exempt) is not decided when it arrives: it
// waits in its lane, and is decided when the bucket releases it, in time
// order with the records and the deferred intents that come due. A lane
// is served only while no lane above it waits; within a lane, in arrival
// order. An exempt intent is decided at once and, delivered, takes a token
// ahead of the lanes (the bucket may go below zero: the lanes wait for
// it). What it does not model: the worker's leases (a unit of tokens at a
// time, released up to 10 ms after their tokens' time), several workers
// and their partitions, the lag the worker's send-by check reads (here the
// wait is the lanes' exact content), campaign control.

import (
	"math"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/pacing"
)

// Release is a paced intent when its budget released it (Options.Released).
type Release struct {
	IntentID string
	User     uint64
	Budget   string
	Lane     string
	// HeldSince is when it arrived in its lane (a deferred intent: when
	// it came due); ReleasedAt when it left it (its decision time).
	HeldSince, ReleasedAt time.Time
	// Token is false for one that reached the head of its lane past its
	// send-by: it passed without a token (and is cancelled).
	Token    bool
	Decision capping.Decision
}

// budgetSim is one budget of a side: its bucket and its lanes.
type budgetSim struct {
	b     *pacing.Budget
	stats *BudgetStats
	lanes []laneQueue
	n     int       // intents in the lanes
	tok   float64   // tokens at ts (below zero: exempt sends' debt)
	ts    time.Time // zero: never used (the bucket is full)
}

// heldIntent is an intent waiting in a lane since since.
type heldIntent struct {
	w     waiting
	since time.Time
}

// laneQueue is a lane: the intents waiting in it, in arrival order.
type laneQueue struct {
	q    []heldIntent
	head int
}

func (l *laneQueue) len() int { return len(l.q) - l.head }

func (l *laneQueue) push(h heldIntent) {
	if l.head > 0 && l.head >= len(l.q)/2 { // reuse the room released
		l.q = l.q[:copy(l.q, l.q[l.head:])]
		l.head = 0
	}
	l.q = append(l.q, h)
}

func (l *laneQueue) pop() heldIntent {
	h := l.q[l.head]
	l.q[l.head] = heldIntent{}
	l.head++
	if l.head == len(l.q) {
		l.q, l.head = l.q[:0], 0
	}
	return h
}

// pace sets the side's budgets (nil: none).
func (s *side) pace(set *pacing.Set) {
	s.set = set
	bs := set.Budgets()
	for i := range bs {
		b := &bs[i]
		st := &BudgetStats{Budget: b.Name, Rate: b.Rate, Burst: b.Burst}
		for _, l := range b.Lanes {
			st.Lanes = append(st.Lanes, LaneStats{Lane: l.Name})
		}
		s.budgets = append(s.budgets, &budgetSim{b: b, stats: st, lanes: make([]laneQueue, len(b.Lanes))})
		s.stats.Budgets = append(s.stats.Budgets, st)
	}
}

// place is where the side's budgets put an intent r (pi: what budgets
// match it on): the budget and lane it waits in (sim nil: none paces it),
// or, for an exempt intent a budget covers, the budget its delivery is
// charged to.
func (s *side) place(r *capping.Request, pi pacing.Intent) (sim *budgetSim, lane int, charge *budgetSim) {
	if len(s.budgets) == 0 {
		return nil, 0, nil
	}
	p, ok := s.set.Match(pi)
	switch {
	case !ok:
		return nil, 0, nil
	case s.set.Exempt(r.Category):
		return nil, 0, s.budgets[p.Budget]
	}
	return s.budgets[p.Budget], p.Lane, nil
}

// refill brings the bucket to t.
func (b *budgetSim) refill(t time.Time) {
	switch {
	case b.ts.IsZero():
		b.tok, b.ts = float64(b.b.Burst), t
	case t.After(b.ts):
		b.tok = min(float64(b.b.Burst), b.tok+t.Sub(b.ts).Seconds()*b.b.Rate)
		b.ts = t
	}
}

// tokenAt is when the bucket, from its state at ts, has given k tokens
// (to the millisecond, rounded up: a release never comes before its
// token). Only for k of 1, or for tokens taken as they come (the lanes
// are never idle while they wait): the burst does not cap them.
func (b *budgetSim) tokenAt(k float64) time.Time {
	need := k - b.tok
	if need <= 0 {
		return b.ts
	}
	ms := math.Ceil(need/b.b.Rate*1000 - 1e-6) // float error must not cost a millisecond
	return b.ts.Add(time.Duration(ms) * time.Millisecond)
}

// late says when an intent put in lane at t would be released (after
// every intent waiting in its lane and the lanes above it, at the rate),
// and whether that is after its send-by by (zero: none), when it is
// cancelled at once instead of held.
func (b *budgetSim) late(lane int, t, by time.Time) (time.Time, bool) {
	if by.IsZero() {
		return time.Time{}, false
	}
	b.refill(t)
	ahead := 0
	for j := 0; j <= lane; j++ {
		ahead += b.lanes[j].len()
	}
	at := b.tokenAt(float64(ahead + 1))
	if at.Before(t) {
		at = t
	}
	return at, at.After(by)
}

// hold puts w in lane at t.
func (b *budgetSim) hold(w waiting, lane int, t time.Time) {
	b.refill(t) // an idle bucket's tokens count from now
	w.req.ReleaseAt = time.Time{}
	b.lanes[lane].push(heldIntent{w: w, since: t})
	b.n++
	b.stats.Paced++
	b.stats.Lanes[lane].Paced++
}

// expired counts an intent r cancelled when it arrived (d) because its
// lane would have released it after its send-by (not one already past
// it).
func (b *budgetSim) expired(r *capping.Request, d *capping.Decision) {
	if d.Outcome == capping.Cancelled && d.Reason == capping.ReasonExpired && !r.At.After(r.SendBy) {
		b.stats.ExpiredAtArrival++
	}
}

// charge takes a token at t for an exempt intent's send (d), as the
// worker charges it with its next lease.
func (b *budgetSim) charge(t time.Time, d *capping.Decision) {
	switch d.Outcome {
	case capping.Allowed, capping.Duplicate, capping.Exempt, capping.ShadowCapped, capping.FailOpen:
		b.refill(t)
		b.tok--
		b.stats.ExemptCharged++
	}
}

// next is when the budget releases next (ok false: nothing waits).
func (b *budgetSim) next() (at time.Time, ok bool) {
	if b.n == 0 {
		return time.Time{}, false
	}
	return b.tokenAt(1), true
}

// top is the highest lane that waits.
func (b *budgetSim) top() int {
	for j := range b.lanes {
		if b.lanes[j].len() > 0 {
			return j
		}
	}
	return -1
}

// nextRelease is the side's next release: its time and budget (nil:
// nothing waits in any lane).
func (s *side) nextRelease() (at time.Time, sim *budgetSim) {
	for _, b := range s.budgets {
		if t, ok := b.next(); ok && (sim == nil || t.Before(at)) {
			at, sim = t, b
		}
	}
	return at, sim
}

// advance decides, in time order, everything due at or before t:
// deferred intents that come due (first at equal times) and the budgets'
// releases.
func (s *side) advance(t time.Time) {
	for {
		at, sim := s.nextRelease()
		if len(s.waiting) > 0 {
			due := s.waiting[0].req.At
			if !due.After(t) && (sim == nil || !due.After(at)) {
				s.due(s.popWaiting())
				continue
			}
		}
		if sim == nil || at.After(t) {
			return
		}
		s.release(sim, at)
	}
}

// drain decides every intent waiting in a lane (and the deferred ones
// that come due meanwhile), after the last record.
func (s *side) drain() {
	for {
		at, sim := s.nextRelease()
		if sim == nil {
			return
		}
		s.advance(at)
	}
}

// release releases the head of b's highest waiting lane at at, and decides
// it then: with a token, or without one when it is past its send-by (it
// is cancelled, as the worker's gate lets it through).
func (s *side) release(b *budgetSim, at time.Time) {
	b.refill(at)
	lane := b.top()
	h := b.lanes[lane].pop()
	b.n--
	w := h.w
	token := w.req.SendBy.IsZero() || !at.After(w.req.SendBy)
	if token {
		b.tok--
	} else {
		b.stats.ExpiredWaiting++
	}
	b.stats.left(lane, at.Sub(h.since), at)
	w.req.At = at
	d := s.decide(&w.req)
	if s.released != nil {
		s.released(s.name, &Release{IntentID: w.req.IntentID, User: w.req.UserID, Budget: b.b.Name, Lane: b.b.Lanes[lane].Name,
			HeldSince: h.since, ReleasedAt: at, Token: token, Decision: d})
	}
	s.settle(w, d)
}
