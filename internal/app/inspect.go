package app

// `capper inspect`: a user's segment and caps, read-only.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/control"
	"github.com/capper-dev/capper/internal/plans"
	"github.com/capper-dev/capper/internal/segments"
	"github.com/capper-dev/capper/internal/userlimits"
)

// Inspection is a user's segment and, for each limit of its policy, the
// current count and when the next slot frees, as of At.
type Inspection struct {
	User     uint64
	Segment  string
	Snapshot string // "" when none is loaded
	Plans    string // the plan set's version; "" without plans
	At       time.Time
	TimeZone *time.Location // the zone calendar limits were read in
	Limits   []capping.LimitState
	// Campaign is the campaign asked about (--campaign) and, with
	// kafka.topics.control, its control record (nil: none, active).
	Campaign   string
	Control    *control.Entry
	controlled bool // kafka.topics.control is set
	// UserLimits are the user's own limits when the policy reads them
	// (nil: it has no user_limits section); userRules are the policy's.
	UserLimits *capping.UserLimits
	userRules  *capping.UserRules
}

// InspectOptions say what to look at.
type InspectOptions struct {
	At       time.Time      // zero: now
	TimeZone *time.Location // the user's; nil: the policy's
	Campaign string         // per-campaign limits: only this campaign
}

// Inspect reads a user's segment and caps; it writes nothing to Redis. log
// receives the S3 client's and the engine's messages (nil discards them).
func Inspect(ctx context.Context, cfg *config.Config, userID uint64, o InspectOptions, log *slog.Logger) (*Inspection, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	st, err := OpenSegmentStore(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	pol, err := LoadPolicy(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	snap, err := segments.Load(ctx, st, segments.LoadOptions{})
	if err != nil {
		if cfg.Segments.Required {
			return nil, fmt.Errorf("load segment snapshot: %w", err)
		}
		snap = nil // as the worker would: everyone in no segment
	}
	rdb, err := NewRedisClient(cfg)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	engine, err := NewEngine(ctx, cfg, pol, rdb, prometheus.NewRegistry(), log, nil)
	if err != nil {
		return nil, err
	}
	if o.At.IsZero() {
		o.At = time.Now()
	}
	if o.TimeZone == nil {
		o.TimeZone = pol.Rules.TimeZone
	}
	segment := snap.Lookup(userID)
	opts := capping.InspectOptions{At: o.At, TimeZone: o.TimeZone, Campaign: o.Campaign}
	var ctl *control.Snapshot
	if cfg.Kafka.Topics.Control != "" {
		if ctl, err = controlState(ctx, cfg, log); err != nil {
			return nil, err
		}
	}
	var planSet string
	if cfg.Plans.Source != "" {
		set, err := inspectPlans(ctx, cfg, o.At, log)
		if err != nil {
			return nil, err
		}
		// As a worker books: a stopped campaign's plans book nothing.
		planned := set.For(nil, userID, 0, o.At)
		opts.Planned = slices.DeleteFunc(planned, func(p capping.Planned) bool { return ctl.Stopped(p.Campaign) })
		planSet = set.Version()
	}
	states, err := engine.Inspect(ctx, userID, segment, opts)
	if err != nil {
		return nil, fmt.Errorf("inspect user %d: %w", userID, err)
	}
	in := &Inspection{User: userID, Segment: segment, Snapshot: snap.Version(), Plans: planSet, At: o.At, TimeZone: o.TimeZone, Limits: states,
		Campaign: o.Campaign, Control: ctl.Campaign(o.Campaign), controlled: ctl != nil}
	if u := pol.Rules.Users; u != nil {
		ul, err := engine.UserLimits(ctx, userID)
		if err != nil {
			return nil, fmt.Errorf("inspect user %d: %w", userID, err)
		}
		in.UserLimits, in.userRules = &ul, u
	}
	return in, nil
}

// campaignLine is the campaign's control state, in words.
func (in *Inspection) campaignLine() string {
	switch {
	case in.Campaign == "" || !in.controlled:
		return ""
	case in.Control == nil:
		return "active (no control record)"
	}
	e := in.Control
	s := fmt.Sprintf("%s since %s by %s: %s (%s)", e.State, e.Since.Format(time.RFC3339), orDash(e.By), orDash(e.Reason), e.Pos)
	if !e.SendBy.IsZero() {
		s += ", send by " + e.SendBy.Format(time.RFC3339)
	}
	return s
}

// inspectPlans loads the plans in force at at, as a worker would.
func inspectPlans(ctx context.Context, cfg *config.Config, at time.Time, log *slog.Logger) (*plans.Set, error) {
	st, err := openPlanStore(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	set, err := plans.Load(ctx, st, "", nil, at)
	if err != nil {
		return nil, fmt.Errorf("load campaign plans from %s: %w", cfg.Plans.Source, err)
	}
	return set, nil
}

// window is a limit's window in words: "24h rolling", "calendar day".
func window(l capping.Limit) string {
	if l.Calendar != capping.None {
		return "calendar " + l.Calendar.String()
	}
	return config.Duration(l.Window).String() + " rolling"
}

// scope is what a row counts: the limit's scope, and its campaign.
func scope(s capping.LimitState) string {
	if s.Campaign != "" {
		return s.Scope + " (campaign " + s.Campaign + ")"
	}
	return s.Scope
}

// WriteTable prints the inspection for a human; local times are in the
// user's time zone.
func (in *Inspection) WriteTable(w io.Writer) error {
	version := in.Snapshot
	if version == "" {
		version = "none loaded"
	}
	local := func(t time.Time) string { return t.In(in.TimeZone).Format("2006-01-02 15:04:05 MST") }
	fmt.Fprintf(w, "user      %d\nsegment   %s (snapshot %s)\n", in.User, in.Segment, version)
	if in.Plans != "" {
		fmt.Fprintf(w, "plans     set %s\n", in.Plans)
	}
	if c := in.campaignLine(); c != "" {
		fmt.Fprintf(w, "campaign  %s: %s\n", in.Campaign, c)
	}
	if in.UserLimits != nil {
		fmt.Fprintf(w, "own       %s\n", strings.Join(in.UserLimits.Describe(in.userRules), "; "))
	}
	fmt.Fprintf(w, "at        %s (%s)\n\n", local(in.At), in.TimeZone)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT\tSCOPE\tWINDOW\tFROM\tTO\tCOUNT\tMAX\tRESERVED\tBOOKED\tNEXT SLOT FREE")
	for _, s := range in.Limits {
		next := "now"
		switch {
		case s.Limit.Max == 0:
			next = "never (max 0)"
		case s.NextFree.After(in.At):
			next = fmt.Sprintf("%s (in %s)", local(s.NextFree), s.NextFree.Sub(in.At).Round(time.Second))
		}
		reserved := "-"
		if s.Reserved > 0 {
			reserved = fmt.Sprintf("%d for %s+", s.Reserved, s.Limit.Reserve.Below)
		}
		count := strconv.Itoa(s.Count)
		if s.Trimmed {
			count += " (trimmed)"
		}
		booked := "-"
		if len(s.Booked) > 0 {
			var b []string
			for _, p := range s.Booked {
				b = append(b, fmt.Sprintf("%s (%s, %s)", p.Campaign, p.Priority, p.Starts.In(in.TimeZone).Format("Mon 15:04")))
			}
			booked = fmt.Sprintf("%d: %s", len(s.Booked), strings.Join(b, ", "))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.Limit.Name, scope(s), window(s.Limit),
			local(s.From), local(s.To), count, s.Limit.Max, reserved, booked, next)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("print inspection: %w", err)
	}
	return nil
}

// inspectionJSON is the JSON form of an Inspection (`capper inspect -o
// json`). Times are RFC 3339 with milliseconds in the user's time zone.
type inspectionJSON struct {
	User     uint64  `json:"user"`
	Segment  string  `json:"segment"`
	Snapshot *string `json:"snapshot"` // null: none loaded
	Plans    *string `json:"plans"`    // the plan set; null: no plans.source
	// Campaign: the campaign asked about and its control state (null: no
	// --campaign, or no kafka.topics.control).
	Campaign *campaignStateJSON `json:"campaign"`
	At       string             `json:"at"`
	TimeZone string             `json:"time_zone"`
	Limits   []limitJSON        `json:"limits"`
	// UserLimits: the user's own limits as the user-limits topic's record
	// writes them (null: the policy has no user_limits section).
	UserLimits json.RawMessage `json:"user_limits"`
}

// campaignStateJSON is a campaign's control state in `capper inspect -o json`.
type campaignStateJSON struct {
	Campaign string `json:"campaign"`
	State    string `json:"state"`
	Since    string `json:"since,omitempty"`
	SendBy   string `json:"send_by,omitempty"`
	By       string `json:"by,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Record   string `json:"record,omitempty"`
}

type limitJSON struct {
	Name     string  `json:"name"`
	Scope    string  `json:"scope"`    // what it counts, in words
	Campaign *string `json:"campaign"` // per-campaign limits: the campaign (name asked for, or hash)
	Window   *string `json:"window"`   // rolling: as the config writes it ("30m", "1d", "7d"); null for a calendar limit
	Calendar *string `json:"calendar"` // day, week, month; null for a rolling limit
	From     string  `json:"from"`     // the window's or period's start
	To       string  `json:"to"`       // its end (the time asked about for a rolling window)
	Count    int     `json:"count"`
	Max      int     `json:"max"`
	Reserved int     `json:"reserved"`     // slots kept for reserved_for and up
	For      *string `json:"reserved_for"` // the lowest priority that may use them; null without
	NextFree *string `json:"next_free"`    // null: never (max 0); At when a slot is free now
	Trimmed  bool    `json:"trimmed"`      // refunds take nothing from this log for now
	// Booked: the plans holding a slot in it against intents of a lower
	// priority.
	Booked []bookedJSON `json:"booked"`
}

type bookedJSON struct {
	Campaign string `json:"campaign"`
	Priority string `json:"priority"`
	Starts   string `json:"starts"`
	Ends     string `json:"ends"`
}

// rfc3339ms is the format of every time in the JSON form.
const rfc3339ms = "2006-01-02T15:04:05.000Z07:00"

// WriteJSON prints the inspection as one JSON document.
func (in *Inspection) WriteJSON(w io.Writer) error {
	f := func(t time.Time) string { return t.In(in.TimeZone).Format(rfc3339ms) }
	out := inspectionJSON{User: in.User, Segment: in.Segment, At: f(in.At), TimeZone: in.TimeZone.String(), Limits: []limitJSON{}}
	if in.Snapshot != "" {
		out.Snapshot = &in.Snapshot
	}
	if in.Plans != "" {
		out.Plans = &in.Plans
	}
	if in.Campaign != "" && in.controlled {
		c := &campaignStateJSON{Campaign: in.Campaign, State: control.Active.String()}
		if e := in.Control; e != nil {
			c.State, c.Since, c.By, c.Reason, c.Record = e.State.String(), f(e.Since), e.By, e.Reason, e.Pos.String()
			if !e.SendBy.IsZero() {
				c.SendBy = f(e.SendBy)
			}
		}
		out.Campaign = c
	}
	out.UserLimits = json.RawMessage("null")
	if in.UserLimits != nil {
		v, err := userlimits.Encode(userlimits.Record{UserID: in.User, Limits: *in.UserLimits})
		if err != nil {
			return fmt.Errorf("print inspection: %w", err)
		}
		out.UserLimits = v
	}
	str := func(s string) *string { return &s }
	for _, s := range in.Limits {
		l := limitJSON{Name: s.Limit.Name, Scope: s.Scope, From: f(s.From), To: f(s.To), Count: s.Count, Max: s.Limit.Max, Reserved: s.Reserved,
			Trimmed: s.Trimmed, Booked: []bookedJSON{}}
		for _, p := range s.Booked {
			l.Booked = append(l.Booked, bookedJSON{Campaign: p.Campaign, Priority: p.Priority.String(), Starts: f(p.Starts), Ends: f(p.Ends)})
		}
		if s.Campaign != "" {
			l.Campaign = str(s.Campaign)
		}
		if s.Limit.Calendar != capping.None {
			l.Calendar = str(s.Limit.Calendar.String())
		} else {
			l.Window = str(config.Duration(s.Limit.Window).String())
		}
		if s.Reserved > 0 {
			l.For = str(s.Limit.Reserve.Below.String())
		}
		if s.Limit.Max > 0 && !s.NextFree.IsZero() {
			next := s.NextFree
			if next.Before(in.At) {
				next = in.At
			}
			l.NextFree = str(f(next))
		}
		out.Limits = append(out.Limits, l)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("print inspection: %w", err)
	}
	return nil
}
