package capping

// Every verdict, in the one order they are taken. Before Redis: a request
// is checked (an invalid one is dead-lettered), then campaign control and
// send-by (control.go), quiet hours (defer.go), an exempt category and
// overrides; the first that answers decides, and nothing it answers is
// counted. The rest go to the caps: the script (or its Go port), which
// counts the campaign plans' bookings (plans.go) with the sends, and, with
// the policy's user_limits, first takes the user's own verdicts (users.go:
// a snooze, their quiet hours; nothing counted) and checks their tier's and
// channel's limits after the segment's (the Go port knows no user's
// limits). After it,
// a capped intent whose limit defers waits for its slot (defer.go), and a
// deferral past the send-by is cancelled (control.go).
//
// A user's order holds for every answer, whatever gave it (assemble.go,
// finish): a decision that comes after one of the user's requests that
// Redis could not answer is taken back, and waits for it.
//
// The reasons a verdict gives (capper-reason) are below: each name is the
// header's value, the metrics' reason label and the docs' word; nothing
// translates it. Their table also says what shadow mode does with each
// (Shadowed): it tries the policy, so only the policy's verdicts are
// marked and delivered; an operator's order and a user's own wish are
// taken as when enforcing. CONTRIBUTING.md ("Adding a verdict") lists what
// a new verdict touches.

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/capper-dev/capper/internal/control"
)

// check takes the verdicts before Redis. It returns the decision when
// Redis is not asked; bypass reports an honoured bypass that is counted
// (recorded without checking); sendBy is the campaign's record whose
// send-by is the request's deadline (nil: its own), for after.
func (ps *policySet) check(r *Request) (d *Decision, sendBy *control.Entry, bypass bool, err error) {
	if err := ps.validate(r); err != nil {
		return nil, nil, false, err
	}
	exempt := ps.rules.IsExempt(r.Category)
	v := controlVerdict(r, exempt)
	if v.outcome != Allowed {
		return v.decision(r), nil, false, nil
	}
	// Quiet hours hold back overrides too: they bypass caps, not the
	// night.
	if d := ps.quiet(r, exempt); d != nil {
		return d, v.by, false, nil
	}
	if exempt {
		return &Decision{Outcome: Exempt, At: r.At}, v.by, false, nil
	}
	d, bypass = ps.override(r)
	return d, v.by, bypass, nil
}

// after turns the caps' answer (or a verdict's) into the final decision;
// sendBy is check's.
func (ps *policySet) after(r *Request, d *Decision, sendBy *control.Entry) {
	ps.deferral(r, d)
	sendByAfter(r, d, sendBy)
}

// validate refuses a request no retry can decide (dead-lettered).
func (ps *policySet) validate(r *Request) error {
	rules := &ps.rules
	switch {
	case len(r.IntentID) == 0 || len(r.IntentID) > MaxIntentID:
		return invalidRequest("id", "intent id of %d bytes (want 1-%d)", len(r.IntentID), MaxIntentID)
	case !slices.Contains(rules.Channels, r.Channel):
		return invalidRequest("channel", "unknown channel %q: not one of the policy's (%s)", r.Channel, strings.Join(rules.Channels, ", "))
	case !slices.Contains(rules.Categories, r.Category):
		return invalidRequest("category", "unknown category %q: not one of the policy's (%s)", r.Category, strings.Join(rules.Categories, ", "))
	case len(r.Tags) > MaxTags:
		return invalidRequest("tags", "%d tags (at most %d)", len(r.Tags), MaxTags)
	case r.Priority > MaxPriority:
		return invalidRequest("priority", "priority %d", r.Priority)
	case r.At.IsZero() || r.At.Unix() <= 0 || r.At.Unix() > math.MaxUint32:
		return invalidRequest("created_at", "no decision time")
	}
	return nil
}

// override is the verdict of an intent's override: an honoured
// uncounted bypass is answered (exempt), an honoured bypass goes to the
// script recorded without checking, a refused one is decided normally
// (Decide marks it refused).
func (ps *policySet) override(r *Request) (d *Decision, bypass bool) {
	switch {
	case r.Override == NoOverride, !ps.rules.MayOverride(r.Campaign, r.Category):
		return nil, false
	case r.Override == BypassUncounted:
		return &Decision{Outcome: Exempt, At: r.At, Override: BypassUncounted}, false
	}
	return nil, true
}

// Reason says why a verdict held an intent back.
type Reason uint8

