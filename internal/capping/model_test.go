package capping

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

var modelSeed = flag.Uint64("capping.seed", 20261121, "seed of the random model tests")

// refModel is the reference for the engine, in plain Go and written apart
// from it: every send a user was allowed, with all its attributes, counted
// by scanning; calendar periods found by searching for the instant the
// local date changes (not with the engine's calendar code). Its decisions
// ignore trimming, bucket sweeps and key expiry, which must not change any
// answer; its refunds follow what a log holds (refModel.refund).
type refModel struct {
	rules Rules
	idem  int64 // s
	users map[uint64]*refUser
	// scopeInfo: the rules' scopes (model_trim_test.go), built when first
	// needed.
	scopeInfo map[string]*refScopeInfo
}

type refUser struct {
	sends  []refSend // counted sends, in decision order
	writes []refSend // every write (the idempotency entries), in order
	// trimmed: the user's logs (logKey) a refund takes nothing from.
	trimmed map[string]bool
	// held: what each log holds as of the user's last write (mark).
	held map[string][]int64
}

type refSend struct {
	at int64 // unix s
	r  Request
	// gone: the scopes (refScope) a refund took the send out of; shared
	// by the copies in sends and writes.
	gone map[string]bool
}

func newRefModel(r Rules, idem time.Duration) *refModel {
	return &refModel{rules: r, idem: int64(idem / time.Second), users: map[uint64]*refUser{}}
}

func (m *refModel) user(uid uint64) *refUser {
	u := m.users[uid]
	if u == nil {
		u = &refUser{}
		m.users[uid] = u
	}
	return u
}

// refMatches: does an intent fall in a limit's where (every set dimension;
// any of the tags)?
func refMatches(w Where, r *Request) bool {
	if len(w.Channels) > 0 && !slices.Contains(w.Channels, r.Channel) ||
		len(w.Categories) > 0 && !slices.Contains(w.Categories, r.Category) ||
		len(w.Campaigns) > 0 && !slices.Contains(w.Campaigns, r.Campaign) {
		return false
	}
	if len(w.Tags) == 0 {
		return true
	}
	for _, t := range r.Tags {
		if slices.Contains(w.Tags, t) {
			return true
		}
	}
	return false
}

// refDate is a local calendar date.
type refDate struct {
	y int
	m time.Month
	d int
}

func dateOf(t time.Time, loc *time.Location) refDate {
	y, m, d := t.In(loc).Date()
	return refDate{y, m, d}
}

func (a refDate) before(b refDate) bool {
	return a.y < b.y || a.y == b.y && (a.m < b.m || a.m == b.m && a.d < b.d)
}

