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
// every applicable limit ahead of it known not full. The cache does not know
// the ids Redis allowed, so it keeps the ids this worker saw allowed and
// never answers those (a producer's retry stays a duplicate); an id another
// worker allowed before a rebalance would be answered capped instead of
// duplicate, which is why the cache never answers a request marked
// Redelivered (dispatch marks the records that existed when it took their
// partition over) and the worker empties it when its partitions change
// (ForgetRefusals).

import (
	"math/bits"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	lru "github.com/hashicorp/golang-lru/v2"
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

// refusals is a bounded LRU of users, each with the limits found full for
// them (a user has few; one lookup per intent), and a table of the ids
// allowed.
type refusals struct {
	// full: a user's slice is never changed in place (copy on write):
	// concurrent batches may read it. Two batches updating one user at once
	// may lose an update: a lost refusal costs a Redis call, a lost drop
	// keeps a retry-after a little early; dispatch decides one batch at a
	// time.
	full    *lru.Cache[uint64, []refusal]
	allowed allowedIDs
	ttl     time.Duration
}

func newRefusals(size int, ttl time.Duration) (*refusals, error) {
	full, err := lru.New[uint64, []refusal](size)
	if err != nil {
		return nil, err
	}
	return &refusals{full: full, allowed: newAllowedIDs(size), ttl: ttl}, nil
}

// allowedIDs remembers (user, intent id) pairs seen allowed: a direct-mapped
// table of 64-bit fingerprints, lock free. A newer pair evicts an older one
// in its slot, as an LRU would evict it; a false "seen" (two pairs with the
// same fingerprint) only sends a request to Redis.
type allowedIDs struct {
	slots []atomic.Uint64
	mask  uint64
}

func newAllowedIDs(size int) allowedIDs {
	n := uint64(1) << bits.Len64(uint64(max(size, 2)-1)) // a power of 2 >= size
	return allowedIDs{slots: make([]atomic.Uint64, n), mask: n - 1}
}

func fingerprint(user uint64, id string) uint64 {
	f := xxhash.Sum64String(id) ^ user*0x9E3779B97F4A7C15
	return f | 1 // 0 marks an empty slot
}

func (a *allowedIDs) add(user uint64, id string) {
	f := fingerprint(user, id)
	a.slots[(f>>32)&a.mask].Store(f)
}

func (a *allowedIDs) contains(user uint64, id string) bool {
	f := fingerprint(user, id)
	return a.slots[(f>>32)&a.mask].Load() == f
}

func (a *allowedIDs) clear() {
	for i := range a.slots {
		a.slots[i].Store(0)
	}
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
// time zone where those matter).
func (rc *refusals) lookup(set *policySet, r *Request, c callPlan) (Decision, bool) {
	known, ok := rc.full.Get(r.UserID)
	if !ok || rc.allowed.contains(r.UserID, r.IntentID) {
		return Decision{}, false
	}
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

// remember records what Redis answered: a refusal, or an id allowed.
func (rc *refusals) remember(set *policySet, r *Request, c callPlan, d Decision) {
	switch d.Outcome {
	case Allowed:
		// A send the limits of its scopes count, in every policy: what was
		// remembered about them is stale (a higher priority, or a bypass,
		// used a slot).
		if known, ok := rc.full.Peek(r.UserID); ok {
			// Also what was known not full: the send may fill it.
			keep := slices.DeleteFunc(slices.Clone(known), func(f refusal) bool {
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
			})
			if len(keep) == 0 {
				rc.full.Remove(r.UserID)
			} else if len(keep) < len(known) {
				rc.full.Add(r.UserID, keep)
			}
		}
		fallthrough
	case Duplicate:
		rc.allowed.add(r.UserID, r.IntentID)
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
	known, _ := rc.full.Peek(r.UserID)
	next := make([]refusal, 0, len(known)+1)
	for _, o := range known {
		if o.set == set && o.key != f.key && r.At.Before(o.expires) { // drop the replaced, the expired and another policy's
			next = append(next, o)
		}
	}
	rc.full.Add(r.UserID, append(next, f))
}

// forget drops everything remembered.
func (rc *refusals) forget() {
	rc.full.Purge()
	rc.allowed.clear()
}
