package policy

// From the document to the engine's rules, with every problem at its path.
// capping.Rules.Problems owns the rules of the engine (names, ranges,
// references between lists); this file adds only what the document can get
// wrong before there are rules: a missing max, a value that does not parse
// (calendar, per, priority, time zone, week day), the legacy channel key,
// and the facts capping.Rules does not hold (default_category, segment
// names).

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/problems"
	"github.com/capper-dev/capper/internal/segments"
)

// weekDays are the week_start values, by time.Weekday.
var weekDays = [...]string{
	time.Sunday: "sunday", time.Monday: "monday", time.Tuesday: "tuesday", time.Wednesday: "wednesday",
	time.Thursday: "thursday", time.Friday: "friday", time.Saturday: "saturday",
}

// Rules converts the document into the engine's rules and reports every
// problem of the document at once, each at the path of its field from the
// document's root. Rules that come with problems are only good for
// reporting them; without problems, they pass capping.Rules.Validate.
func (d *Document) Rules() (capping.Rules, problems.List) {
	var ps problems.List
	// legacy are the limits that name their channel with the legacy
	// channel key.
	var legacy []problems.Path
	r := capping.Rules{
		Segments:         make([]capping.Segment, 0, len(d.Segments)),
		Channels:         d.Channels,
		Categories:       d.Categories,
		DefaultCategory:  d.DefaultCategory,
		ExemptCategories: d.ExemptCategories,
		Overrides:        capping.Overrides{Campaigns: d.Overrides.Campaigns, Categories: d.Overrides.Categories},
		TimeZone:         d.timeZone(&ps),
		WeekStart:        d.weekStart(&ps),
	}
	if !slices.Contains(d.Categories, d.DefaultCategory) {
		ps.Add(problems.Key("default_category"), "%q is not one of the categories (%s)", d.DefaultCategory, strings.Join(d.Categories, ", "))
	}
	for i, s := range d.Segments {
		path := capping.SegmentPath(i, s.Name)
		switch err := segments.ValidateSegmentName(s.Name); {
		case s.Name == segments.None:
			ps.Add(path.Key("name"), `"none" is reserved for users in no segment (they get default_policy)`)
		case err != nil && s.Name != "": // capping reports an empty name
			ps.Add(path.Key("name"), "%v", err)
		}
		r.Segments = append(r.Segments, capping.Segment{Name: s.Name, Policy: policy(&ps, &legacy, path, s.Limits, s.Holding)})
	}
	r.Default = policy(&ps, &legacy, problems.Key("default_policy"), d.DefaultPolicy.Limits, d.DefaultPolicy.Holding)
	r.Users = d.UserLimits.rules(&ps, &legacy, d.Channels)

	// A problem capping finds at a path the document already reported is
	// the same problem seen through the value that stood in for a bad one
	// (no time zone, no window): it is reported once, in the document's
	// words.
	reported := slices.Clone(ps)
	for _, p := range r.Problems() {
		p.Path = documentPath(p.Path, legacy)
		if !slices.ContainsFunc(reported, func(q problems.Problem) bool { return slices.Equal(q.Path, p.Path) }) {
			ps = append(ps, p)
		}
	}
	// In the document's order, so that the problems of one limit are
	// together whoever found them.
	slices.SortStableFunc(ps, func(a, b problems.Problem) int { return comparePaths(a.Path, b.Path) })
	return r, ps
}

// documentPath is the path in the document of a problem capping reports at
// path: a legacy limit's channel key is where.channels[0] to capping.
func documentPath(path problems.Path, legacy []problems.Path) problems.Path {
	for _, l := range legacy {
		if slices.Equal(path, l.Key("where.channels").Index(0)) {
			return l.Key("channel")
		}
	}
	return path
}

// topKeys are the document's keys in the order of Document.
var topKeys = []string{"channels", "categories", "default_category", "exempt_categories", "overrides",
	"time_zone", "week_start", "segments", "default_policy", "budgets"}

// comparePaths orders problems' paths: by top-level key, then segment, then
// limit (a path through no segment or limit before those through one).
func comparePaths(a, b problems.Path) int {
	return cmp.Or(
		cmp.Compare(slices.Index(topKeys, a.Top()), slices.Index(topKeys, b.Top())),
		cmp.Compare(a.Item("segments"), b.Item("segments")),
		cmp.Compare(a.Item("limits"), b.Item("limits")),
	)
}

// Problems reports every problem of the document at once: those of Rules,
// then those of Pacing (budgets), without the rules and the set.
func (d *Document) Problems() problems.List {
	_, ps := d.Rules()
	_, bps := d.Pacing()
	return append(ps, bps...)
}

// timeZone resolves time_zone; nil when it does not resolve.
func (d *Document) timeZone(ps *problems.List) *time.Location {
	switch d.TimeZone {
	case "":
		ps.Add(problems.Key("time_zone"), "is required: an IANA time zone name such as UTC or Europe/Paris")
		return nil
	case "Local":
		// The machine's zone would make the caps differ between hosts.
		ps.Add(problems.Key("time_zone"), `"Local" is the zone of whichever machine runs capper: name the zone (e.g. UTC, Europe/Paris)`)
		return nil
	}
	loc, err := time.LoadLocation(d.TimeZone)
	if err != nil {
		ps.Add(problems.Key("time_zone"), "%q is not a time zone of the IANA database (e.g. UTC, Europe/Paris)", d.TimeZone)
		return nil
	}
	return loc
}

