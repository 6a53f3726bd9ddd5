package capping

// Campaign plans in the decision: a campaign that will send later (a plan,
// package plans) books a slot, in every limit that would count its
// message, for the users of its audience; an intent of a lower priority
// counts those bookings beside the user's sends. The worker finds the
// plans whose audience holds the user (Request.Planned); this file says
// which of them book which limit, and the script takes the count like
// reserved slots (booked, in the packed argument).

import (
	"sync/atomic"
	"time"
)

// Planned is a send a campaign plan announced for the request's user: its
// campaign, priority, send window and message. Make one with NewPlanned
// and copy it into each request: the copies share what the engine works
// out once about its message.
type Planned struct {
	Campaign          string
	Priority          Priority
	Starts, Ends      time.Time
	Channel, Category string
	Tags              []string

	// match remembers which scopes of a compiled set count the message
	// (nil, a Planned not made by NewPlanned: worked out each time).
	match *planMatch
}

type planMatch struct{ last atomic.Pointer[scopeMatch] }

type scopeMatch struct {
	set    *policySet
	scopes uint32 // bit i: scope i counts the message
}

// NewPlanned returns p ready to be shared by many requests.
func NewPlanned(p Planned) Planned {
	p.match = &planMatch{}
	return p
}

// scopesOf is the scopes of the set that count p's message: its where
// matches, and it is not per campaign (a per-campaign limit counts only
// its own campaign's sends, never another's booking).
func (ps *policySet) scopesOf(p *Planned) uint32 {
	if p.match != nil {
		if m := p.match.last.Load(); m != nil && m.set == ps {
			return m.scopes
		}
	}
	msg := Request{Campaign: p.Campaign, Channel: p.Channel, Category: p.Category, Tags: p.Tags}
	var scopes uint32
	for i, s := range ps.scopes {
		if s.per != PerCampaign && s.where.matches(&msg) {
			scopes |= 1 << i
		}
	}
	if p.match != nil {
		// Copies decided concurrently may both store: the same answer.
		p.match.last.Store(&scopeMatch{set: ps, scopes: scopes})
	}
	return scopes
}

// book fills c's bookings: for each limit of the policy that applies to r,
// the plans of r.Planned that hold a slot in it, and of those the one whose
// window ends first. A plan books limit l when its priority is above the
// request's, it is another campaign's, its window has not ended, l counts
// its message (l's where matches it; a per-campaign limit counts only its
// own campaign), and it sends inside l's window from r.At (rolling: it
// starts before r.At + window; calendar: before the period holding r.At
// ends).
func (ps *policySet) book(r *Request, c *callPlan) {
	if len(r.Planned) == 0 {
		return
	}
	limits := ps.pols[c.pol].limits
	now := r.At
	for pi := range r.Planned {
		p := &r.Planned[pi]
		if p.Priority <= r.Priority || p.Campaign == r.Campaign || !now.Before(p.Ends) || r.Control.stopped(p.Campaign) {
			continue // a stopped campaign's slots go to others at once
		}
		scopes := ps.scopesOf(p)
		for li := range limits {
			l := &limits[li]
			if c.applies&(1<<li) == 0 || scopes&(1<<l.scope) == 0 {
				continue
			}
			until := now.Add(time.Duration(l.window) * time.Second)
			if l.Calendar != None {
				until = time.Unix(c.cal[l.Calendar-1].end, 0)
			}
			if !p.Starts.Before(until) {
				continue
			}
			if c.booked[li] == 0 || p.Ends.Before(r.Planned[c.firstEnd[li]].Ends) {
				c.firstEnd[li] = int16(pi)
			}
			c.booked[li] = min(c.booked[li]+1, 255) // the packed argument's byte
			c.anyBooked = true
		}
	}
}

// books reports whether plan p holds a slot at now in limit l, whose
// window from now ends at until: its window has not ended, l counts its
// message, and it starts before until.
func (ps *policySet) books(l *compiledLimit, p *Planned, now, until time.Time) bool {
	return now.Before(p.Ends) && p.Starts.Before(until) && ps.scopesOf(p)&(1<<l.scope) != 0
}