// firstInstant is the first second whose local date is d or later, found
// by bisection between lo and hi (lo before it, hi at or after it).
func firstInstant(d refDate, loc *time.Location, lo, hi int64) int64 {
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if dateOf(time.Unix(mid, 0), loc).before(d) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// addDays moves a date by n days (through a UTC noon, where every day has 24h).
func addDays(d refDate, n int) refDate {
	return dateOf(time.Date(d.y, d.m, d.d, 12, 0, 0, 0, time.UTC).AddDate(0, 0, n), time.UTC)
}

// refPeriod is the calendar period holding t: [start, end) in unix s.
func refPeriod(c Calendar, t time.Time, loc *time.Location, weekStart time.Weekday) (start, end int64) {
	d := dateOf(t, loc)
	var from, to refDate
	switch c {
	case Day:
		from, to = d, addDays(d, 1)
	case Week:
		wd := time.Date(d.y, d.m, d.d, 12, 0, 0, 0, time.UTC).Weekday()
		from = addDays(d, -((int(wd) - int(weekStart) + 7) % 7))
		to = addDays(from, 7)
	case Month:
		from = refDate{d.y, d.m, 1}
		to = dateOf(time.Date(d.y, d.m, 15, 12, 0, 0, 0, time.UTC).AddDate(0, 1, 0), time.UTC)
		to.d = 1
	}
	s := t.Unix()
	start = firstInstant(from, loc, s-33*86400, s+1)
	end = firstInstant(to, loc, s, s+33*86400)
	return start, end
}

func (m *refModel) location(r *Request) *time.Location {
	if r.TimeZone != nil {
		return r.TimeZone
	}
	return m.rules.TimeZone
}

func (m *refModel) invalid(r *Request) bool {
	return r.IntentID == "" || len(r.IntentID) > MaxIntentID || !slices.Contains(m.rules.Channels, r.Channel) ||
		!slices.Contains(m.rules.Categories, r.Category) || len(r.Tags) > MaxTags || r.At.IsZero()
}

func (m *refModel) decide(r Request) Decision {
	rules := m.rules
	if m.invalid(&r) {
		return Decision{Err: ErrInvalidRequest}
	}
	if slices.Contains(rules.ExemptCategories, r.Category) {
		return Decision{Outcome: Exempt, At: r.At}
	}
	var bypass, refused bool
	if r.Override != NoOverride {
		switch {
		case !slices.Contains(rules.Overrides.Campaigns, r.Campaign) && !slices.Contains(rules.Overrides.Categories, r.Category):
			refused = true
		case r.Override == BypassUncounted:
			return Decision{Outcome: Exempt, At: r.At, Override: BypassUncounted}
		default:
			bypass = true
		}
	}
	now := r.At.Unix()
	u := m.user(r.UserID)
	for _, w := range u.writes {
		if w.r.IntentID == r.IntentID && w.at >= now-m.idem {
			d := Decision{Outcome: Duplicate, At: time.Unix(w.at, 0), OverrideRefused: refused}
			if bypass {
				d.Override = Bypass // the redelivery of a bypass is marked as one
			}
			return d
		}
	}
	d := Decision{Outcome: Allowed, At: r.At, OverrideRefused: refused}
	if bypass {
		d.Override = Bypass
	} else {
		for _, l := range rules.PolicyOf(r.Segment).Limits {
			if full, retry, held := m.limitState(u, r, l); full {
				return Decision{Outcome: Capped, Limit: l.Name, RetryAfter: retry, At: r.At, OverrideRefused: refused, HeldFor: held}
			}
		}
	}
	m.mark(u, &r)
	s := refSend{at: now, r: r, gone: map[string]bool{}}
	u.sends = append(u.sends, s)
	u.writes = append(u.writes, s)
	return d
}

// limitState says whether a limit applies to r and is full for it, when it
// frees a slot, and the campaign plan that held r back (the limit had room
// without the plans' bookings).
func (m *refModel) limitState(u *refUser, r Request, l Limit) (bool, RetryAfter, string) {
	if !refMatches(l.Where, &r) {
		return false, RetryAfter{}, ""
	}
	if l.Max == 0 {
		return true, RetryAfter{Never: true}, ""
	}
	var times []int64
	scope := refScope(l.Where, l.Per)
	for _, s := range u.sends {
		if refMatches(l.Where, &s.r) && (l.Per != PerCampaign || s.r.Campaign == r.Campaign) && !s.gone[scope] {
			times = append(times, s.at)
		}
	}
	slices.Sort(times)
	now := r.At.Unix()
	w := int64(l.Window / time.Second)
	start, end := now-w, int64(0)
	if l.Calendar != None {
		start, end = refPeriod(l.Calendar, r.At, m.location(&r), m.rules.WeekStart)
	}
	in := 0
	for _, t := range times {
		if t >= start {
			in++
		}
	}
	// full says whether k sends are in the window, and the k-th newest: a
	// trimmed log holding fewer than k counts its dropped sends as if at
	// its oldest kept one.
	key := logKey(scope, m.scopes()[scope], &r)
	full := func(k int) (bool, int64) {
		if k <= 0 {
			return true, 0
		}
		if t, ok := u.heldFull(key, k, start); ok {
			return true, t
		}
		if in >= k {
			return true, times[len(times)-k]
		}
		return false, 0
	}
	retry := func(nth int64) RetryAfter {
		switch {
		case l.Calendar != None:
			return RetryAfter{In: time.Unix(end, 0).Sub(r.At)}
		case nth == 0:
			return RetryAfter{In: time.Duration(math.MaxInt64)}
		}
		return RetryAfter{In: max(time.Unix(nth+w+1, 0).Sub(r.At), 0)}
	}
	allow := l.Max
	if l.Reserve.Slots > 0 && r.Priority < l.Reserve.Below {
		allow -= l.Reserve.Slots
	}
	if ok, nth := full(allow); ok {
		return true, retry(nth), ""
	}
	booked, first := m.bookings(r, l, end)
	if booked == 0 {
		return false, RetryAfter{}, ""
	}
	ok, nth := full(allow - booked)
	if !ok {
		return false, RetryAfter{}, ""
	}
	ra := retry(nth)
	ra.In = min(ra.In, max(first.Ends.Sub(r.At), 0))
	return true, ra, first.Campaign
}

// bookings counts the campaign plans that book a slot of l against r, and
// the first of them to end: of a higher priority, another campaign, not
// ended, their message counted by l (never by a per-campaign limit), and
// sending inside l's window from r.At (periodEnd: the calendar period's
// end).
func (m *refModel) bookings(r Request, l Limit, periodEnd int64) (int, Planned) {
	n, first := 0, Planned{}
	until := r.At.Add(l.Window)
	if l.Calendar != None {
		until = time.Unix(periodEnd, 0)
	}
	for _, p := range r.Planned {
		msg := Request{Campaign: p.Campaign, Channel: p.Channel, Category: p.Category, Tags: p.Tags}
		if p.Priority <= r.Priority || p.Campaign == r.Campaign || !r.At.Before(p.Ends) ||
			l.Per == PerCampaign || !refMatches(l.Where, &msg) || !p.Starts.Before(until) {
			continue
		}
		if n == 0 || p.Ends.Before(first.Ends) {
			first = p
		}
		n++
	}
	return n, first
}

// refScope names what a limit counts: its where (each dimension as a set)
// and per. Limits with the same name count the same sends.
func refScope(w Where, per Per) string {
	var b strings.Builder
	for _, d := range [][]string{w.Channels, w.Tags, w.Categories, w.Campaigns} {
		set := slices.Clone(d)
		slices.Sort(set)
		fmt.Fprintf(&b, "%q;", slices.Compact(set))
	}
	fmt.Fprint(&b, per == PerCampaign)
	return b.String()
}

// refund gives back the slots of the send of id by the engine's rule,
// stated on sends: among the user's recognised ids (those written within
// the idempotency window before the last write), the latest with this id
// was allowed at t along with k sends in all (itself included); it leaves
// the log of each scope (and campaign, per campaign) that holds all k of
// them at t and is not trimmed (model_trim_test.go), and stays in the
// others. A log holds, as of the user's last write, the newest sends it
// counts inside its retention, at most its scope's largest max. The user's
// record must not have been swept (a write within the idempotency window
// of the test's time).
func (m *refModel) refund(uid uint64, id string) RefundResult {
	u := m.users[uid]
	if u == nil || len(u.writes) == 0 {
		return RefundUnknown
	}
	last := u.writes[len(u.writes)-1].at
	var known []refSend
	for _, w := range u.writes {
		if w.at >= last-m.idem {
			known = append(known, w)
		}
	}
	known = known[max(len(known)-maxIdem, 0):]
	var target *refSend
	for i := range known {
		if known[i].r.IntentID == id {
			target = &known[i]
		}
	}
	if target == nil {
		return RefundUnknown
	}
	k := 0
	for _, w := range known {
		if w.at == target.at {
			k++
		}
	}
	done := map[string]bool{}
	res := RefundNothing
	all := m.allLimits()
	for _, l := range all {
		scope := refScope(l.Where, l.Per)
		if done[scope] || !refMatches(l.Where, &target.r) || target.gone[scope] {
			continue
		}
		done[scope] = true
		info := m.scopes()[scope]
		// A scope that only max-0 limits look at has no section.
		if info.keep == 0 || u.trimmed[logKey(scope, info, &target.r)] {
			continue
		}
		// The log holds its newest sends inside its retention at the
		// user's last write, at most keep (mark).
		key := logKey(scope, info, &target.r)
		held := u.held[key]
		c := 0
		for _, t := range held {
			if t == target.at {
				c++
			}
		}
		if c == k {
			target.gone[scope], res = true, RefundApplied
			i := slices.Index(held, target.at)
			u.held[key] = slices.Delete(slices.Clone(held), i, i+1)
		}
	}
	return res
}

// allLimits are the limits of every policy of the rules.
func (m *refModel) allLimits() []Limit {
	all := slices.Clone(m.rules.Default.Limits)
	for _, s := range m.rules.Segments {
		all = append(all, s.Limits...)
	}
	return all
}

// Test traffic vocabularies.
var (
	testChannels  = []string{"email", "push", "sms", "inapp"}
	testTags      = []string{"promo", "promo", "promo", "newsletter", "news", "weekly-digest", "x"}
	testCampaigns = []string{"c1", "c2", "c3", "c4", "flash-sale", "alert", "spring", "c8"}
	testZones     = []string{"", "Asia/Singapore", "America/New_York", "Europe/London", "Pacific/Kiritimati",
		"Etc/GMT+12", "Australia/Lord_Howe", "Asia/Kathmandu", "America/St_Johns"}
)

// gen makes random traffic: hot users driven into their caps, repeated ids,
// time that mostly creeps and sometimes jumps to just before, at or after a
// rolling window's edge or a calendar boundary in a user's time zone, or
// past every retention.
type gen struct {
	rng      *rand.Rand
	users    []uint64
	seg      map[uint64]string
	tz       map[uint64]*time.Location
	zones    []*time.Location
	now      time.Time
	ids      map[uint64][]string
	allowed  []refSend // allowed intents, for edge jumps
	focus    uint64    // after an edge jump, the first requests go to this user
	focusN   int
	next     int
	invalid  bool // also make a few invalid requests
	noMoves  bool // users keep their segment
	noBypass bool // no intent asks to bypass the caps
	// plans: campaign plans announced around now (each request carries
	// those whose audience holds its user), renewed as they end.
	plans    []Planned
	usePlans bool
}

// priorities are the test traffic's: the named ones, and the scale's ends.
var testPriorities = []Priority{Low, Normal, Normal, High, 0, 10, 60, 90, MaxPriority}

// plansFor renews the pool of plans (one that ended is replaced by one
// that starts within the next two days) and returns those whose audience
// holds u (half of the users of each, by a hash).
func (g *gen) plansFor(u uint64) []Planned {
	for len(g.plans) < 6 {
		g.plans = append(g.plans, Planned{})
	}
	for i := range g.plans {
		p := &g.plans[i]
		if p.Campaign != "" && g.now.Before(p.Ends) {
			continue
		}
		starts := g.now.Add(time.Duration(g.rng.IntN(50*3600)-3600) * time.Second)
		*p = Planned{Campaign: testCampaigns[g.rng.IntN(len(testCampaigns))], Priority: testPriorities[g.rng.IntN(len(testPriorities))],
			Starts: starts, Ends: starts.Add(time.Duration(600+g.rng.IntN(86400)) * time.Second),
			Channel: testChannels[g.rng.IntN(len(testChannels))], Category: "marketing"}
		if g.rng.IntN(3) == 0 {
			p.Tags = []string{"promo"}
		}
		if g.rng.IntN(2) == 0 { // as the plans package makes them: shared, its scopes remembered
			*p = NewPlanned(*p)
		}
	}
	var out []Planned
	for i, p := range g.plans {
		if (u*2654435761+uint64(i)*40503)>>7%2 == 0 {
			out = append(out, p)
		}
	}
	return out
}

func newGen(t testing.TB, seed uint64, users int, start time.Time) *gen {
	g := &gen{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), seg: map[uint64]string{},
		tz: map[uint64]*time.Location{}, now: start, ids: map[uint64][]string{}}
	for _, z := range testZones {
		var loc *time.Location
		if z != "" {
			loc = mustZone(t, z)
		}
		g.zones = append(g.zones, loc)
	}
	segs := testSegments()
	for len(g.users) < users {
		var u uint64
		switch g.rng.IntN(3) {
		case 0:
			u = uint64(g.rng.IntN(1000))
		case 1:
			u = g.rng.Uint64() // up to 20 digits
		default:
			u = uint64(g.rng.Int32())
		}
		if _, dup := g.seg[u]; dup {
			continue
		}
		g.users = append(g.users, u)
		g.seg[u] = segs[g.rng.IntN(len(segs))]
		g.tz[u] = g.zones[g.rng.IntN(len(g.zones))]
	}
	return g
}

