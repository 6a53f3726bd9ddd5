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
	calls []call
	cache *refusals // nil: no cache
	// asked counts valid requests (exempt ones included); hits those the
	// cache answered.
	asked, hits int
	// pending: users with a call in this batch, whom the cache does not
	// answer (the call may be allowed and move the retry-after).
	pending map[uint64]bool
}

// assemble checks and plans a batch, answering what needs no script;
// a.calls are left for the script. known remembers the batch's calendar
// periods. a's slices are reused.
func (ps *policySet) assemble(a *assembly, reqs []Request, cache *refusals, known *periods) {
	*a = assembly{set: ps, reqs: reqs, out: a.out[:0], calls: a.calls[:0], cache: cache, pending: a.pending}
	a.out = append(a.out, make([]Decision, len(reqs))...)
	if cache != nil && a.pending == nil {
		a.pending = make(map[uint64]bool, len(reqs))
	}
	clear(a.pending)
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
		c := call{i: i, plan: ps.plan(r, known), bypass: bypass}
		refused := r.Override != NoOverride && !bypass
		if cache != nil {
			m := cache.memoOf(r.UserID)
			if !bypass && !r.Redelivered && !a.pending[r.UserID] {
				if d, ok := cache.lookup(ps, r, c.plan, m); ok {
					a.out[i] = d
					a.out[i].OverrideRefused = refused
					a.hits++
					continue
				}
			}
			// A refusal brings the user's ids when the cache lacks them.
			c.wantIdem = m == nil || !m.known
			a.pending[r.UserID] = true
		}
		a.out[i].OverrideRefused = refused
		a.calls = append(a.calls, c)
	}
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
	if a.cache != nil {
		a.cache.remember(a.set, r, c.plan, *d, rep.idem, rep.withIdem)
	}
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
