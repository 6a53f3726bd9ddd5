package capping

// The refusal cache: a worker remembers which limits refused a user until
// they free a slot, and answers repeats without asking Redis. During a blast
// most intents go to users already at their cap; those are the calls it saves.
//
// It answers exactly as Redis would, or not at all. A remembered limit is
// full until its retry-after (only time frees a slot, or a refund or a policy
// change, hence the TTL). The limits ahead of it in policy order that applied
// to the refused intent were not full (Redis names the first full one), and
// only a send can fill a limit: a send this worker records drops what it
// remembered about the limits counting its scopes, full or not. So the
// cache answers an intent only when its first applicable limit known full has
// every applicable limit ahead of it known not full. A retry of an intent
// Redis allowed must stay a duplicate: a refusal comes with the user's
// idempotency entries (the ids Redis would call duplicates), the cache adds
// the ids allowed after it, and never answers those. Another worker may
// still allow an id for the user while its partition moves over, which is
// why the cache never answers a request marked Redelivered (dispatch marks
// the records that existed when it took their partition over) and the
// worker empties it when its partitions change (ForgetRefusals).

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// refusalKey names one full limit of a user: a limit of a compiled policy
// (by index), the campaign for a per-campaign limit, and for a limit with
// reserved slots whether the priority is below the reserve's (the two see
// different maxima, so different free times).
type refusalKey struct {
	pol      int32
	limit    int32
	campaign [3]byte
	reserved bool
}

// refusal is what a refusal showed: the limit is full until free (decision
// time), or never frees; the entry is believed until expires.
type refusal struct {
	// set is the compiled policy the limit belongs to: after a policy
	// change the indexes of the key mean other limits.
	set           *policySet
	key           refusalKey
	free, expires time.Time
	never         bool
	// zone: a calendar limit's period is in this time zone; a request in
	// another one has other boundaries.
	zone *time.Location
	// before: the limits of the policy ahead of this one that applied to
	// the refused request; Redis found them not full (it names the first
	// full one), and only a send can fill them. campaign and priority are
	// the refused request's, for those of them that count per campaign or
	// keep reserved slots.
	before   uint32
	campaign [3]byte
	priority Priority
}

// refusals is an LRU of users, bounded by a byte budget (and a number of
// users), each with the limits found full for them (a user has few; one
// lookup per intent) and the ids seen allowed.
type refusals struct {
	// users: a user's memo is never changed in place (copy on write):
	// concurrent batches may read it. Two batches updating one user at once
	// may lose an update: a lost refusal costs a Redis call, a lost drop
	// keeps a retry-after a little early, a lost id would be answered capped
	// instead of duplicate; dispatch decides one batch at a time.
	mu       sync.Mutex
	users    *simplelru.LRU[uint64, *memo]
	bytes    int64 // what the memos cost (memoBytes), in all
	maxBytes int64
	ttl      time.Duration
}

// memo is what the cache knows of one user.
type memo struct {
	full []refusal
	// allowed: the ids Redis would call duplicates (their 5-byte
	// digests, as Redis keeps them): the idempotency entries of the last
	// refusal, and the ids allowed since. known: allowed is complete (a
	// refusal set it, and it never outgrew maxAllowedIDs); a memo made by
	// an allowed id alone does not know the user's earlier ones.
	allowed []idemEntry
	known   bool
}

// What a memo costs in memory, measured (BenchmarkRefusalCacheBytes): the
// LRU's entry and map slot with the memo, and each refusal and id in it.
const (
	memoBaseBytes    = 160
	memoRefusalBytes = 120
	memoIDBytes      = 16
)

// MemoBytes is what the refusal cache costs per user with one remembered
// refusal and no ids (the common case in a blast): for sizing.
const MemoBytes = memoBaseBytes + memoRefusalBytes

func (m *memo) cost() int64 {
	return memoBaseBytes + memoRefusalBytes*int64(cap(m.full)) + memoIDBytes*int64(cap(m.allowed))
}