var edgeWindows = []time.Duration{10 * time.Minute, time.Hour, 4 * time.Hour, day, 7 * day}

func (g *gen) step(rules Rules) {
	r := g.rng.Float64()
	switch {
	case r < 0.45:
		g.now = g.now.Add(time.Duration(g.rng.IntN(30_000)) * time.Millisecond)
	case r < 0.65:
		g.now = g.now.Add(time.Duration(g.rng.IntN(2*3600)) * time.Second)
	case r < 0.80 && len(g.allowed) > 0: // a rolling window's edge
		for range 20 {
			a := g.allowed[g.rng.IntN(len(g.allowed))]
			w := int64(edgeWindows[g.rng.IntN(len(edgeWindows))] / time.Second)
			at := time.Unix(a.at+w+int64(g.rng.IntN(3)), int64(g.rng.IntN(1000))*1e6).UTC()
			if at.After(g.now) {
				g.now, g.focus, g.focusN = at, a.r.UserID, 1+g.rng.IntN(3)
				break
			}
		}
	case r < 0.95: // a calendar boundary in some user's zone
		u := g.users[g.rng.IntN(min(20, len(g.users)))]
		loc := g.tz[u]
		if loc == nil {
			loc = rules.TimeZone
		}
		c := []Calendar{Day, Day, Week, Month}[g.rng.IntN(4)]
		_, end := refPeriod(c, g.now, loc, rules.WeekStart)
		if end-g.now.Unix() < 8*86400 {
			at := time.Unix(end+int64(g.rng.IntN(3)-1), int64(g.rng.IntN(1000))*1e6).UTC()
			if at.After(g.now) {
				g.now, g.focus, g.focusN = at, u, 1+g.rng.IntN(3)
			}
		}
	case r < 0.97:
		g.now = g.now.Add(time.Duration(1+g.rng.IntN(8*24)) * time.Hour) // past the retention
	default:
		g.now = g.now.Add(time.Millisecond)
	}
}