func (d *Document) weekStart(ps *problems.List) time.Weekday {
	if i := slices.Index(weekDays[:], d.WeekStart); i >= 0 {
		return time.Weekday(i)
	}
	ps.Add(problems.Key("week_start"), "%q is not one of monday, tuesday, wednesday, thursday, friday, saturday, sunday", d.WeekStart)
	return time.Monday
}

// policy converts the limits of the policy at path and what it holds back;
// legacy gets the paths of the limits that use the legacy channel key.
func policy(ps *problems.List, legacy *[]problems.Path, path problems.Path, ls []Limit, h Holding) capping.Policy {
	p := capping.Policy{Limits: make([]capping.Limit, 0, len(ls)), QuietHours: h.quietHours(ps, path.Key("quiet_hours"))}
	if h.OnCap != "" {
		if _, err := capping.ParseOnCap(h.OnCap); err != nil {
			ps.Add(path.Key("on_cap"), "%v", err)
		}
	}
	for i, l := range ls {
		at := capping.LimitPath(path, i, l.Name)
		c := l.limit(ps, legacy, at)
		c.OnCap, c.MaxDefer = l.onCap(ps, at, h)
		p.Limits = append(p.Limits, c)
	}
	return p
}

// limit converts one limit, at path at. A value that does not parse is
// reported here and replaced by one that lets capping check the rest of
// the limit without reporting it again.
func (l Limit) limit(ps *problems.List, legacy *[]problems.Path, at problems.Path) capping.Limit {
	c := capping.Limit{Name: l.Name, Window: l.Window.D(), Where: l.Where}
	if l.Max == nil {
		ps.Add(at.Key("max"), "is required (0 means never)")
	} else {
		c.Max = *l.Max
	}

	switch cal, err := capping.ParseCalendar(l.Calendar); {
	case l.Calendar == "" && l.Window == 0:
		// capping would say "0s out of range": the window is missing.
		ps.Add(at.Key("window"), "is required: a limit counts in a rolling window (e.g. 24h) or per calendar period (calendar: day, week or month)")
	case l.Calendar == "":
	case err != nil:
		ps.Add(at.Key("calendar"), "%v", err)
		c.Calendar = capping.Day // a stand-in: window and calendar together are still reported
	default:
		c.Calendar = cal
	}

	switch l.Per {
	case "", "user":
		c.Per = capping.PerUser
	case "campaign":
		c.Per = capping.PerCampaign
	default:
		ps.Add(at.Key("per"), "%q is not one of user, campaign", l.Per)
	}

	if r := l.Reserve; r != nil {
		c.Reserve.Below = capping.High
		if r.Below != "" {
			if p, err := threshold(r.Below); err != nil {
				ps.Add(at.Key("reserve.below"), "%v (intents below it may use only max - slots)%s", err, orZero(r.Below, ": 0 reserves nothing, no priority is below it"))
			} else {
				c.Reserve.Below = p
			}
		}
		switch {
		case r.Slots < 1 && l.Max != nil:
			ps.Add(at.Key("reserve.slots"), "%d must be from 1 to max-1 (%d): reserved slots leave at least one for everyone", r.Slots, *l.Max-1)
		case r.Slots < 1:
			ps.Add(at.Key("reserve.slots"), "%d must be at least 1", r.Slots)
		case l.Max != nil:
			// Without a max, capping would compare the slots with 0.
			c.Reserve.Slots = r.Slots
		}
	}

	if l.Channel != "" {
		if len(l.Where.Channels) > 0 {
			ps.Add(at.Key("channel"), "and where.channels are the same filter: keep where.channels")
		} else {
			c.Where.Channels = []string{l.Channel}
			*legacy = append(*legacy, at)
		}
	}
	return c
}

// onCap resolves a limit's on_cap and max_defer over its policy's: a
// max_defer is kept only for a limit that defers (capping reports one set
// on the limit itself with suppress).
func (l Limit) onCap(ps *problems.List, at problems.Path, h Holding) (capping.OnCap, time.Duration) {
	name := cmp.Or(l.OnCap, h.OnCap, "suppress")
	oc, err := capping.ParseOnCap(name)
	if err != nil {
		if l.OnCap != "" {
			ps.Add(at.Key("on_cap"), "%v", err)
		}
		return capping.Suppress, 0
	}
	if oc == capping.Suppress {
		return oc, l.MaxDefer.D()
	}
	return oc, cmp.Or(l.MaxDefer, h.MaxDefer, DefaultMaxDefer).D()
}

// quietHours converts quiet_hours at path (nil when there are none).
func (h Holding) quietHours(ps *problems.List, at problems.Path) *capping.QuietHours {
	q := h.QuietHours
	if q == nil {
		return nil
	}
	c := &capping.QuietHours{Channels: q.Channels, Jitter: cmp.Or(q.Jitter, DefaultJitter).D(), IncludeExempt: q.IncludeExempt}
	for _, f := range []struct {
		name, v string
		dst     *int
	}{{"from", q.From, &c.From}, {"to", q.To, &c.To}} {
		t, err := time.Parse("15:04", f.v)
		if err != nil {
			ps.Add(at.Key(f.name), "%q is not a time of day HH:MM (e.g. 21:00)", f.v)
			*f.dst = -1
			continue
		}
		*f.dst = t.Hour()*60 + t.Minute()
	}
	if c.From < 0 || c.To < 0 {
		// Reported above; a stand-in keeps capping from reporting it again.
		c.From, c.To = 0, 1
	}
	return c
}