// maxAllowedIDs bounds the ids kept per user (a user past it is not
// answered until Redis refuses it again, which sends the list afresh).
const maxAllowedIDs = 64

// newRefusals makes a cache of at most maxUsers users (0: no such bound)
// costing at most maxBytes.
func newRefusals(maxUsers int, maxBytes int64, ttl time.Duration) (*refusals, error) {
	rc := &refusals{maxBytes: maxBytes, ttl: ttl}
	if maxUsers <= 0 {
		maxUsers = math.MaxInt32
	}
	users, err := simplelru.NewLRU[uint64, *memo](maxUsers, func(_ uint64, m *memo) { rc.bytes -= m.cost() })
	if err != nil {
		return nil, err
	}
	rc.users = users
	return rc, nil
}

// add remembers a user's memo, dropping the least recently used users
// while the budget is exceeded.
func (rc *refusals) add(user uint64, m *memo) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if old, ok := rc.users.Peek(user); ok {
		rc.bytes -= old.cost()
	}
	rc.users.Add(user, m)
	rc.bytes += m.cost()
	for rc.bytes > rc.maxBytes && rc.users.Len() > 1 {
		rc.users.RemoveOldest()
	}
}

// remove forgets a user.
func (rc *refusals) remove(user uint64) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.users.Remove(user)
}

// peek is a user's memo without making it recent.
func (rc *refusals) peek(user uint64) *memo {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	m, _ := rc.users.Peek(user)
	return m
}

// memoOf is what the cache knows of a user (nil: nothing). The memo is
// never changed in place.
func (rc *refusals) memoOf(user uint64) *memo {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	m, _ := rc.users.Get(user)
	return m
}

// mayHaveAllowed reports whether Redis may call id a duplicate at now:
// listed and young enough, or the list is not complete.
func (m *memo) mayHaveAllowed(id string, now, idem int64) bool {
	if !m.known {
		return true
	}
	d := digest(id)
	return slices.ContainsFunc(m.allowed, func(a idemEntry) bool {
		return [5]byte(d[:5]) == a.digest && a.at >= now-idem
	})
}

func (rc *refusals) key(set *policySet, r *Request, pol, limit int) refusalKey {
	l := &set.pols[pol].limits[limit]
	k := refusalKey{pol: int32(pol), limit: int32(limit)}
	if set.scopes[l.scope].per == PerCampaign {
		k.campaign = campaignHash(r.Campaign)
	}
	k.reserved = l.Reserve.Slots > 0 && r.Priority < l.Reserve.Below
	return k
}

// lookup answers a request from a remembered refusal, exactly as Redis
// would: the first limit (in policy order) that applies to it is known full,
// and every applicable limit ahead of it is known not full (it applied to
// the remembered refusal, for the same campaign, side of the reserve and
// time zone where those matter). m is the user's memo (memoOf).
func (rc *refusals) lookup(set *policySet, r *Request, c callPlan, m *memo) (Decision, bool) {
	if m == nil || m.mayHaveAllowed(r.IntentID, r.At.Unix(), set.idem) {
		return Decision{}, false
	}
	known := m.full
	limits := set.pols[c.pol].limits
	for i, l := range limits {
		if c.applies&(1<<i) == 0 {
			continue
		}
		k := rc.key(set, r, c.pol, i)
		j := slices.IndexFunc(known, func(f refusal) bool { return f.set == set && f.key == k })
		if j < 0 {
			continue
		}
		f := &known[j]
		if !r.At.Before(f.expires) || (l.Calendar != None && f.zone != set.location(r)) {
			continue
		}
		ahead := c.applies & (1<<i - 1)
		if ahead&^f.before != 0 {
			return Decision{}, false // an earlier limit may be full: Redis names it
		}
		for a := range i {
			if ahead&(1<<a) == 0 {
				continue
			}
			e := &limits[a]
			switch {
			case set.scopes[e.scope].per == PerCampaign && campaignHash(r.Campaign) != f.campaign,
				e.Reserve.Slots > 0 && (r.Priority < e.Reserve.Below) != (f.priority < e.Reserve.Below),
				e.Calendar != None && set.location(r) != f.zone:
				return Decision{}, false
			}
		}
		d := Decision{Outcome: Capped, Limit: l.Name, At: r.At, RetryAfter: RetryAfter{Never: f.never}}
		if !f.never {
			d.RetryAfter.In = f.free.Sub(r.At)
		}
		return d, true
	}
	return Decision{}, false
}

