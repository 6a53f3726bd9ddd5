package capping

// Campaign plans in the decision: a campaign that will send later (a plan,
// package plans) books a slot, in every limit that would count its
// message, for the users of its audience; an intent of a lower priority
// counts those bookings beside the user's sends. The worker finds the
// plans whose audience holds the user (Request.Planned); this file says
// which of them book which limit, and the script takes the count like
// reserved slots (booked, in the packed argument).

import "time"

// Planned is a send a campaign plan announced for the request's user: its
// campaign, priority, send window and message.
type Planned struct {
	Campaign          string
	Priority          Priority
	Starts, Ends      time.Time
	Channel, Category string
	Tags              []string
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
		if p.Priority <= r.Priority || p.Campaign == r.Campaign {
			continue
		}
		for li := range limits {
			l := &limits[li]
			if c.applies&(1<<li) == 0 {
				continue
			}
			until := now.Add(time.Duration(l.window) * time.Second)
			if l.Calendar != None {
				until = time.Unix(c.cal[l.Calendar-1].end, 0)
			}
			if !ps.books(l, p, now, until) {
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
// message (a per-campaign limit counts only its own campaign's sends,
// never another's booking), and it starts before until.
func (ps *policySet) books(l *compiledLimit, p *Planned, now, until time.Time) bool {
	if !now.Before(p.Ends) || !p.Starts.Before(until) {
		return false
	}
	s := ps.scopes[l.scope]
	msg := Request{Campaign: p.Campaign, Channel: p.Channel, Category: p.Category, Tags: p.Tags}
	return s.per != PerCampaign && s.where.matches(&msg)
}
