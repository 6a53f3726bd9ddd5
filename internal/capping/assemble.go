package capping

// How a batch's decisions are assembled, the same for the Redis engine
// (decide.go) and Memory (memory.go): each request is checked (invalid,
// quiet hours, exempt, overrides) and planned; the refusal cache, when there
// is one, answers what it may (a pass before); the script, or its Go port,
// decides the rest; each reply becomes a decision with its override marks,
// and the cache learns from it (a pass after); last, every decision gets
// the deferral step and the policy's name.

import (
	"errors"
	"slices"

	"github.com/capper-dev/capper/internal/control"
)

// call is one request the script (or its port) decides.
type call struct {
	i      int // its request
	plan   callPlan
	bypass bool // an honoured bypass: recorded without checking
	// wantIdem: a refusal should return the user's idempotency entries
	// (the refusal cache does not know them).
	wantIdem bool
	redisCall
}

// assembly is one batch being decided.
//
// A user's requests are decided in batch order: a user has at most one call
// in a round, a later request of theirs is considered only once the earlier
// ones have their answers, and once one of them fails (Redis could not
// answer it) the user's later requests wait too, undecided
// (ErrEarlierUndecided), so that no retry of the failed one comes after a
// decision on a later one (by Redis, the cache or the checks alike).
type assembly struct {
	set   *policySet
	reqs  []Request
	out   []Decision
	calls []call    // this round's
	cache *refusals // nil: no cache
	// asked counts valid requests (exempt ones included); hits those the
	// cache answered.
	asked, hits int
	// later: requests of users who have a call in this round, decided in
	// a later one, once the answer to that call is known (see next).
	later []call
	// called: users with a call in this round.
	called map[uint64]bool
	// failed: users a request of whom got no answer in this batch.
	failed map[uint64]bool
	// sendBy[i]: the campaign record whose send-by is request i's deadline
	// (nil: its own), as check found it, for after.
	sendBy []*control.Entry
}

// ErrEarlierUndecided is a request's Decision.Err when an earlier request
// of its user in the batch was not decided (its call failed): it waits for
// that one, and is decided with it when the batch is retried.
var ErrEarlierUndecided = errors.New("an earlier intent of the same user is not decided yet")

// assemble checks and plans a batch, answering what needs no script, and
// makes the first round's calls (a.calls) for the script: a user's first
// request that needs the script is this round's call and the user's later
// ones wait for the next round (a.later). With a refusal cache, when the
// first is refused the cache then answers those that follow (a blast that
// sends a user several intents in a row costs Redis one or two calls, not
// one each). known remembers the batch's calendar periods. a's slices and
// maps are reused.
func (ps *policySet) assemble(a *assembly, reqs []Request, cache *refusals, known *periods) {
	*a = assembly{set: ps, reqs: reqs, out: a.out[:0], calls: a.calls[:0], later: a.later[:0], cache: cache,
		called: a.called, failed: a.failed, sendBy: a.sendBy}
	a.out = append(a.out, make([]Decision, len(reqs))...)
	if a.called == nil {
		a.called, a.failed = make(map[uint64]bool, len(reqs)), map[uint64]bool{}
	}
	clear(a.called)
	clear(a.failed)
	a.sendBy = slices.Grow(a.sendBy[:0], len(reqs))[:len(reqs)]
	clear(a.sendBy)
	for i := range reqs {
		r := &reqs[i]
		d, sendBy, bypass, err := ps.check(r)
		a.sendBy[i] = sendBy
		if err != nil {
			a.out[i].Err = err
			continue
		}
		a.asked++
		if d != nil {
			a.out[i] = *d
			continue
		}
		a.out[i].OverrideRefused = r.Override != NoOverride && !bypass
		a.consider(call{i: i, plan: ps.plan(r, known), bypass: bypass})
	}
}

