package replay

// What a replay found, per side: counts by outcome, reason, segment and
// limit, and how users' deliveries would change.

import (
	"slices"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/capping"
)

// MaxListed is how many invalid records a report lists (all are counted).
const MaxListed = 20

// Report is what a replay found.
type Report struct {
	Source   string `json:"source"`
	Snapshot string `json:"snapshot"`
	Records  int64  `json:"records"`
	// First and Last are the earliest and latest decision times.
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	// Sides: the baseline first when there is one, then the candidate.
	Sides []*Stats `json:"sides"`
	// Change compares the candidate with the baseline, per user.
	Change *Change `json:"change,omitempty"`
	// Invalid lists the first MaxListed records that could not be decided.
	Invalid []InvalidRecord `json:"invalid,omitempty"`
}

// Stats are one side's counts.
type Stats struct {
	Side      string `json:"side"`   // baseline or candidate
	Policy    string `json:"policy"` // its file
	Intents   int64  `json:"intents"`
	Allowed   int64  `json:"allowed"`
	Capped    int64  `json:"capped"`
	Duplicate int64  `json:"duplicate"`
	Exempt    int64  `json:"exempt"`
	Invalid   int64  `json:"invalid"`
	// Cancelled: past the intent's send_by when it was decided, or when
	// its budget would have released it (never delivered).
	Cancelled int64 `json:"cancelled"`
	// Deferred intents waited (on_cap: defer, quiet hours) and were decided
	// again when due, then counted above as what they ended as; Hops are
	// the times one was deferred again; DeferExpired ended capped because
	// max_defer passed (counted in Capped too); Waiting were still deferred
	// when the records ended (counted in none of the outcomes above).
	Deferred     int64 `json:"deferred"`
	Hops         int64 `json:"deferred_again"`
	DeferExpired int64 `json:"defer_expired"`
	Waiting      int64 `json:"waiting_at_end"`
	// Capped per segment (the snapshot's, "none"), per limit (segment/limit),
	// per channel and per campaign.
	CappedBySegment  map[string]int64 `json:"capped_by_segment"`
	CappedByLimit    map[string]int64 `json:"capped_by_limit"`
	CappedByChannel  map[string]int64 `json:"capped_by_channel"`
	CappedByCampaign map[string]int64 `json:"capped_by_campaign"`
	// Users with a valid intent, and how many sends each would have got.
	Users   int64         `json:"users"`
	PerUser []UsersBucket `json:"allowed_per_user"`
	// A replay with plans: the intents per priority (the highest first),
	// and what the bookings did.
	ByPriority []PriorityStats `json:"by_priority,omitempty"`
	Plans      *PlanStats      `json:"plans,omitempty"`
	// Budgets: what each budget of the side's policy paced, in the
	// policy's order (none: the policy has no budgets).
	Budgets []*BudgetStats `json:"budgets,omitempty"`

	counts [4]map[string]*int64 // the capped-per maps while counting
	plans  *planCounts          // a replay with plans
}

// BudgetStats are what one budget paced on a side. Its intents (not
// exempt) waited in its lanes and were decided when it released them:
// Paced counts them (a deferred one again each time it came due and
// waited); LongestWaitMs is the longest any waited, and DrainEnd when the
// last left its lane (the lanes are drained after the last record). Expired
// at arrival were cancelled at once, their lane releasing them after their
// send-by; expired waiting reached the head of their lane past it and left
// without a token (cancelled; counted in Paced). Exempt sends it covers
// are charged to it (ExemptCharged) and never wait.
type BudgetStats struct {
	Budget           string      `json:"budget"`
	Rate             float64     `json:"rate"`
	Burst            int         `json:"burst"`
	Paced            int64       `json:"paced"`
	LongestWaitMs    int64       `json:"longest_wait_ms"`
	DrainEnd         time.Time   `json:"drain_end,omitzero"`
	ExpiredAtArrival int64       `json:"expired_at_arrival"`
	ExpiredWaiting   int64       `json:"expired_waiting"`
	ExemptCharged    int64       `json:"exempt_charged"`
	Lanes            []LaneStats `json:"lanes"`
}

// LaneStats are one lane of a budget: the intents that waited in it, the
// longest wait and when the last left it.
type LaneStats struct {
	Lane          string    `json:"lane"`
	Paced         int64     `json:"paced"`
	LongestWaitMs int64     `json:"longest_wait_ms"`
	DrainEnd      time.Time `json:"drain_end,omitzero"`
}