func (g *gen) batch(n int) []Request {
	reqs := make([]Request, 0, n)
	segs := testSegments()
	for range n {
		var u uint64
		if g.focusN > 0 {
			u = g.focus
			g.focusN--
		} else if g.rng.IntN(10) < 4 {
			u = g.users[g.rng.IntN(min(20, len(g.users)))] // hot users
		} else {
			u = g.users[g.rng.IntN(len(g.users))]
		}
		r := Request{UserID: u, Segment: g.seg[u], Channel: testChannels[g.rng.IntN(len(testChannels))], At: g.now,
			Category: "marketing", Campaign: testCampaigns[g.rng.IntN(len(testCampaigns))], TimeZone: g.tz[u],
			Priority: testPriorities[g.rng.IntN(len(testPriorities))]}
		if g.usePlans {
			r.Planned = g.plansFor(u)
		}
		for range g.rng.IntN(3) {
			r.Tags = append(r.Tags, testTags[g.rng.IntN(len(testTags))])
		}
		if g.rng.IntN(8) == 0 { // promotional pushes, a cap of their own
			r.Channel, r.Tags = "push", append(r.Tags, "promo")
		}
		switch k := g.rng.IntN(100); {
		case k < 5:
			r.Category = "transactional"
		case k < 25:
			r.Category = "lifecycle"
		}
		switch k := g.rng.IntN(100); {
		case g.noBypass:
		case k < 4:
			r.Override = Bypass
		case k < 6:
			r.Override = BypassUncounted
		}
		if g.rng.IntN(30) == 0 { // the user moved to another time zone
			r.TimeZone = g.zones[g.rng.IntN(len(g.zones))]
		}
		if !g.noMoves && g.rng.IntN(20) == 0 { // the user moved to another segment
			r.Segment = segs[g.rng.IntN(len(segs))]
		}
		if prev := g.ids[u]; len(prev) > 0 && g.rng.IntN(100) < 15 {
			r.IntentID = prev[g.rng.IntN(len(prev))]
		} else {
			g.next++
			r.IntentID = fmt.Sprintf("intent-%d", g.next)
			if g.rng.IntN(50) == 0 {
				r.IntentID += strings.Repeat("x", MaxIntentID-len(r.IntentID))
			}
			g.ids[u] = append(g.ids[u], r.IntentID)
		}
		if g.invalid {
			switch g.rng.IntN(200) {
			case 0:
				r.Channel = "fax"
			case 1:
				r.Category = "gossip"
			}
		}
		if !g.noMoves && g.rng.IntN(100) == 0 {
			r.Segment = "ghost" // moved to a segment without a policy: the default one
		}
		reqs = append(reqs, r)
		if g.focusN == 0 && g.rng.IntN(10) < 3 {
			g.now = g.now.Add(time.Duration(g.rng.IntN(1000)) * time.Millisecond)
		}
	}
	return reqs
}

