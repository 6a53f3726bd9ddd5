package capping

// How a batch's decisions are assembled, the same for the Redis engine
// (decide.go) and Memory (memory.go): each request is checked (invalid,
// quiet hours, exempt, overrides) and planned; the refusal cache, when there
// is one, answers what it may (a pass before); the script, or its Go port,
// decides the rest; each reply becomes a decision with its override marks,
// and the cache learns from it (a pass after); last, every decision gets
// the deferral step and the policy's name.

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
	// the next one, once the cache learned from it (see next).
	later []call
	// called: users with a call in this round.
	called map[uint64]bool
}

// maxRounds bounds the rounds of a batch: the last sends every call left,
// a user's in order in one pipeline.
const maxRounds = 4

// assemble checks and plans a batch, answering what needs no script, and
// makes the first round's calls (a.calls) for the script. With a refusal
// cache, a user's first request that needs the script is this round's call
// and the user's later ones wait for the next round (a.later): when the
// first is refused, the cache then answers them (a blast that sends a user
// several intents in a row costs Redis one or two calls, not one each).
// known remembers the batch's calendar periods. a's slices are reused.
func (ps *policySet) assemble(a *assembly, reqs []Request, cache *refusals, known *periods) {
	*a = assembly{set: ps, reqs: reqs, out: a.out[:0], calls: a.calls[:0], later: a.later[:0], cache: cache, called: a.called}
	a.out = append(a.out, make([]Decision, len(reqs))...)
	if cache != nil && a.called == nil {
		a.called = make(map[uint64]bool, len(reqs))
	}
	clear(a.called)
	for i := range reqs {
		r := &reqs[i]
		d, bypass, err := ps.check(r)
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
		a.consider(call{i: i, plan: ps.plan(r, known), bypass: bypass}, false)
	}
}

// consider answers c from the cache, or makes it a call of this round, or
// (a user with a call in this round already, and not the last round) keeps
// it for the next one.
func (a *assembly) consider(c call, last bool) {
	r := &a.reqs[c.i]
	if a.cache == nil {
		a.calls = append(a.calls, c)
		return
	}
	if a.called[r.UserID] && !last {
		a.later = append(a.later, c)
		return
	}
	m := a.cache.memoOf(r.UserID)
	// Bookings of campaign plans count as sends for this intent only: the
	// cache, which knows what Redis found full, may not answer it.
	if !c.bypass && !r.Redelivered && !a.called[r.UserID] && !c.plan.anyBooked {
		if d, ok := a.cache.lookup(a.set, r, c.plan, m); ok {
			refused := a.out[c.i].OverrideRefused
			a.out[c.i] = d
			a.out[c.i].OverrideRefused = refused
			a.hits++
			return
		}
	}
	// A refusal brings the user's ids when the cache lacks them.
	c.wantIdem = m == nil || !m.known
	a.called[r.UserID] = true
	a.calls = append(a.calls, c)
}

// next starts the next round with the requests kept for it (round counts
// from 1); false when none is left.
func (a *assembly) next(round int) bool {
	if len(a.later) == 0 {
		return false
	}
	later := a.later
	a.calls, a.later = a.calls[:0], nil
	clear(a.called)
	for _, c := range later {
		a.consider(c, round >= maxRounds)
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
	if a.cache != nil && (!c.plan.anyBooked || d.Outcome != Capped) {
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

// finish names the policy on every decision and defers the capped ones
// whose limit says so (after the cache saw them: it remembers what the
// script said, a capped limit).
func (a *assembly) finish() {
	for i := range a.out {
		a.out[i].Policy = a.set.name
		a.set.deferral(&a.reqs[i], &a.out[i])
	}
}
