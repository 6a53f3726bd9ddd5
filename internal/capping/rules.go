package capping

// The cap rules (policies of limits per segment, scopes, calendar windows,
// priorities, overrides) and their validation.

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/capper-dev/capper/internal/problems"
)

// Window bounds of a rolling limit.
const (
	MinWindow = time.Minute
	MaxWindow = 31 * 24 * time.Hour
)

// MaxMax bounds a limit's max: far above any frequency cap, it keeps a
// user's packed log small enough for Redis to keep it compact.
const MaxMax = 10_000

// MaxLimits bounds the limits of one policy (a bit each in the script's
// masks).
const MaxLimits = 30

// Limits on what an intent names (the event contract).
const (
	MaxTags     = 16
	MaxTagBytes = 64
)

// Priority orders intents and campaign plans on one scale, 0 (lowest) to
// MaxPriority: a plan books slots against intents of a lower priority
// (plans.go), and an intent below a limit's Reserve.Below may use only
// Max - Reserve.Slots of it. The names low, normal and high are points of
// the scale, with room around them for a day's campaigns.
type Priority uint8

// Named priorities, and the top of the scale.
const (
	Low         Priority = 25
	Normal      Priority = 50
	High        Priority = 75
	MaxPriority Priority = 100
)

var priorityNames = map[Priority]string{Low: "low", Normal: "normal", High: "high"}

func (p Priority) String() string {
	if n, ok := priorityNames[p]; ok {
		return n
	}
	return strconv.Itoa(int(p))
}

// ParsePriority reads "low", "normal", "high" or a whole number from 0 to
// MaxPriority.
func ParsePriority(s string) (Priority, error) {
	// A switch, not a range over priorityNames: every intent's priority is
	// read here (a held one twice), and a map's iteration costs more than
	// the rest of the parse.
	switch s {
	case "low":
		return Low, nil
	case "normal":
		return Normal, nil
	case "high":
		return High, nil
	}
	if n, err := strconv.Atoi(s); err == nil && n >= 0 && n <= int(MaxPriority) && strconv.Itoa(n) == s {
		return Priority(n), nil
	}
	return 0, fmt.Errorf("%q is not low, normal, high or a whole number from 0 to %d", s, MaxPriority)
}

// Calendar is a limit's calendar period; None is a rolling window.
type Calendar uint8

// Calendar periods, in the user's time zone.
const (
	None Calendar = iota
	Day
	Week
	Month
)

var calendarNames = [...]string{None: "", Day: "day", Week: "week", Month: "month"}

func (c Calendar) String() string {
	if int(c) < len(calendarNames) {
		return calendarNames[c]
	}
	return fmt.Sprintf("calendar(%d)", c)
}

// ParseCalendar reads "day", "week" or "month".
func ParseCalendar(s string) (Calendar, error) {
	if i := slices.Index(calendarNames[:], s); i > 0 {
		return Calendar(i), nil
	}
	return 0, fmt.Errorf("%q is not one of day, week, month", s)
}

// Override is what an intent asks of capping.
type Override uint8

// Overrides an intent may ask for; honoured only for the campaigns and
// categories of Rules.Overrides.
const (
	NoOverride      Override = iota
	Bypass                   // deliver without checking the caps; counted
	BypassUncounted          // deliver without checking; not counted
)

var overrideNames = [...]string{NoOverride: "", Bypass: "bypass", BypassUncounted: "bypass-uncounted"}

func (o Override) String() string {
	if int(o) < len(overrideNames) {
		return overrideNames[o]
	}
	return fmt.Sprintf("override(%d)", o)
}

// ParseOverride reads "bypass" or "bypass-uncounted".
func ParseOverride(s string) (Override, error) {
	if i := slices.Index(overrideNames[:], s); i > 0 {
		return Override(i), nil
	}
	return 0, fmt.Errorf("%q is not one of bypass, bypass-uncounted", s)
}

// Per is what a limit counts for: the user (default) or each of the user's
// campaigns on its own.
type Per uint8

// What a limit counts for.
const (
	PerUser Per = iota
	PerCampaign
)

// Reserve keeps Slots of a limit's Max for intents of priority Below or
// higher.
type Reserve struct {
	Slots int
	Below Priority
}