// compareOpts relaxes the comparison where a fault made go-redis re-send a
// node's whole sub-batch after its first run went unseen: the re-run sees
// every intent the first run allowed, including later ones of the batch, so
// an intent the first run allowed answers Duplicate (At the first run's
// time), and a limit and retry-after may differ. Only the outcome is
// compared then; the stored records, checked afterwards, show that nothing
// was counted twice.
type compareOpts struct {
	resent  bool
	relaxed *int // counts the comparisons that needed the relaxation
	plans   bool // the traffic carries campaign plans (gen.usePlans)
}

func compare(got, want Decision, o compareOpts) error {
	if want.Err != nil {
		if !errors.Is(got.Err, ErrInvalidRequest) {
			return fmt.Errorf("want an invalid-request error, got %+v", got)
		}
		return nil
	}
	if got.Err != nil {
		return fmt.Errorf("unexpected error: %v", got.Err)
	}
	if got.Outcome == want.Outcome && got.Limit == want.Limit && got.RetryAfter == want.RetryAfter && got.HeldFor == want.HeldFor &&
		got.At.Equal(want.At) && got.Override == want.Override && got.OverrideRefused == want.OverrideRefused {
		return nil
	}
	// (An intent the model caps may be a duplicate too: the same id, allowed
	// later in the batch by the unseen run.)
	if o.resent && (got.Outcome == Duplicate && (want.Outcome == Allowed || want.Outcome == Capped) ||
		want.Outcome == got.Outcome && want.Outcome != Allowed) {
		if o.relaxed != nil {
			*o.relaxed++
		}
		return nil
	}
	return fmt.Errorf("got %s limit=%q held=%q retry=%+v at=%s override=%s refused=%v, want %s limit=%q held=%q retry=%+v at=%s override=%s refused=%v",
		got.Outcome, got.Limit, got.HeldFor, got.RetryAfter, got.At.UTC(), got.Override, got.OverrideRefused,
		want.Outcome, want.Limit, want.HeldFor, want.RetryAfter, want.At.UTC(), want.Override, want.OverrideRefused)
}

