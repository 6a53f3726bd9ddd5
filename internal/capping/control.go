package capping

// Verdict: campaign control and send-by. A request carries the control
// state it is decided by (Request.Control) and its own send-by
// (Request.SendBy); this file says what they decide: a stopped campaign's
// intent is cancelled, a paused one waits, and nothing goes out after its
// send-by (the earlier of its own and its campaign's). None of these is
// counted. A stopped campaign's plans book nothing (plans.go).

import (
	"time"

	"github.com/capper-dev/capper/internal/control"
)

// Campaigns is the campaign control state a request is decided by: the
// state the worker follows, and what it does with a pause. A batch's
// requests share one.
type Campaigns struct {
	// State is the control topic's state (nil: every campaign active).
	State *control.Snapshot
	// MaxPause: a pause that began longer ago than this cancels its
	// campaign's intents (expired) instead of holding them.
	MaxPause time.Duration
	// Recheck: a paused intent is decided again this long after (the
	// first delay tier's delay).
	Recheck time.Duration
}

// sendBy is r's deadline (zero: none): the earlier of its own send-by and
// that of its campaign's record e (nil: none); by is e when that is the
// deadline.
func (r *Request) sendBy(e *control.Entry) (deadline time.Time, by *control.Entry) {
	if e != nil && !e.SendBy.IsZero() && (r.SendBy.IsZero() || e.SendBy.Before(r.SendBy)) {
		return e.SendBy, e
	}
	return r.SendBy, nil
}

// campaign is the latest record of r's campaign (nil: none).
func (r *Request) campaign() *control.Entry {
	if r.Control == nil {
		return nil
	}
	return r.Control.State.Campaign(r.Campaign)
}

// stopped reports whether campaign is stopped (its plans book nothing).
func (c *Campaigns) stopped(campaign string) bool {
	return c != nil && c.State.Stopped(campaign)
}

// controlVerdict answers a request that may not go now: past its send-by,
// or past it by the time its budget could release it (cancelled, expired), of a stopped campaign (cancelled,
// campaign-stopped), of a paused campaign or while every intent is paused
// (deferred for Recheck, paused; exempt categories are not held by the
// incident switch, their campaign's own state applies all the same), or
// paused for longer than MaxPause (cancelled, expired). Its outcome is
// Allowed when it may go.
func controlVerdict(r *Request, exempt bool) controlAnswer {
	e := r.campaign()
	deadline, by := r.sendBy(e)
	if !deadline.IsZero() && (r.At.After(deadline) || r.ReleaseAt.After(deadline)) {
		return controlAnswer{Cancelled, ReasonExpired, by}
	}
	if e != nil && e.State == control.Stopped {
		return controlAnswer{Cancelled, ReasonCampaignStopped, e}
	}
	p := e
	if p == nil || p.State != control.Paused {
		p = nil
		if a := r.Control.all(); a != nil && a.State == control.Paused && !exempt {
			p = a
		}
	}
	switch {
	case p == nil:
		return controlAnswer{by: by} // it may go, by its campaign's send-by if by is set
	case r.At.Sub(p.Since) > r.Control.MaxPause:
		return controlAnswer{Cancelled, ReasonExpired, p}
	}
	return controlAnswer{Deferred, ReasonPaused, p}
}

// controlAnswer is a control verdict: Allowed (it may go; by is its
// campaign's record when that record's send-by is its deadline), or the
// outcome, why, and the record that decided (nil: its own send-by).
type controlAnswer struct {
	outcome Outcome
	reason  Reason
	by      *control.Entry
}

// decision is the answer's Decision for r.
func (v controlAnswer) decision(r *Request) *Decision {
	d := &Decision{Outcome: v.outcome, Reason: v.reason, At: r.At}
	if v.by != nil {
		d.Control = &v.by.Pos
	}
	if v.outcome == Deferred {
		d.NotBefore = r.At.Add(r.Control.Recheck)
	}
	return d
}

// all is the incident switch's latest record (nil: none).
func (c *Campaigns) all() *control.Entry {
	if c == nil {
		return nil
	}
	return c.State.All()
}

// sendByAfter applies the send-by to what the other verdicts answered
// (by: the campaign's record whose send-by is the deadline, as the control
// verdict found it; nil: the request's own): a deferral whose time comes
// after the deadline would never be delivered in time, so it is cancelled
// (expired) now. A decision names the campaign's record when its send-by
// is the deadline.
func sendByAfter(r *Request, d *Decision, by *control.Entry) {
	if d.Err != nil || d.Reason == ReasonPaused || d.Control != nil {
		return // a control verdict's, complete
	}
	deadline := r.SendBy
	if by != nil {
		deadline, d.Control = by.SendBy, &by.Pos
	}
	if d.Outcome == Deferred && !deadline.IsZero() && d.NotBefore.After(deadline) {
		*d = Decision{Outcome: Cancelled, Reason: ReasonExpired, At: d.At, Replaced: d.Reason,
			Limit: d.Limit, UserLimit: d.UserLimit, HeldFor: d.HeldFor, Policy: d.Policy, Control: d.Control}
	}
}

// Gate is what campaign control and send-by say of an intent before it is
// decided: whether it may go now, else the outcome and reason its decision
// will have, and for a pause until when the pause can hold it. The readers
// that hold intents (a budget's lane, the parked topic) ask it, so that the
// one order of verdicts (controlVerdict) is also theirs.
type Gate struct {
	Go          bool
	Outcome     Outcome
	Reason      Reason
	PausedUntil time.Time // ReasonPaused: the pause's start plus MaxPause
}

// Gate answers for an intent of campaign, with its own send-by sendBy
// (zero: none), at now; c nil: no control (its own send-by still holds).
// The incident switch holds it as it holds any intent that is not exempt
// (a held or parked intent is not: exempt ones are never held).
func (c *Campaigns) Gate(campaign string, sendBy, now time.Time) Gate {
	r := Request{Campaign: campaign, SendBy: sendBy, At: now, Control: c}
	v := controlVerdict(&r, false)
	g := Gate{Go: v.outcome == Allowed, Outcome: v.outcome, Reason: v.reason}
	if v.reason == ReasonPaused && v.by != nil && c != nil {
		g.PausedUntil = v.by.Since.Add(c.MaxPause)
	}
	return g
}

// Deadline is the send-by an intent of campaign with its own sendBy is
// held to: the earlier of the two (zero: none).
func (c *Campaigns) Deadline(campaign string, sendBy time.Time) time.Time {
	r := Request{Campaign: campaign, SendBy: sendBy, Control: c}
	d, _ := r.sendBy(r.campaign())
	return d
}
