package capping

// Compiling rules for Redis: scopes get their ids and retentions, every
// policy its limits by scope, and the Lua script is generated with all of it
// as constants (a script per set of rules: reading constants costs Redis
// nothing, arguments do). The same compiled set turns a request into the
// script's arguments and its reply into a Decision.

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// skewMargin (s) is how much longer than its longest window a scope keeps a
// send: a worker whose clock is ahead trims by its own time, and must not
// trim a send that a worker behind it still counts. Workers whose decision
// times differ by more (the clock check warns far earlier) may count less.
// It costs little: a section never holds more than its largest max.
const skewMargin = 300

// unknownRetention (s) is how long a section of a scope the policy does not
// know is kept: another policy version (a rollout in progress) may count
// it, with at most the longest window there is.
const unknownRetention = int64(MaxWindow/time.Second) + 3600 + 1 + skewMargin

// MaxScopes bounds the distinct scopes of a set of rules (a bit each in the
// script's masks).
const MaxScopes = 30

// policySet is a set of rules compiled.
type policySet struct {
	name    string // the policy's version, named in every Decision
	rules   Rules
	scopes  []*scope         // bit i is scope i
	byName  map[string]int   // segment name -> index in pols
	pols    []compiledPolicy // [0] the default policy, then the segments
	idem    int64            // s: duplicates are recognised this long
	keyLife int64            // s: the longest any record needs a send
	slack   int64            // s: a bucket outlives its records by at most this
	args    argPlaces
	// calendars[c-1]: a limit counts per calendar period c (its start
	// is an argument).
	calendars [3]bool
	script    *script
	// users: the rules' users' limits (nil: not read); ulimits their
	// compiled limits, every tier's in order, then a channel limit per
	// users.Channels; tiers[k] the range of tier k's in ulimits.
	// byChannel: the scopes of channels only that a channel falls in.
	byChannel map[string]uint32
	users     *UserRules
	ulimits   []compiledLimit
	tiers     [][2]int
	chanBase  int // ulimits[chanBase+i] is users.Channels[i]'s
}

type compiledPolicy struct {
	limits []compiledLimit
	quiet  *QuietHours
}

type compiledLimit struct {
	Limit
	scope  int   // index in policySet.scopes
	window int64 // s (rolling)
}

// compileRules compiles validated rules. idem is the idempotency window; it
// is also the slack a bucket may outlive its records by.
func compileRules(r Rules, idem time.Duration) (*policySet, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	ps := &policySet{rules: r, byName: map[string]int{}, idem: int64(idem / time.Second)}
	ps.slack = ps.idem
	byCanon := map[string]int{}
	taken := map[uint32]bool{}
	compile := func(p Policy) compiledPolicy {
		cp := compiledPolicy{quiet: p.QuietHours}
		for _, l := range p.Limits {
			canon := canonical(l.Where, l.Per)
			i, ok := byCanon[canon]
			if !ok {
				id := scopeID(canon, taken)
				taken[id] = true
				if l.Per == PerCampaign {
					id |= perCampaignFlag
				}
				i = len(ps.scopes)
				byCanon[canon] = i
				ps.scopes = append(ps.scopes, &scope{canon: canon, id: id, per: l.Per, where: compileWhere(l.Where), rolling: -1})
			}
			s := ps.scopes[i]
			cl := compiledLimit{Limit: l, scope: i}
			if l.Calendar == None {
				cl.window = int64(l.Window / time.Second)
				s.retention = max(s.retention, cl.window+1+skewMargin)
				s.rolling = max(s.rolling, cl.window)
			} else {
				s.retention = max(s.retention, periodRetention(l.Calendar)+skewMargin)
				s.calendars |= 1 << (l.Calendar - 1)
				ps.calendars[l.Calendar-1] = true
			}
			s.keep = max(s.keep, l.Max)
			cp.limits = append(cp.limits, cl)
		}
		return cp
	}
	ps.pols = append(ps.pols, compile(r.Default))
	for _, s := range r.Segments {
		ps.byName[s.Name] = len(ps.pols)
		ps.pols = append(ps.pols, compile(s.Policy))
	}
	if u := r.Users; u != nil {
		// A user's limits compile as one more policy's: their scopes are
		// shared with the segments' limits that count the same sends.
		ps.users = u
		var all []Limit
		for _, t := range u.Tiers {
			ps.tiers = append(ps.tiers, [2]int{len(all), len(all) + len(t.Limits)})
			for _, l := range t.Limits {
				l.Name = userTierLimitPrefix + t.Name + "/" + l.Name
				all = append(all, l)
			}
		}
		ps.chanBase = len(all)
		for _, c := range u.Channels {
			all = append(all, Limit{Name: userChannelLimitPrefix + c, Window: u.ChannelWindow, Max: u.MaxPerChannel, Where: Where{Channels: []string{c}}})
		}
		ps.ulimits = compile(Policy{Limits: all}).limits
	}
	ps.indexScopes()
	ps.placeArgs()
	src, err := ps.generate()
	if err != nil {
		return nil, err
	}
	ps.script = newScript(src)
	return ps, nil
}