// runModel decides random batches with e and with the model and fails on the
// first difference. hook runs before each batch (fault injection).
func runModel(t *testing.T, e *Engine, seed uint64, start time.Time, intents int, o compareOpts, hook func(batch int)) (*refModel, *gen) {
	t.Helper()
	ctx := context.Background()
	m := newRefModel(e.set.Load().rules, time.Duration(e.set.Load().idem)*time.Second)
	g := newGen(t, seed, 300, start)
	g.invalid, g.usePlans = true, o.plans
	outcomes := map[string]int{}
	limits := map[string]int{}
	for b, done := 0, 0; done < intents; b++ {
		if hook != nil {
			hook(b)
		}
		g.step(m.rules)
		n := 1 + g.rng.IntN(200)
		if g.rng.IntN(4) == 0 {
			n = 1 + g.rng.IntN(5)
		}
		reqs := g.batch(n)
		got, err := e.Decide(ctx, reqs)
		if err != nil {
			t.Fatalf("seed %d batch %d: Decide: %v", seed, b, err)
		}
		if len(got) != len(reqs) {
			t.Fatalf("seed %d batch %d: %d decisions for %d requests", seed, b, len(got), len(reqs))
		}
		for i, r := range reqs {
			want := m.decide(r)
			if err := compare(got[i], want, o); err != nil {
				t.Fatalf("seed %d (-capping.seed) batch %d request %d %+v (user's segment %s):\n%v", seed, b, i, r, g.seg[r.UserID], err)
			}
			switch {
			case got[i].Err != nil:
				outcomes["invalid"]++
			case got[i].Override != NoOverride:
				outcomes[got[i].Override.String()]++
			case got[i].OverrideRefused:
				outcomes["override refused"]++
			default:
				outcomes[got[i].Outcome.String()]++
			}
			if got[i].Outcome == Capped && got[i].Err == nil {
				limits[got[i].Limit]++
				if got[i].HeldFor != "" {
					outcomes["held for a plan"]++
				}
			}
			if want.Outcome == Allowed {
				g.allowed = append(g.allowed, refSend{at: r.At.Unix(), r: r})
			}
		}
		done += n
	}
	t.Logf("seed %d: %d intents until %s: %v; capped by %v", seed, intents, g.now.Format(time.DateOnly), outcomes, limits)
	// The traffic must have exercised every outcome and, in a long run,
	// every limit kind.
	want := []string{"allowed", "capped", "duplicate", "exempt", "invalid", "bypass", "bypass-uncounted", "override refused"}
	if o.plans {
		want = append(want, "held for a plan")
	}
	for _, o := range want {
		if outcomes[o] == 0 {
			t.Errorf("no %s decision in the run: the generator no longer exercises it", o)
		}
	}
	for _, l := range []string{"promo-day", "same-campaign", "email-day", "news-week", "no-sms", "flash", "lifecycle-camp-day", "camp-week", "hourly"} {
		if limits[l] == 0 && intents >= 8000 {
			t.Errorf("no intent capped by limit %s in the run", l)
		}
	}
	return m, g
}