// Limit is one cap: at most Max intents that match Where in any rolling
// Window, or per calendar period (Calendar) in the user's time zone, per
// user or per campaign.
type Limit struct {
	Name     string
	Window   time.Duration // rolling; 0 with a Calendar
	Calendar Calendar
	Max      int
	Where    Where
	Per      Per
	Reserve  Reserve
	// OnCap says what becomes of an intent this limit caps: Suppress (the
	// zero value) or Defer, for at most MaxDefer (defer.go).
	OnCap    OnCap
	MaxDefer time.Duration
}

// Policy is the limits of one segment; every limit that applies must pass.
// QuietHours (nil: none) holds its intents back at night (defer.go).
type Policy struct {
	Limits     []Limit
	QuietHours *QuietHours
}

// Segment is the policy of one segment.
type Segment struct {
	Name string
	Policy
}

// Overrides lists who may ask to bypass the caps.
type Overrides struct {
	Campaigns, Categories []string
}

// Rules is everything the engine needs to decide. The config package builds
// it (and owns the defaults); the engine only validates it.
type Rules struct {
	Segments         []Segment // priority order, as configured
	Default          Policy    // users in a segment without a policy, or in none
	Channels         []string  // known channels
	Categories       []string  // known categories
	DefaultCategory  string    // of intents that name none (the decoder fills it in)
	ExemptCategories []string  // bypass capping, not counted
	Overrides        Overrides
	TimeZone         *time.Location // of users whose intent names none
	WeekStart        time.Weekday   // first day of a calendar week
	Users            *UserRules     // users' own limits (users.go); nil: not read
}

// SegmentPath is the path of a segment's policy,
// segments[i] (segment "name"); the default policy's is default_policy.
// The rules' problems are at the paths of the policy document (package
// policy), which reports its own at the same paths.
func SegmentPath(i int, name string) problems.Path {
	return problems.Key("segments").Named(i, "segment", name)
}

// LimitPath is the path of limit i of the policy at policy:
// <policy>.limits[i] (limit "name").
func LimitPath(policy problems.Path, i int, name string) problems.Path {
	return policy.Key("limits").Named(i, "limit", name)
}

// Problems reports every problem of the rules at once, each at its path.
func (r Rules) Problems() problems.List {
	var ps problems.List
	channels := names(&ps, problems.Key("channels"), r.Channels, true)
	categories := names(&ps, problems.Key("categories"), r.Categories, true)
	if r.DefaultCategory != "" && !categories[r.DefaultCategory] {
		ps.Add(problems.Key("default_category"), "%q is not one of the categories", r.DefaultCategory)
	}
	for i, c := range r.ExemptCategories {
		if !categories[c] {
			ps.Add(problems.Key("exempt_categories").Index(i), "%q is not one of the categories", c)
		}
	}
	for i, c := range r.Overrides.Categories {
		if !categories[c] {
			ps.Add(problems.Key("overrides.categories").Index(i), "%q is not one of the categories", c)
		}
	}
	names(&ps, problems.Key("overrides.campaigns"), r.Overrides.Campaigns, false)
	if r.TimeZone == nil {
		ps.Add(problems.Key("time_zone"), "is required")
	}
	seen := map[string]bool{}
	for i, s := range r.Segments {
		path := SegmentPath(i, s.Name)
		switch {
		case s.Name == "":
			ps.Add(path.Key("name"), "is required")
		case seen[s.Name]:
			ps.Add(path.Key("name"), "segment %q is listed twice", s.Name)
		}
		seen[s.Name] = true
		s.Policy.problems(&ps, path, channels, categories)
	}
	r.Default.problems(&ps, problems.Key("default_policy"), channels, categories)
	scopes := map[string]bool{}
	for _, p := range r.allPolicies() {
		for _, l := range p.Limits {
			scopes[canonical(l.Where, l.Per)] = true
		}
	}
	if r.Users != nil {
		r.Users.problems(&ps, channels, categories)
		for _, t := range r.Users.Tiers {
			for _, l := range t.Limits {
				scopes[canonical(l.Where, l.Per)] = true
			}
		}
		for _, c := range r.Users.Channels {
			scopes[canonical(Where{Channels: []string{c}}, PerUser)] = true
		}
	}
	if len(scopes) > MaxScopes {
		ps.Add(problems.Key("segments"), "the policies' limits select %d distinct scopes (where and per), at most %d are supported: limits with the same where and per share one", len(scopes), MaxScopes)
	}
	return ps
}

// Validate is Problems as one error (nil when there is none).
func (r Rules) Validate() error { return r.Problems().Err() }

