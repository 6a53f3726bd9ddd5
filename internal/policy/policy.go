// Package policy owns the cap policy as users write it: the YAML document
// (channels, categories, time zone, the limits of each segment and the
// default policy, the provider budgets), its defaults, strict decoding, and
// its conversion into the engine's capping.Rules and the worker's
// pacing.Set with every problem reported at once, each at the path of its
// field in the document. The worker config embeds the
// document under capping:; a policy can also be a document of its own
// (Parse).
package policy

import (
	"fmt"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/problems"
	"github.com/capper-dev/capper/internal/yamldoc"
)

// Duration is a window as written in the document: 30m, 24h, 7d.
type Duration = yamldoc.Duration

// Document is a cap policy. Every key is optional: Default fills the keys a
// document leaves out.
type Document struct {
	// Channels and Categories are the values an intent may name; anything
	// else is refused, so that a typo is not silently capped or not.
	Channels   []string `yaml:"channels"`
	Categories []string `yaml:"categories"`
	// DefaultCategory is the category of an intent that names none.
	DefaultCategory string `yaml:"default_category"`
	// ExemptCategories bypass capping and are not counted.
	ExemptCategories []string `yaml:"exempt_categories"`
	// Overrides lists who may ask to bypass the caps.
	Overrides Overrides `yaml:"overrides"`
	// TimeZone (an IANA name) places the calendar periods of users whose
	// intent names no time zone.
	TimeZone string `yaml:"time_zone"`
	// WeekStart is the first day of a calendar week: monday ... sunday.
	WeekStart string `yaml:"week_start"`
	// Segments are the policies of segments, in priority order
	// (segment-builder --on-conflict=priority keeps the earlier segment).
	Segments []Segment `yaml:"segments"`
	// DefaultPolicy caps users in no segment or in a segment without a
	// policy.
	DefaultPolicy Policy `yaml:"default_policy"`
	// Budgets pace sends to providers (budgets.go); none by default. An
	// intent is paced by the first budget that covers it.
	Budgets []Budget `yaml:"budgets,omitempty"`
	// UserLimits lets users set their own limits (users.go); nil: the
	// workers do not read users' limits.
	UserLimits *UserLimits `yaml:"user_limits,omitempty"`
}

// Overrides lists the campaigns and categories whose intents may ask to
// bypass the caps.
type Overrides struct {
	Campaigns  []string `yaml:"campaigns"`
	Categories []string `yaml:"categories"`
}

// Segment is the policy of one segment.
type Segment struct {
	Name    string  `yaml:"name"`
	Limits  []Limit `yaml:"limits"`
	Holding `yaml:",inline"`
}

// Policy is a list of limits that must all pass.
type Policy struct {
	Limits  []Limit `yaml:"limits"`
	Holding `yaml:",inline"`
}

// Holding is what a policy holds back instead of dropping: on_cap and
// max_defer are the defaults of its limits, quiet_hours its nights.
type Holding struct {
	OnCap      string      `yaml:"on_cap,omitempty"`
	MaxDefer   Duration    `yaml:"max_defer,omitempty"`
	QuietHours *QuietHours `yaml:"quiet_hours,omitempty"`
}

// QuietHours hold a policy's intents back from From to To (HH:MM, the
// user's time zone; To before From spans midnight), releasing them at To
// plus up to Jitter (default DefaultJitter).
type QuietHours struct {
	From          string   `yaml:"from"`
	To            string   `yaml:"to"`
	Channels      []string `yaml:"channels,omitempty"` // empty: every channel
	Jitter        Duration `yaml:"jitter,omitempty"`   // 0: DefaultJitter
	IncludeExempt bool     `yaml:"include_exempt,omitempty"`
}

// Defaults of deferral: the longest a deferred intent waits when on_cap:
// defer names no max_defer, and how far quiet hours spread their release.
const (
	DefaultMaxDefer = Duration(24 * time.Hour)
	DefaultJitter   = Duration(10 * time.Minute)
)

// Limit is one cap: at most Max intents that match Where in any rolling
// Window, or per Calendar period (day, week, month) in the user's time
// zone; per user or per campaign.
type Limit struct {
	Name string `yaml:"name"`
	// Window is a rolling window; 0 (left out) with a Calendar.
	Window   Duration `yaml:"window,omitempty"`
	Calendar string   `yaml:"calendar,omitempty"`
	// Max is a pointer so that a forgotten max is an error, not "never".
	Max *int `yaml:"max"`
	// Where selects the intents the limit applies to and the sends it
	// counts; empty, every intent.
	Where capping.Where `yaml:"where,omitempty"`
	Per   string        `yaml:"per,omitempty"` // user (default) or campaign
	// Reserve is a pointer so that a reserve block without slots is an
	// error, not no reserve.
	Reserve *Reserve `yaml:"reserve,omitempty"`
	// OnCap is suppress or defer (default: the policy's on_cap, else
	// suppress); MaxDefer bounds a deferral (default: the policy's, else
	// DefaultMaxDefer).
	OnCap    string   `yaml:"on_cap,omitempty"`
	MaxDefer Duration `yaml:"max_defer,omitempty"`
	// Channel is the shorthand of policies before where existed:
	// channel: sms is where: {channels: [sms]}.
	Channel string `yaml:"channel,omitempty"`
}

// Reserve keeps Slots of a limit's max for intents of priority Below or
// higher: the others may use only max - slots.
type Reserve struct {
	Slots int    `yaml:"slots"`
	Below string `yaml:"below,omitempty"` // low, normal, high (default) or 1-100
}

// DefaultBelow is the priority a reserve keeps its slots for when it names
// none: reserved slots are for what matters most.
const DefaultBelow = "high"

// Default returns the policy used for every key a document leaves out.
func Default() Document {
	return Document{
		Channels:         []string{"email", "push", "sms", "inapp"},
		Categories:       []string{"marketing", "transactional"},
		DefaultCategory:  "marketing",
		ExemptCategories: []string{"transactional"},
		TimeZone:         "UTC",
		WeekStart:        "monday",
		DefaultPolicy: Policy{Limits: []Limit{
			{Name: "daily", Window: Duration(24 * time.Hour), Max: intp(1)},
			{Name: "weekly", Window: Duration(7 * 24 * time.Hour), Max: intp(3)},
		}},
	}
}

func intp(v int) *int { return &v }

// Parse reads a policy document strictly over Default: an unknown key or
// a value of the wrong kind is a problem at its field's path and line
// (problems.From finds them in the error). It does not check the policy;
// Rules does.
func Parse(data []byte) (*Document, error) {
	d := Default()
	if err := yamldoc.Decode(data, &d); err != nil {
		return nil, fmt.Errorf("read policy: %w", err)
	}
	return &d, nil
}

// Read parses a policy document and checks it: every problem, a key or a
// value that does not decode included, at its field's path and line (the
// document is nil then). The error is what is no field's problem: YAML
// that does not parse, a second document.
func Read(data []byte) (*Document, problems.List, error) {
	d, err := Parse(data)
	if ps := problems.From(err); len(ps) > 0 {
		return nil, ps, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return d, yamldoc.Locate(data, d.Problems()), nil
}

// SegmentNames returns the segments that have a policy, in priority order.
func (d *Document) SegmentNames() []string {
	names := make([]string, 0, len(d.Segments))
	for _, s := range d.Segments {
		names = append(names, s.Name)
	}
	return names
}