// checkStored compares every stored record with the one the model implies:
// after a user's last write at L, the idempotency entries of the writes
// since L - window, and per scope (and campaign) the newest sends the scope
// keeps (those since L - its retention, at most its largest max). A record
// may be missing only if a later write into its bucket swept it (its last
// write is older than that write minus the key life).
func checkStored(t *testing.T, c redis.UniversalClient, e *Engine, m *refModel) {
	t.Helper()
	ctx := context.Background()
	set := e.set.Load()
	// A limit of each scope: its where is the scope's.
	scopeLimit := make([]Limit, len(set.scopes))
	for _, p := range set.pols {
		for _, l := range p.limits {
			scopeLimit[l.scope] = l.Limit
		}
	}
	bucketLast := map[string]int64{}
	for uid, u := range m.users {
		if len(u.writes) > 0 {
			k := e.keys.bucket(uid)
			bucketLast[k] = max(bucketLast[k], u.writes[len(u.writes)-1].at)
		}
	}
	checked, swept, trimmed := 0, 0, 0
	for uid, u := range m.users {
		key := e.keys.bucket(uid)
		raw, err := c.HGet(ctx, key, field(uid)).Bytes()
		if errors.Is(err, redis.Nil) {
			raw, err = nil, nil
		}
		if err != nil {
			t.Fatalf("user %d: HGET: %v", uid, err)
		}
		if len(u.writes) == 0 {
			if raw != nil {
				t.Fatalf("user %d: a record of %d bytes, but nothing was ever recorded", uid, len(raw))
			}
			continue
		}
		last := u.writes[len(u.writes)-1].at
		if raw == nil {
			if last >= bucketLast[key]-set.keyLife {
				t.Fatalf("user %d: no record, last write at %d, the bucket's last at %d (key life %ds)", uid, last, bucketLast[key], set.keyLife)
			}
			swept++
			continue
		}
		got, err := decodeRecord(raw)
		if err != nil {
			t.Fatalf("user %d: record %x: %v", uid, raw, err)
		}
		if !bytes.Equal(got.encode(), raw) {
			t.Fatalf("user %d: the script wrote %x, Go encodes the same record as %x", uid, raw, got.encode())
		}
		var want record
		for _, w := range u.writes {
			if w.at >= last-set.idem {
				d := digest(w.r.IntentID)
				want.idem = append(want.idem, idemEntry{digest: [5]byte(d[:5]), at: w.at})
			}
		}
		if len(want.idem) > maxIdem {
			want.idem = want.idem[len(want.idem)-maxIdem:]
		}
		if !slices.Equal(got.idem, want.idem) {
			t.Fatalf("user %d: idempotency entries\n got %v\nwant %v", uid, got.idem, want.idem)
		}
		type sectionKey struct {
			id       uint32
			campaign [3]byte
		}
		wantSecs, wantTrimmed := map[sectionKey][]int64{}, map[sectionKey]bool{}
		for i, s := range set.scopes {
			l := scopeLimit[i]
			for _, send := range u.sends {
				if send.at < last-s.retention || !refMatches(l.Where, &send.r) {
					continue
				}
				k := sectionKey{id: s.id}
				if s.per == PerCampaign {
					k.campaign = campaignHash(send.r.Campaign)
				}
				wantSecs[k] = append(wantSecs[k], send.at)
				scope := refScope(l.Where, l.Per)
				wantTrimmed[k] = u.trimmed[logKey(scope, m.scopes()[scope], &send.r)]
			}
			for k, times := range wantSecs {
				if k.id == s.id && len(times) > s.keep {
					wantSecs[k] = times[len(times)-s.keep:]
				}
				if len(wantSecs[k]) == 0 {
					delete(wantSecs, k)
				}
			}
		}
		if len(got.sections) != len(wantSecs) {
			t.Fatalf("user %d: %d sections %+v, want %d %v", uid, len(got.sections), got.sections, len(wantSecs), wantSecs)
		}
		for _, s := range got.sections {
			k := sectionKey{id: s.id, campaign: s.campaign}
			if !slices.Equal(s.times, wantSecs[k]) || s.trimmed != wantTrimmed[k] {
				t.Fatalf("user %d: section %06x/%x holds %v trimmed %t, want %v trimmed %t", uid, s.id, s.campaign, s.times, s.trimmed, wantSecs[k], wantTrimmed[k])
			}
			if s.trimmed {
				trimmed++
			}
		}
		m, err := c.HGet(ctx, key, xField).Result()
		x, _, ok := readMark(m)
		if err != nil || !ok || x < last+set.keyLife {
			t.Fatalf("user %d: bucket expiry mark %d (%v), want at least %d", uid, x, err, last+set.keyLife)
		}
		if ttl, err := c.TTL(ctx, key).Result(); err != nil || ttl <= 0 {
			t.Fatalf("user %d: bucket TTL %v %v", uid, ttl, err)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no stored record checked")
	}
	t.Logf("%d records checked, %d swept by a later write into their bucket, %d trimmed sections", checked, swept, trimmed)
}

// Model runs start before the spring and autumn DST changes of the test
// zones (America/New_York 2026-03-08 and 2026-11-01, Europe/London
// 2026-03-29 and 2026-10-25, Lord Howe's half-hour change on 2026-04-05 and
// 2026-10-04) and run across them.
var (
	spring = time.Date(2026, 3, 6, 15, 0, 0, 0, time.UTC)
	autumn = time.Date(2026, 10, 22, 15, 0, 0, 0, time.UTC)
)

func TestModelSingleNode(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	c := r.Client()
	for i, start := range []time.Time{spring, autumn} {
		t.Run(start.Format("2006-01"), func(t *testing.T) {
			e := newEngine(t, c, Options{IdempotencyWindow: 2 * time.Hour, KeyPrefix: fmt.Sprintf("m%d", i)})
			m, _ := runModel(t, e, *modelSeed+uint64(i)*100, start, 8000, compareOpts{}, nil)
			checkStored(t, c, e, m)
		})
	}
}

// TestModelWithPlans: random campaign plans (priorities over the whole
// scale, windows before, across and after the decisions, messages some
// limits count and others not) in the traffic, on a single node and a
// cluster: every decision is the model's, the plan it was held for and the
// retry-after included, and the stored records are the model's.
func TestModelWithPlans(t *testing.T) {
	for _, mode := range []string{"single", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			var c redis.UniversalClient
			if mode == "single" {
				c = testenv.StartRedis(t, testenv.RedisOptions{}).Client()
			} else {
				c = testenv.StartCluster(t, 3).Client()
			}
			e := newEngine(t, c, Options{IdempotencyWindow: 2 * time.Hour, KeyPrefix: "plans"})
			m, _ := runModel(t, e, *modelSeed+70, autumn, 8000, compareOpts{plans: true}, nil)
			checkStored(t, c, e, m)
		})
	}
}

func TestModelCluster(t *testing.T) {
	cl := testenv.StartCluster(t, 3)
	c := cl.Client()
	e := newEngine(t, c, Options{IdempotencyWindow: 2 * time.Hour})
	m, _ := runModel(t, e, *modelSeed+1, autumn, 8000, compareOpts{}, nil)
	checkStored(t, c, e, m)
	// The batches spanned every master.
	for i, n := range cl.Nodes {
		if calls := evalCalls(t, n.Client()); calls == 0 {
			t.Errorf("master %d (%s) ran no script call", i, n.Addr())
		}
	}
}

// refundSide answers decisions and refunds: the system under test, or what
// it is compared with.
type refundSide struct {
	decide func([]Request) []Decision
	refund func([]RefundRequest) []RefundOutcome
}