// names checks a list of names (channels, categories, ...) and returns them
// as a set; required: at least one.
func names(ps *problems.List, path problems.Path, list []string, required bool) map[string]bool {
	if required && len(list) == 0 {
		ps.Add(path, "at least one is required")
	}
	set := map[string]bool{}
	for i, c := range list {
		switch {
		case !validName(c):
			ps.Add(path.Index(i), "%q must be non-empty, at most 64 bytes, without spaces, braces or colons", c)
		case set[c]:
			ps.Add(path.Index(i), "%q is listed twice", c)
		}
		set[c] = true
	}
	return set
}

// problems checks one policy at path.
func (p Policy) problems(ps *problems.List, path problems.Path, channels, categories map[string]bool) {
	if len(p.Limits) == 0 {
		ps.Add(path.Key("limits"), "at least one limit is required")
		return
	}
	if len(p.Limits) > MaxLimits {
		ps.Add(path.Key("limits"), "%d limits, at most %d are supported", len(p.Limits), MaxLimits)
	}
	seen := map[string]bool{}
	for i, l := range p.Limits {
		at := LimitPath(path, i, l.Name)
		switch {
		case !validName(l.Name):
			ps.Add(at.Key("name"), "%q must be non-empty, at most 64 bytes, without spaces, braces or colons", l.Name)
		case seen[l.Name]:
			ps.Add(at.Key("name"), "%q is used by an earlier limit of this policy", l.Name)
		}
		seen[l.Name] = true
		l.problems(ps, at, channels, categories)
		l.deferProblems(ps, at)
	}
	if q := p.QuietHours; q != nil {
		q.problems(ps, path.Key("quiet_hours"), channels)
	}
}

func (l Limit) problems(ps *problems.List, at problems.Path, channels, categories map[string]bool) {
	switch {
	case l.Calendar != None && l.Window != 0:
		ps.Add(at, "has both window and calendar: a limit is rolling or calendar, not both")
	case l.Calendar == None && (l.Window < MinWindow || l.Window > MaxWindow):
		ps.Add(at.Key("window"), "%s out of range [%s, %s]", l.Window, MinWindow, MaxWindow)
	case l.Calendar == None && l.Window%time.Second != 0:
		ps.Add(at.Key("window"), "%s is not a whole number of seconds", l.Window)
	case l.Calendar > Month:
		ps.Add(at.Key("calendar"), "%s is not one of day, week, month", l.Calendar)
	}
	switch {
	case l.Max < 0:
		ps.Add(at.Key("max"), "must not be negative, got %d", l.Max)
	case l.Max > MaxMax:
		ps.Add(at.Key("max"), "%d is above %d", l.Max, MaxMax)
	}
	if l.Reserve.Slots < 0 || (l.Reserve.Slots > 0 && l.Reserve.Slots >= l.Max) {
		ps.Add(at.Key("reserve.slots"), "%d must be from 1 to max-1 (%d): reserved slots leave at least one for everyone", l.Reserve.Slots, l.Max-1)
	}
	if l.Reserve.Slots > 0 && l.Reserve.Below == 0 {
		ps.Add(at.Key("reserve.below"), "0 reserves nothing: no priority is below it")
	}
	if l.Reserve.Below > MaxPriority {
		ps.Add(at.Key("reserve.below"), "%d is above %d", l.Reserve.Below, MaxPriority)
	}
	if l.Per > PerCampaign {
		ps.Add(at.Key("per"), "%d is not user or campaign", l.Per)
	}
	for _, d := range whereDims {
		for i, v := range d.list(&l.Where) {
			if msg := d.check(v, channels, categories); msg != "" {
				ps.Add(at.Key("where."+d.key).Index(i), "%s", msg)
			}
		}
	}
}

// PolicyOf returns the policy of a segment: its own, or Default for a
// segment without one (and for users in no segment).
func (r Rules) PolicyOf(segment string) Policy {
	for _, s := range r.Segments {
		if s.Name == segment {
			return s.Policy
		}
	}
	return r.Default
}

// allPolicies returns every policy, the default one included.
func (r Rules) allPolicies() []Policy {
	ps := []Policy{r.Default}
	for _, s := range r.Segments {
		ps = append(ps, s.Policy)
	}
	return ps
}

// IsExempt reports whether a category bypasses capping.
func (r Rules) IsExempt(category string) bool {
	return slices.Contains(r.ExemptCategories, category)
}

// MayOverride reports whether an intent of campaign and category may
// bypass the caps.
func (r Rules) MayOverride(campaign, category string) bool {
	return slices.Contains(r.Overrides.Campaigns, campaign) || slices.Contains(r.Overrides.Categories, category)
}