// left counts an intent that left lane at at after waiting wait.
func (b *BudgetStats) left(lane int, wait time.Duration, at time.Time) {
	ms := wait.Milliseconds()
	l := &b.Lanes[lane]
	b.LongestWaitMs, l.LongestWaitMs = max(b.LongestWaitMs, ms), max(l.LongestWaitMs, ms)
	if at.After(b.DrainEnd) {
		b.DrainEnd = at
	}
	if at.After(l.DrainEnd) {
		l.DrainEnd = at
	}
}

// PriorityStats are the intents of one priority, as they ended.
type PriorityStats struct {
	Priority  string `json:"priority"`  // low, normal, high or the number
	Intents   int64  `json:"intents"`   // valid ones
	Delivered int64  `json:"delivered"` // allowed or exempt
	Capped    int64  `json:"capped"`
	// Held: first held for a plan's booking (capped or deferred; a
	// deferred one may have been delivered later).
	Held int64 `json:"held_for_plan"`
}

// PlanStats are what plans' bookings did on one side. Planned intents are
// a plan's own sends: its campaign's intents to users of its audience. A
// given-up intent is one of a lower priority held for a booking that
// ended capped; its booking was used when the plan's campaign was later
// delivered to that user on this side.
type PlanStats struct {
	Planned          int64 `json:"planned_intents"`
	PlannedDelivered int64 `json:"planned_delivered"`
	GivenUp          int64 `json:"given_up"`
	BookingUsed      int64 `json:"given_up_booking_used"`
	BookingUnused    int64 `json:"given_up_booking_unused"`
}

// planCounts count a side of a replay with plans.
type planCounts struct {
	prio      map[capping.Priority]*PriorityStats
	stats     PlanStats
	delivered map[sendKey]bool  // planned sends delivered
	givenUp   map[sendKey]int64 // given-up intents, by the booking's send
}

// sendKey is a campaign's send to a user.
type sendKey struct {
	user     uint64
	campaign string
}

func newPlanCounts() *planCounts {
	return &planCounts{prio: map[capping.Priority]*PriorityStats{}, delivered: map[sendKey]bool{}, givenUp: map[sendKey]int64{}}
}

// count counts what a valid intent ended as.
func (c *planCounts) count(campaign string, o *Outcome) {
	p := c.prio[o.Priority]
	if p == nil {
		p = &PriorityStats{Priority: o.Priority.String()}
		c.prio[o.Priority] = p
	}
	p.Intents++
	allowed := o.Decision.Outcome == capping.Allowed
	switch {
	case allowed, o.Decision.Outcome == capping.Exempt:
		p.Delivered++
	case o.Decision.Outcome == capping.Capped:
		p.Capped++
	}
	if o.HeldFor != "" {
		p.Held++
		if o.Decision.Outcome == capping.Capped {
			c.givenUp[sendKey{o.User, strings.Clone(o.HeldFor)}]++
		}
	}
	if o.Own {
		c.stats.Planned++
		if allowed {
			c.stats.PlannedDelivered++
			c.delivered[sendKey{o.User, strings.Clone(campaign)}] = true
		}
	}
}

// finish resolves the given-up intents' bookings.
func (c *planCounts) finish(s *Stats) {
	for k, n := range c.givenUp {
		c.stats.GivenUp += n
		if c.delivered[k] {
			c.stats.BookingUsed += n
		} else {
			c.stats.BookingUnused += n
		}
	}
	s.Plans = &c.stats
	for _, p := range c.prio {
		s.ByPriority = append(s.ByPriority, *p)
	}
	slices.SortFunc(s.ByPriority, func(a, b PriorityStats) int {
		pa, _ := capping.ParsePriority(a.Priority)
		pb, _ := capping.ParsePriority(b.Priority)
		return int(pb) - int(pa)
	})
}

// UsersBucket is how many users got a number of sends in a range.
type UsersBucket struct {
	Sends string `json:"sends"` // "0", "4-5", ">10"
	Users int64  `json:"users"`
}

// Change is the candidate against the baseline, per user.
type Change struct {
	Fewer     int64 `json:"users_fewer_sends"`
	More      int64 `json:"users_more_sends"`
	Same      int64 `json:"users_same_sends"`
	SendsLost int64 `json:"sends_lost"` // over the users with fewer
	SendsWon  int64 `json:"sends_gained"`
}