// consider answers c from the cache, or makes it a call of this round, or
// (a user with a call in this round already) keeps it for a later one, or
// (a user whose earlier request failed) fails it with ErrEarlierUndecided.
func (a *assembly) consider(c call) {
	r := &a.reqs[c.i]
	switch {
	case a.failed[r.UserID]:
		a.out[c.i] = Decision{Err: ErrEarlierUndecided}
		return
	case a.called[r.UserID]:
		a.later = append(a.later, c)
		return
	}
	a.called[r.UserID] = true
	if a.cache == nil {
		a.calls = append(a.calls, c)
		return
	}
	m := a.cache.memoOf(r.UserID)
	// Bookings of campaign plans count as sends for this intent only: the
	// cache, which knows what Redis found full, may not answer it.
	if !c.bypass && !r.Redelivered && !c.plan.anyBooked {
		if d, ok := a.cache.lookup(a.set, r, c.plan, m); ok {
			refused := a.out[c.i].OverrideRefused
			a.out[c.i] = d
			a.out[c.i].OverrideRefused = refused
			a.hits++
			a.called[r.UserID] = false // answered: the user's next may go on
			return
		}
	}
	// A refusal brings the user's ids when the cache lacks them.
	c.wantIdem = m == nil || !m.known
	a.calls = append(a.calls, c)
}

// next starts the next round with the requests kept for it; false when
// none is left. A round holds at most one call per user, so a batch takes
// as many rounds as its most frequent user has requests Redis decides in
// a row (the cache answers what follows a refusal within the round).
func (a *assembly) next() bool {
	if len(a.later) == 0 {
		return false
	}
	later := a.later
	a.calls, a.later = a.calls[:0], nil
	clear(a.called)
	for _, c := range later {
		a.consider(c)
	}
	return true
}

// answer turns the reply to call k into its decision (err: the call
// failed, the request is decided again later); the cache learns from it.
func (a *assembly) answer(k int, rep reply, err error) {
	c := &a.calls[k]
	r, d := &a.reqs[c.i], &a.out[c.i]
	refused := d.OverrideRefused
	if err == nil {
		*d, err = a.set.decision(rep, r, c.plan)
	}
	if err != nil {
		*d = Decision{Err: err}
		a.failed[r.UserID] = true
		// The script may have run (a lost reply, a send whose replicas
		// did not acknowledge it): what the cache knows of the user may
		// not be what Redis holds now.
		if a.cache != nil {
			a.cache.forgetUser(r.UserID)
		}
		return
	}
	d.OverrideRefused = refused
	// A redelivered bypass is marked too: it is the same message, and a
	// reader counting sends must not check it against the caps.
	if c.bypass && (d.Outcome == Allowed || d.Outcome == Duplicate) {
		d.Override = Bypass
	}
	// A refusal that counted bookings of campaign plans is this intent's
	// only: the cache learns sends from it, not that refusal.
	switch {
	case a.cache == nil:
	case d.Outcome == Duplicate:
		// Allowed before, by this worker or another: a send the cache may
		// not know of, which the limits it remembers as full or not count.
		a.cache.forgetUser(r.UserID)
	case !c.plan.anyBooked || d.Outcome != Capped:
		a.cache.remember(a.set, r, c.plan, *d, rep.idem, rep.withIdem)
	}
}

// fail fails the requests kept for later rounds (the batch stops: its
// context ended).
func (a *assembly) fail(err error) {
	for _, c := range append(a.calls, a.later...) {
		if a.out[c.i].Outcome == Allowed && a.out[c.i].Err == nil && a.out[c.i].At.IsZero() {
			a.out[c.i] = Decision{Err: err}
		}
	}
	a.later = nil
}

// finish keeps the batch's order (a decision on a request of a user whose
// earlier request failed is taken back: it waits for that one), names the
// policy on every decision and defers the capped ones whose limit says so
// (after the cache saw them: it remembers what the script said, a capped
// limit).
func (a *assembly) finish() {
	// Built again in batch order: a user's requests before the first that
	// failed keep their answers (a.failed, filled as answers came, does not
	// say which request came first).
	clear(a.failed)
	for i := range a.out {
		d := &a.out[i]
		switch uid := a.reqs[i].UserID; {
		case d.Err != nil && !errors.Is(d.Err, ErrInvalidRequest):
			a.failed[uid] = true
		case d.Err == nil && a.failed[uid]:
			// After one that failed, answered without Redis (exempt,
			// quiet hours): nothing was written for it, so it can wait.
			*d = Decision{Err: ErrEarlierUndecided}
		}
		d.Policy = a.set.name
		a.set.after(&a.reqs[i], d, a.sendBy[i])
	}
}