// indexScopes sets how long a bucket key lives (the longest retention of
// a scope, or the idempotency window) and indexes the scopes of channels
// only (a channel's cap, a user's channel limit) by channel: an intent's
// channel finds them in one lookup.
func (ps *policySet) indexScopes() {
	ps.keyLife = ps.idem
	ps.byChannel = map[string]uint32{}
	for i, s := range ps.scopes {
		ps.keyLife = max(ps.keyLife, s.retention)
		if s.where.set() == 1 && s.where[dimChannels] != nil {
			s.channelOnly = true
			for c := range s.where[dimChannels] {
				ps.byChannel[c] |= 1 << i
			}
		}
	}
}

// version names the compiled set in the script's first line (its SHA is
// what Redis knows it by).
func (ps *policySet) version() string {
	return strconv.Itoa(len(ps.pols)) + " policies, " + strconv.Itoa(len(ps.scopes)) + " scopes"
}

// policyIndex is the compiled policy of a segment (the default one for a
// segment without its own).
func (ps *policySet) policyIndex(segment string) int { return ps.byName[segment] }

// call is what one request needs from the set: its policy, the limits that
// apply, the scopes it is recorded in.
type callPlan struct {
	pol     int
	applies uint32 // bit i: limit i of the policy applies
	// uapplies: bit k: users' limit k (policySet.ulimits) applies;
	// offset: the user's UTC offset at the decision (s), for their quiet
	// hours.
	uapplies uint32
	offset   int
	records  uint32 // bit i: scope i
	// cal[c-1]: the calendar period of kind c holding the decision time,
	// in the request's time zone (unix s), for the kinds the set uses.
	cal [3]struct{ start, end int64 }
	// booked[i]: the slots campaign plans of a higher priority hold in
	// limit i of the policy (plans.go); firstEnd[i]: the one of them (in
	// Request.Planned) whose window ends first.
	booked    [MaxLimits]uint8
	firstEnd  [MaxLimits]int16
	anyBooked bool
}

// plan is what the set needs of a request; known remembers the batch's
// calendar periods (nil: compute each).
func (ps *policySet) plan(r *Request, known *periods) callPlan {
	c := callPlan{records: ps.byChannel[r.Channel]}
	for i, s := range ps.scopes {
		if !s.channelOnly && s.where.matches(r) {
			c.records |= 1 << i
		}
	}
	for i, used := range ps.calendars {
		if used {
			start, end := known.of(Calendar(i+1), r.At, ps.location(r), ps.rules.WeekStart)
			c.cal[i].start, c.cal[i].end = start.Unix(), end.Unix()
		}
	}
	c.pol = ps.policyIndex(r.Segment)
	for i, l := range ps.pols[c.pol].limits {
		if c.records&(1<<l.scope) != 0 {
			c.applies |= 1 << i
		}
	}
	for k, l := range ps.ulimits {
		if c.records&(1<<l.scope) != 0 {
			c.uapplies |= 1 << k
		}
	}
	if ps.users != nil {
		c.offset = known.zoneOffset(r.At, ps.location(r))
	}
	ps.book(r, &c)
	return c
}

// location is the time zone a request's calendar periods are in.
func (ps *policySet) location(r *Request) *time.Location {
	if r.TimeZone != nil {
		return r.TimeZone
	}
	return ps.rules.TimeZone
}

// decision is the Decision of a request decided at r.At that the script
// (or its port) answered rep.
func (ps *policySet) decision(rep reply, r *Request, c callPlan) (Decision, error) {
	d := Decision{At: r.At}
	switch rep.code {
	case codeAllowed:
		d.Outcome = Allowed
	case codeDuplicate:
		d.Outcome, d.At = Duplicate, time.Unix(rep.t, 0)
	case codeUserHeld:
		if rep.limit >= int64(len(userKinds)) || userKinds[rep.limit].hold == nil {
			return Decision{}, fmt.Errorf("script named users' limit kind %d, which holds nothing", rep.limit)
		}
		userKinds[rep.limit].hold(ps, r, &d, time.Unix(rep.t, 0))
	case codeCapped, codeHeld:
		if rep.limit >= userLimitBase {
			return ps.userCapped(rep, r)
		}
		limits := ps.pols[c.pol].limits
		if rep.limit < 1 || rep.limit > int64(len(limits)) {
			return Decision{}, fmt.Errorf("script named limit %d of %d", rep.limit, len(limits))
		}
		li := rep.limit - 1
		l := limits[li]
		d.Outcome, d.Limit = Capped, l.Name
		switch {
		case l.Max == 0:
			d.RetryAfter.Never = true
		case rep.code == codeHeld && rep.t == 0 && l.Calendar == None:
			// The bookings alone fill it: it frees when the first of them
			// ends (below).
			d.RetryAfter.In = time.Duration(math.MaxInt64)
		case l.Calendar != None:
			d.RetryAfter.In = time.Unix(c.cal[l.Calendar-1].end, 0).Sub(r.At)
		default:
			// The send at t (s) counts while now_s - window <= t.
			free := time.Unix(rep.t+l.window+1, 0)
			d.RetryAfter.In = max(free.Sub(r.At), 0)
		}
		if rep.code == codeHeld {
			// Held for the plan whose booking ends first: a slot frees
			// then, or when a send leaves the window, whichever is first.
			p := &r.Planned[c.firstEnd[li]]
			d.HeldFor = p.Campaign
			d.RetryAfter.In = min(d.RetryAfter.In, max(p.Ends.Sub(r.At), 0))
		}
	default:
		return Decision{}, fmt.Errorf("script answered outcome %d", rep.code)
	}
	return d, nil
}