// remember records what Redis answered: a refusal (withIdem: with the
// user's idempotency entries, idem), or an id allowed.
func (rc *refusals) remember(set *policySet, r *Request, c callPlan, d Decision, idem string, withIdem bool) {
	old := rc.peek(r.UserID)
	if old == nil {
		old = &memo{}
	}
	now := r.At.Unix()
	next := &memo{known: old.known}
	switch d.Outcome {
	case Allowed, Duplicate:
		// A send the limits of its scopes count, in every policy: what was
		// remembered about them is stale (a higher priority, or a bypass,
		// used a slot); also what was known not full: the send may fill it.
		// A duplicate sends nothing.
		for _, f := range old.full {
			if d.Outcome == Duplicate || !f.staleAfterSend(set, c) {
				next.full = append(next.full, f)
			}
		}
		for _, a := range old.allowed {
			if a.at >= now-set.idem { // older ones Redis no longer knows either
				next.allowed = append(next.allowed, a)
			}
		}
		if len(next.allowed) >= maxAllowedIDs {
			next.known, next.allowed = false, nil
		}
		if next.known {
			dg := digest(r.IntentID)
			next.allowed = append(next.allowed, idemEntry{digest: [5]byte(dg[:5]), at: now})
		}
		if len(next.full) == 0 && !next.known {
			rc.remove(r.UserID) // nothing to answer with until a refusal
			return
		}
		rc.add(r.UserID, next)
		return
	case Capped:
	default:
		return
	}
	limit := -1
	for i, l := range set.pols[c.pol].limits {
		if l.Name == d.Limit {
			limit = i
			break
		}
	}
	if limit < 0 {
		return
	}
	f := refusal{set: set, key: rc.key(set, r, c.pol, limit), free: r.At.Add(d.RetryAfter.In), expires: r.At.Add(rc.ttl),
		never: d.RetryAfter.Never, zone: set.location(r),
		before: c.applies & (1<<limit - 1), campaign: campaignHash(r.Campaign), priority: r.Priority}
	if !f.never && f.free.Before(f.expires) {
		f.expires = f.free
	}
	for _, o := range old.full {
		if o.set == set && o.key != f.key && r.At.Before(o.expires) { // drop the replaced, the expired and another policy's
			next.full = append(next.full, o)
		}
	}
	next.full = append(next.full, f)
	switch {
	case withIdem:
		// What Redis knows now: every id it would call a duplicate (a user
		// with more than the cache keeps is not answered).
		next.allowed, next.known = idemEntries(idem), true
		if len(next.allowed) > maxAllowedIDs {
			next.allowed, next.known = nil, false
		}
	case old.known:
		next.allowed = old.allowed // still complete: not asked again
	}
	rc.add(r.UserID, next)
}

// staleAfterSend: a send recorded in c's scopes may have filled this limit
// or one known not full ahead of it.
func (f *refusal) staleAfterSend(set *policySet, c callPlan) bool {
	if f.set != set {
		return true // another policy's: its indexes are not ours
	}
	limits := set.pols[f.key.pol].limits
	if c.records&(1<<limits[f.key.limit].scope) != 0 {
		return true
	}
	for a := range f.key.limit {
		if f.before&(1<<a) != 0 && c.records&(1<<limits[a].scope) != 0 {
			return true
		}
	}
	return false
}

// forget drops everything remembered.
func (rc *refusals) forget() {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.users.Purge()
}

// forgetUser drops what is remembered of one user: a refund freed a slot
// that a remembered refusal would still call full. (A batch in flight may
// add the user back with a stale refusal; that only caps until its
// retry-after or TTL.)
func (rc *refusals) forgetUser(user uint64) { rc.remove(user) }
