package capping

// Compiling rules for Redis: scopes get their ids and retentions, every
// policy its limits by scope, and the Lua script is generated with all of it
// as constants (a script per set of rules: reading constants costs Redis
// nothing, arguments do). The same compiled set turns a request into the
// script's arguments and its reply into a Decision.

import (
	"bytes"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"text/template"
	"time"
)

//go:embed packed.lua.tmpl
var packedTemplate string

var scriptTemplate = template.Must(template.New("packed.lua").Parse(packedTemplate))

// skewMargin (s) is how much longer than its longest window a scope keeps a
// send: a worker whose clock is ahead trims by its own time, and must not
// trim a send that a worker behind it still counts. Workers whose decision
// times differ by more (the clock check warns far earlier) may count less.
// It costs little: a section never holds more than its largest max.
const skewMargin = 300

// maxIdem bounds a user's idempotency entries: the newest maxIdem intents
// inside the idempotency window are recognised as duplicates.
const maxIdem = 1000

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
	args    argLayout
	script  *script
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

// argLayout is where the optional arguments are (0: not passed).
type argLayout struct {
	Camp, Prio, Day, Week, Month, Mode, Idem int
	n                                        int // arguments in all
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
		pi := len(ps.pols)
		for li, l := range p.Limits {
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
			s.limits = append(s.limits, struct{ pol, limit int }{pi, li})
			cl := compiledLimit{Limit: l, scope: i}
			if l.Calendar == None {
				cl.window = int64(l.Window / time.Second)
				s.retention = max(s.retention, cl.window+1+skewMargin)
				s.rolling = max(s.rolling, cl.window)
			} else {
				s.retention = max(s.retention, periodRetention(l.Calendar)+skewMargin)
				s.calendars |= 1 << (l.Calendar - 1)
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
	ps.keyLife = ps.idem
	for _, s := range ps.scopes {
		ps.keyLife = max(ps.keyLife, s.retention)
	}
	ps.layout()
	src, err := ps.generate()
	if err != nil {
		return nil, err
	}
	ps.script = newScript(src)
	return ps, nil
}

// layout places the optional arguments the rules need after the six every
// call has.
func (ps *policySet) layout() {
	a := &ps.args
	a.n = 6
	next := func() int { a.n++; return a.n }
	var camp, prio, mode bool
	cal := map[Calendar]bool{}
	for _, s := range ps.scopes {
		camp = camp || s.per == PerCampaign
	}
	for _, p := range ps.pols {
		for _, l := range p.limits {
			prio = prio || l.Reserve.Slots > 0
			cal[l.Calendar] = true
		}
	}
	mode = len(ps.rules.Overrides.Campaigns)+len(ps.rules.Overrides.Categories) > 0
	if camp {
		a.Camp = next()
	}
	if prio {
		a.Prio = next()
	}
	if cal[Day] {
		a.Day = next()
	}
	if cal[Week] {
		a.Week = next()
	}
	if cal[Month] {
		a.Month = next()
	}
	if mode {
		a.Mode = next()
	}
	a.Idem = next()
}

// version names the compiled set in the script's first line (its SHA is
// what Redis knows it by).
func (ps *policySet) version() string {
	return strconv.Itoa(len(ps.pols)) + " policies, " + strconv.Itoa(len(ps.scopes)) + " scopes"
}

func (ps *policySet) generate() (string, error) {
	type (
		scopeData struct {
			I, Bit, Keep int
			ID           uint32
			PerCampaign  bool
			RetS         int64
			From         string // Lua: the earliest start of a limit's window on the scope
			Used         bool
			Header       string
		}
		limitData struct {
			I, Bit, S, Max, ReserveMax, Below int
			Name, Start                       string
			Rolling                           bool
		}
		policyData struct {
			I      int
			Limits []limitData
		}
		extra struct {
			Pos int
			Doc string
		}
	)
	d := struct {
		Version                                     string
		IdemS, KeyLife, Slack, UnknownRetS, MaxIdem int64
		Args                                        argLayout
		Extra                                       []extra
		Scopes                                      []scopeData
		Policies                                    []policyData
	}{Version: ps.version(), IdemS: ps.idem, KeyLife: ps.keyLife, Slack: ps.slack,
		UnknownRetS: unknownRetention, MaxIdem: maxIdem, Args: ps.args}
	for _, e := range []extra{
		{ps.args.Camp, "campaign (3-byte hash), for the per-campaign scopes"},
		{ps.args.Prio, "priority (0 low, 1 normal, 2 high), for reserved slots"},
		{ps.args.Day, "start of the intent's calendar day (unix s)"},
		{ps.args.Week, "start of the intent's calendar week (unix s)"},
		{ps.args.Month, "start of the intent's calendar month (unix s)"},
		{ps.args.Mode, "'b': an honoured bypass, recorded without checking"},
		{ps.args.Idem, "'i': a refusal also returns the idempotency entries (for the worker's refusal cache)"},
	} {
		if e.Pos > 0 {
			d.Extra = append(d.Extra, e)
		}
	}
	used := map[int]bool{}
	for pi, p := range ps.pols {
		pd := policyData{I: pi + 1}
		for li, l := range p.limits {
			used[l.scope] = true
			ld := limitData{I: li + 1, Bit: 1 << li, S: l.scope + 1, Max: l.Max, Name: strings.ReplaceAll(l.Name, "\n", " "), Rolling: l.Calendar == None}
			if l.Reserve.Slots > 0 {
				ld.ReserveMax, ld.Below = l.Max-l.Reserve.Slots, int(l.Reserve.Below)
			}
			switch l.Calendar {
			case None:
				ld.Start = "now - " + strconv.FormatInt(l.window, 10)
			case Day:
				ld.Start = "cday"
			case Week:
				ld.Start = "cweek"
			case Month:
				ld.Start = "cmonth"
			}
			pd.Limits = append(pd.Limits, ld)
		}
		d.Policies = append(d.Policies, pd)
	}
	for i, s := range ps.scopes {
		d.Scopes = append(d.Scopes, scopeData{I: i + 1, Bit: 1 << i, Keep: s.keep, ID: s.id, PerCampaign: s.per == PerCampaign,
			RetS: s.retention, From: ps.fromExpr(s), Used: used[i], Header: luaBytes(byte(s.id>>16), byte(s.id>>8), byte(s.id))})
	}
	var b bytes.Buffer
	if err := scriptTemplate.Execute(&b, d); err != nil {
		return "", fmt.Errorf("generate the script: %w", err)
	}
	return b.String(), nil
}

// fromExpr is the script's expression of scope.from.
func (ps *policySet) fromExpr(s *scope) string {
	var parts []string
	if s.rolling >= 0 {
		parts = append(parts, "now - "+strconv.FormatInt(s.rolling, 10))
	}
	for i, v := range []string{"cday", "cweek", "cmonth"} {
		if s.calendars&(1<<i) != 0 {
			parts = append(parts, v)
		}
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return "math.min(" + strings.Join(parts, ", ") + ")"
}

// luaBytes writes bytes as a Lua string literal's body (decimal escapes).
func luaBytes(bs ...byte) string {
	var s strings.Builder
	for _, b := range bs {
		fmt.Fprintf(&s, "\\%03d", b)
	}
	return s.String()
}

// policyIndex is the compiled policy of a segment (the default one for a
// segment without its own).
func (ps *policySet) policyIndex(segment string) int { return ps.byName[segment] }

// call is what one request needs from the set: its policy, the limits that
// apply, the scopes it is recorded in.
type callPlan struct {
	pol     int
	applies uint32 // bit i: limit i of the policy applies
	records uint32 // bit i: scope i
	// cal[c-1]: the calendar period of kind c holding the decision time,
	// in the request's time zone (unix s), for the kinds the set uses.
	cal [3]struct{ start, end int64 }
}

// plan is what the set needs of a request; known remembers the batch's
// calendar periods (nil: compute each).
func (ps *policySet) plan(r *Request, known *periods) callPlan {
	a := attrs{channel: r.Channel, category: r.Category, campaign: r.Campaign, tags: r.Tags}
	var c callPlan
	for i, s := range ps.scopes {
		if s.where.matches(a) {
			c.records |= 1 << i
		}
	}
	for i, pos := range []int{ps.args.Day, ps.args.Week, ps.args.Month} {
		if pos > 0 {
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
	return c
}

// appendArgs appends the script's ARGV after the field, now and digest
// (which the caller owns): policy, masks and the optional ones.
func (ps *policySet) appendArgs(args []any, r *Request, c callPlan, bypass, wantIdem bool) []any {
	args = append(args, strconv.Itoa(c.pol+1), int64(c.applies), int64(c.records))
	if ps.args.Camp > 0 {
		h := campaignHash(r.Campaign)
		args = append(args, string(h[:]))
	}
	if ps.args.Prio > 0 {
		args = append(args, int64(r.Priority))
	}
	for i, pos := range []int{ps.args.Day, ps.args.Week, ps.args.Month} {
		if pos > 0 {
			args = append(args, c.cal[i].start)
		}
	}
	if ps.args.Mode > 0 {
		m := "c"
		if bypass {
			m = "b"
		}
		args = append(args, m)
	}
	if wantIdem {
		args = append(args, "i")
	} else {
		args = append(args, "-")
	}
	return args
}

// location is the time zone a request's calendar periods are in.
func (ps *policySet) location(r *Request) *time.Location {
	if r.TimeZone != nil {
		return r.TimeZone
	}
	return ps.rules.TimeZone
}

// decision reads the script's reply for a request decided at r.At: code,
// limit and time packed in one integer (see packed.lua.tmpl).
func (ps *policySet) decision(res int64, r *Request, c callPlan) (Decision, error) {
	code, limit, t := res>>40, res>>32&0xff, res&0xffffffff
	d := Decision{At: r.At}
	switch code {
	case codeAllowed:
		d.Outcome = Allowed
	case codeDuplicate:
		d.Outcome, d.At = Duplicate, time.Unix(t, 0)
	case codeCapped:
		limits := ps.pols[c.pol].limits
		if limit < 1 || limit > int64(len(limits)) {
			return Decision{}, fmt.Errorf("script named limit %d of %d", limit, len(limits))
		}
		l := limits[limit-1]
		d.Outcome, d.Limit = Capped, l.Name
		switch {
		case l.Max == 0:
			d.RetryAfter.Never = true
		case l.Calendar != None:
			d.RetryAfter.In = time.Unix(c.cal[l.Calendar-1].end, 0).Sub(r.At)
		default:
			// The send at t (s) counts while now_s - window <= t.
			free := time.Unix(t+l.window+1, 0)
			d.RetryAfter.In = max(free.Sub(r.At), 0)
		}
	default:
		return Decision{}, fmt.Errorf("script answered outcome %d", code)
	}
	return d, nil
}