// Reasons, each named as on the wire (String).
const (
	NoReason Reason = iota
	// ReasonCap ("cap"), Deferred: a limit with on_cap: defer is full.
	ReasonCap
	// ReasonQuietHours ("quiet-hours"), Deferred: the user's quiet hours.
	ReasonQuietHours
	// ReasonDeferExpired ("defer-expired"), Capped: it would wait past
	// max_defer since it was first deferred.
	ReasonDeferExpired
	// ReasonPaused ("paused"), Deferred: its campaign (or every intent) is
	// paused.
	ReasonPaused
	// ReasonCampaignStopped ("campaign-stopped"), Cancelled: its campaign
	// is stopped.
	ReasonCampaignStopped
	// ReasonExpired ("expired"), Cancelled: past its send-by (its own or
	// its campaign's), or past it by the time its budget's lane could
	// release it, or paused for longer than control.max_pause.
	ReasonExpired
	// ReasonSnoozed ("snoozed"), Deferred: the user snoozed it; it waits
	// for the snooze's end.
	ReasonSnoozed
	// ReasonSnoozeTooLong ("snooze-too-long"), Cancelled: the user's
	// snooze ends later than user_limits.max_defer allows it to wait.
	ReasonSnoozeTooLong
	// ReasonUserQuietHours ("user-quiet-hours"), Deferred: the user's own
	// quiet hours.
	ReasonUserQuietHours
)

// shadow is what shadow mode (worker.enforce: false) does with a verdict
// that holds an intent back.
type shadow uint8

const (
	// enforce: as when enforcing (an operator's order, the sender's
	// send-by, the user's own wish).
	enforce shadow = iota
	// mark: the policy's verdict: delivered, marked shadow-capped, not
	// recorded.
	mark
	// byLimit: as the limit that capped: marked for the policy's,
	// enforced for the user's own (Decision.UserLimit).
	byLimit
	// asReplaced: as the deferral it replaced (Decision.Replaced), enforced
	// when it replaced none.
	asReplaced
)

// reasons are the names, the outcome each reason comes with, and what
// shadow mode does with it (NoReason's: a cap that suppresses).
var reasons = [...]struct {
	name    string
	outcome Outcome
	shadow  shadow
}{
	NoReason:              {"", Allowed, byLimit},
	ReasonCap:             {"cap", Deferred, byLimit},
	ReasonQuietHours:      {"quiet-hours", Deferred, mark},
	ReasonDeferExpired:    {"defer-expired", Capped, byLimit},
	ReasonPaused:          {"paused", Deferred, enforce},
	ReasonCampaignStopped: {"campaign-stopped", Cancelled, enforce},
	ReasonExpired:         {"expired", Cancelled, asReplaced},
	ReasonSnoozed:         {"snoozed", Deferred, enforce},
	ReasonSnoozeTooLong:   {"snooze-too-long", Cancelled, enforce},
	ReasonUserQuietHours:  {"user-quiet-hours", Deferred, enforce},
}

// Shadowed reports whether shadow mode delivers d marked shadow-capped
// (not recorded) rather than as decided: d holds the intent back
// (capped, deferred or cancelled) by a verdict of the policy (its caps, its
// quiet hours), not an operator's (campaign control, the send-by) or the
// user's own (a snooze, their quiet hours, their tier, a channel they
// turned down).
func (d *Decision) Shadowed() bool {
	if d.Outcome != Capped && d.Outcome != Deferred && d.Outcome != Cancelled {
		return false
	}
	r := d.Reason
	if int(r) < len(reasons) && reasons[r].shadow == asReplaced {
		r = d.Replaced
		if r == NoReason {
			return false // past the send-by before any deferral
		}
	}
	if int(r) >= len(reasons) {
		return false
	}
	switch reasons[r].shadow {
	case mark:
		return true
	case byLimit:
		return !d.UserLimit
	}
	return false
}

func (r Reason) String() string {
	if int(r) < len(reasons) {
		return reasons[r].name
	}
	return fmt.Sprintf("reason(%d)", r)
}

// Reasons lists the reasons an outcome comes with (Deferred: cap,
// quiet-hours, paused; Cancelled: campaign-stopped, expired; Capped:
// defer-expired), in order: e.g. to initialise metric labels.
func Reasons(o Outcome) []Reason {
	var out []Reason
	for r := range reasons {
		if r != int(NoReason) && reasons[r].outcome == o {
			out = append(out, Reason(r))
		}
	}
	return out
}

// ParseReason reads a reason's name ("" is NoReason).
func ParseReason(s string) (Reason, error) {
	for r := range reasons {
		if reasons[r].name == s {
			return Reason(r), nil
		}
	}
	return 0, fmt.Errorf("%q is not a reason", s)
}