// refundTraffic runs gen's random traffic with refunds mixed in: after most
// batches, a few refunds of intents allowed (mostly recent ones, often one
// sharing its second with another send of its user), refunded before, never
// seen or invalid, of the users eligible accepts. Every answer of got must
// be want's.
func refundTraffic(t *testing.T, g *gen, seed uint64, intents int, got, want refundSide, eligible func(uint64) bool) {
	t.Helper()
	seen := map[string]int{}
	var refunded []RefundRequest
	for b, done := 0, 0; done < intents; b++ {
		g.step(testRules())
		reqs := g.batch(1 + g.rng.IntN(60))
		gd, wd := got.decide(reqs), want.decide(reqs)
		for i, r := range reqs {
			if err := compare(gd[i], wd[i], compareOpts{}); err != nil {
				t.Fatalf("seed %d batch %d request %d %+v:\n%v", seed, b, i, r, err)
			}
			if gd[i].Err != nil {
				seen["invalid"]++
			} else {
				seen[gd[i].Outcome.String()]++
			}
			if wd[i].Err == nil && wd[i].Outcome == Allowed {
				g.allowed = append(g.allowed, refSend{at: r.At.Unix(), r: r})
			}
		}
		done += len(reqs)
		if g.rng.IntN(3) == 0 || len(g.allowed) == 0 {
			continue
		}
		// Recent sends that share their second with another of their user's.
		var twins []refSend
		type second struct {
			uid uint64
			at  int64
		}
		n := map[second]int{}
		recent := g.allowed[max(len(g.allowed)-300, 0):]
		for _, a := range recent {
			n[second{a.r.UserID, a.at}]++
		}
		for _, a := range recent {
			if n[second{a.r.UserID, a.at}] > 1 {
				twins = append(twins, a)
			}
		}
		var refs []RefundRequest
		for range 1 + g.rng.IntN(8) {
			r := RefundRequest{UserID: g.users[g.rng.IntN(len(g.users))], IntentID: "never"}
			switch k := g.rng.IntN(100); {
			case k < 25 && len(twins) > 0:
				a := twins[g.rng.IntN(len(twins))].r
				r = RefundRequest{UserID: a.UserID, IntentID: a.IntentID}
			case k < 60:
				a := g.allowed[max(len(g.allowed)-1-g.rng.IntN(20), 0)].r
				r = RefundRequest{UserID: a.UserID, IntentID: a.IntentID}
			case k < 75:
				a := g.allowed[g.rng.IntN(len(g.allowed))].r
				r = RefundRequest{UserID: a.UserID, IntentID: a.IntentID}
			case k < 88 && len(refunded) > 0:
				r = refunded[g.rng.IntN(len(refunded))]
			case k >= 97:
				r.IntentID = strings.Repeat("x", g.rng.IntN(2)*(MaxIntentID+1))
			}
			if eligible(r.UserID) {
				refs = append(refs, r)
			}
		}
		gr, wr := got.refund(refs), want.refund(refs)
		for i, r := range refs {
			if (wr[i].Err == nil) != (gr[i].Err == nil) || wr[i].Err == nil && gr[i].Result != wr[i].Result {
				t.Fatalf("seed %d batch %d: refund %d %+v: %+v, want %+v", seed, b, i, r, gr[i], wr[i])
			}
			if gr[i].Err != nil {
				seen["refund invalid"]++
				continue
			}
			seen["refund "+gr[i].Result.String()]++
			if gr[i].Result == RefundApplied {
				refunded = append(refunded, r)
			}
		}
	}
	t.Logf("seed %d: %v", seed, seen)
	for _, o := range []string{"allowed", "capped", "duplicate", "refund applied", "refund unknown", "refund nothing", "refund invalid"} {
		if seen[o] == 0 {
			t.Errorf("no %s in the run: the traffic no longer exercises it", o)
		}
	}
}

// TestRefundModel: random traffic with refunds, on a single node (with the
// refusal cache) and a cluster, answered as the reference model does. The
// traffic has bypasses and users who move between segments and time zones,
// so logs get trimmed (more sends in a window than the scope keeps) and
// refunds meet trimmed logs: no refund may let through an intent the
// model's full log caps.
func TestRefundModel(t *testing.T) {
	single := testenv.StartRedis(t, testenv.RedisOptions{}).Client()
	cluster := testenv.StartCluster(t, 3).Client()
	for i, c := range []redis.UniversalClient{single, cluster} {
		t.Run([]string{"single", "cluster"}[i], func(t *testing.T) {
			idem := 2 * time.Hour
			o := Options{IdempotencyWindow: idem, KeyPrefix: fmt.Sprint("rm", i)}
			if i == 0 {
				o.RefusalCacheSize, o.RefusalCacheTTL = 10_000, time.Hour
			}
			e := newEngine(t, c, o)
			m := newRefModel(e.set.Load().rules, idem)
			seed := *modelSeed + uint64(i) + 40
			g := newGen(t, seed, 300, autumn)
			g.invalid = true
			model := oneByOne(func(r *Request) Decision { return m.decide(*r) },
				func(r RefundRequest) RefundResult { return m.refund(r.UserID, r.IntentID) })
			// A record is never swept while its user wrote within the
			// idempotency window (the key life is at least that).
			recent := func(uid uint64) bool {
				u := m.users[uid]
				return u == nil || len(u.writes) == 0 || u.writes[len(u.writes)-1].at >= g.now.Unix()-m.idem
			}
			refundTraffic(t, g, seed, 8000, engineSide(t, e), model, recent)
		})
	}
}