// InvalidRecord is a record that could not be decided, and why.
type InvalidRecord struct {
	Pos    string `json:"at"`
	Reason string `json:"reason"`
}

func newStats(side, policy string) *Stats {
	s := &Stats{Side: side, Policy: policy}
	for i := range s.counts {
		s.counts[i] = map[string]*int64{}
	}
	return s
}

// inc counts k. The count is behind a pointer: assigning to an existing
// string key stores the new key's bytes, and an intent's strings are views
// of a buffer the source reuses; a new key is copied.
func inc(m map[string]*int64, k string) {
	if p := m[k]; p != nil {
		*p++
		return
	}
	n := int64(1)
	m[strings.Clone(k)] = &n
}

// finish turns the counts into the report's maps.
func (s *Stats) finish() {
	if s.plans != nil {
		s.plans.finish(s)
	}
	for i, dst := range []*map[string]int64{&s.CappedBySegment, &s.CappedByLimit, &s.CappedByChannel, &s.CappedByCampaign} {
		*dst = make(map[string]int64, len(s.counts[i]))
		for k, p := range s.counts[i] {
			(*dst)[k] = *p
		}
	}
}

// add counts a record's first decision (none yet for one a budget holds).
func (s *Stats) add(channel, campaign string, o *Outcome) {
	s.Intents++
	if o.Held {
		return
	}
	if o.Decision.Outcome == capping.Deferred {
		s.Deferred++
		return
	}
	s.count(channel, campaign, o)
}

// count counts what an intent ended as.
func (s *Stats) count(channel, campaign string, o *Outcome) {
	switch o.Decision.Outcome {
	case capping.Allowed:
		s.Allowed++
	case capping.Duplicate:
		s.Duplicate++
	case capping.Exempt:
		s.Exempt++
	case capping.Invalid:
		s.Invalid++
		return
	case capping.Cancelled:
		s.Cancelled++
	case capping.Capped:
		s.Capped++
		if o.Decision.Reason == capping.ReasonDeferExpired {
			s.DeferExpired++
		}
		inc(s.counts[0], o.Segment)
		inc(s.counts[1], o.Segment+"/"+o.Decision.Limit)
		inc(s.counts[2], channel)
		inc(s.counts[3], campaign)
	}
	if s.plans != nil {
		s.plans.count(campaign, o)
	}
}

func (r *Report) span(t time.Time) {
	if r.First.IsZero() || t.Before(r.First) {
		r.First = t
	}
	if t.After(r.Last) {
		r.Last = t
	}
}

// noteInvalid lists a record some side could not decide (the first reason).
func (r *Report) noteInvalid(pos string, outs []Outcome) {
	if len(r.Invalid) >= MaxListed {
		return
	}
	for _, o := range outs {
		if o.Invalid != nil {
			r.Invalid = append(r.Invalid, InvalidRecord{Pos: pos, Reason: o.Invalid.Error()})
			return
		}
	}
}

// userCounts are the sends each user was allowed, per side (saturating).
type userCounts struct {
	sides int
	m     map[uint64][2]uint16
}

func newUserCounts(sides int) *userCounts {
	return &userCounts{sides: sides, m: map[uint64][2]uint16{}}
}

func (u *userCounts) add(uid uint64, side int, allowed bool) {
	c := u.m[uid]
	if allowed && c[side] < 65535 {
		c[side]++
	}
	u.m[uid] = c
}

func (u *userCounts) len() int { return len(u.m) }

var bucketLabels = []string{"0", "1", "2", "3", "4-5", "6-10", ">10"}

func bucketOf(n uint16) int {
	switch {
	case n <= 3:
		return int(n)
	case n <= 5:
		return 4
	case n <= 10:
		return 5
	}
	return 6
}

func (u *userCounts) distribution(side int) []UsersBucket {
	out := make([]UsersBucket, len(bucketLabels))
	for i, l := range bucketLabels {
		out[i].Sends = l
	}
	for _, c := range u.m {
		out[bucketOf(c[side])].Users++
	}
	return out
}

func (u *userCounts) change() *Change {
	var c Change
	for _, x := range u.m {
		switch {
		case x[1] < x[0]:
			c.Fewer++
			c.SendsLost += int64(x[0] - x[1])
		case x[1] > x[0]:
			c.More++
			c.SendsWon += int64(x[1] - x[0])
		default:
			c.Same++
		}
	}
	return &c
}
