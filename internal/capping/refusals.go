package capping

// The refusal cache: a worker remembers which limits refused a user until
// they free a slot, and answers repeats without asking Redis. During a blast
// most intents go to users already at their cap; those are the calls it saves.
//
// What it changes, and why that is safe: a remembered limit is full (only
// time frees a slot, or a refund or a policy change, hence the TTL; a send
// this worker records, of a higher priority or a bypass, drops what it
// remembered about the limits that count it), so an
// intent it applies to is capped; the answer may name that limit where
// Redis would have named an earlier one that is full too. The cache does
// not know the ids Redis allowed, so it keeps the ids this worker saw
// allowed and never answers those (a producer's retry stays a duplicate); an
// id another worker allowed before a rebalance would be answered capped
// instead of duplicate, which is why the cache never answers a request
// marked Redelivered (dispatch marks the records that existed when it took
// their partition over) and the worker empties it when its partitions
// change (ForgetRefusals).

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// refusalKey names one full limit of one user: a limit of a compiled policy
// (by index), the campaign for a per-campaign limit, and for a limit with
// reserved slots whether the priority is below the reserve's (the two see
// different maxima, so different free times).
type refusalKey struct {
	user     uint64
	pol      int32
	limit    int32
	campaign [3]byte
	reserved bool
}

// refusal is what a refusal showed: the limit is full until free (decision
// time), or never frees; the entry is believed until expires.
type refusal struct {
	free, expires time.Time
	never         bool
	// zone: a calendar limit's period is in this time zone; a request in
	// another one has other boundaries.
	zone *time.Location
}

type allowedKey struct {
	user   uint64
	digest [8]byte
}

// refusals is a bounded LRU of refusals and one of the ids allowed.
type refusals struct {
	full    *lru.Cache[refusalKey, refusal]
	allowed *lru.Cache[allowedKey, struct{}]
	ttl     time.Duration
}

func newRefusals(size int, ttl time.Duration) (*refusals, error) {
	full, err := lru.New[refusalKey, refusal](size)
	if err != nil {
		return nil, err
	}
	allowed, err := lru.New[allowedKey, struct{}](size)
	if err != nil {
		return nil, err
	}
	return &refusals{full: full, allowed: allowed, ttl: ttl}, nil
}

func (rc *refusals) key(set *policySet, r *Request, pol, limit int) refusalKey {
	l := &set.pols[pol].limits[limit]
	k := refusalKey{user: r.UserID, pol: int32(pol), limit: int32(limit)}
	if set.scopes[l.scope].per == PerCampaign {
		k.campaign = campaignHash(r.Campaign)
	}
	k.reserved = l.Reserve.Slots > 0 && r.Priority < l.Reserve.Below
	return k
}

// lookup answers a request from a remembered refusal: the first limit (in
// policy order) that applies to it and is known full.
func (rc *refusals) lookup(set *policySet, r *Request, c callPlan) (Decision, bool) {
	if rc.full.Len() == 0 || rc.allowed.Contains(allowedKey{r.UserID, digest(r.IntentID)}) {
		return Decision{}, false
	}
	for i, l := range set.pols[c.pol].limits {
		if c.applies&(1<<i) == 0 {
			continue
		}
		f, ok := rc.full.Get(rc.key(set, r, c.pol, i))
		if !ok || !r.At.Before(f.expires) || (l.Calendar != None && f.zone.String() != set.location(r).String()) {
			continue
		}
		d := Decision{Outcome: Capped, Limit: l.Name, At: r.At, RetryAfter: RetryAfter{Never: f.never}}
		if !f.never {
			d.RetryAfter.In = f.free.Sub(r.At)
		}
		return d, true
	}
	return Decision{}, false
}

// remember records what Redis answered: a refusal, or an id allowed.
func (rc *refusals) remember(set *policySet, r *Request, c callPlan, d Decision) {
	switch d.Outcome {
	case Allowed:
		// A send the limits of its scopes count, in every policy: what was
		// remembered about them is stale (a higher priority, or a bypass,
		// used a slot).
		for si, s := range set.scopes {
			if c.records&(1<<si) != 0 {
				for _, pl := range s.limits {
					k := rc.key(set, r, pl.pol, pl.limit)
					k.reserved = false
					rc.full.Remove(k)
					k.reserved = true
					rc.full.Remove(k)
				}
			}
		}
		fallthrough
	case Duplicate:
		rc.allowed.Add(allowedKey{r.UserID, digest(r.IntentID)}, struct{}{})
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
	k := rc.key(set, r, c.pol, limit)
	f := refusal{free: r.At.Add(d.RetryAfter.In), expires: r.At.Add(rc.ttl), never: d.RetryAfter.Never, zone: set.location(r)}
	if !f.never && f.free.Before(f.expires) {
		f.expires = f.free
	}
	rc.full.Add(k, f)
}

// forget drops everything remembered.
func (rc *refusals) forget() {
	rc.full.Purge()
	rc.allowed.Purge()
}
