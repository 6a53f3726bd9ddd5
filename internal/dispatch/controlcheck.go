package dispatch

// Campaign control on the decision path: what the state says of an intent
// becomes its decision before the engine sees it (decide.go), and a
// stopped campaign's plans book nothing.

import (
	"slices"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/control"
)

// HeaderControl names the control record that decided an intent
// (<topic>/<partition>/<offset>): a cancelled one, one waiting for a pause,
// one cancelled past its campaign's send-by.
const HeaderControl = "capper-control"

// DecisionCancelled is the capper-decision of a cancelled intent.
const DecisionCancelled = "cancelled"

// controlState is the control state in use (nil: none).
func (w *Worker) controlState() *control.Snapshot {
	if w.o.Control == nil {
		return nil
	}
	return w.o.Control.Load()
}

func (w *Worker) exempt(category string) bool { return w.o.Exempt != nil && w.o.Exempt(category) }

// controlReasons are the capping reasons of control's verdicts.
var controlReasons = map[string]capping.Reason{
	control.ReasonStopped: capping.ReasonStopped,
	control.ReasonExpired: capping.ReasonSendBy,
	control.ReasonPaused:  capping.ReasonPaused,
}

// controlDecision is the decision of a verdict that is not Go: cancelled,
// or deferred to be looked at again after the first tier's delay.
func (w *Worker) controlDecision(v control.Verdict, now time.Time) capping.Decision {
	d := capping.Decision{Outcome: capping.Cancelled, Reason: controlReasons[v.Reason], At: now}
	if v.Action == control.Wait {
		d.Outcome, d.NotBefore = capping.Deferred, now.Add(w.o.Tiers[0].Delay)
	}
	return d
}

// withoutStopped drops the bookings of stopped campaigns' plans: the slots
// they held go to others at once. The request's own slice is never
// changed (it is a window of the batch's).
func withoutStopped(s *control.Snapshot, planned []capping.Planned) []capping.Planned {
	if s.Count(control.Stopped) == 0 || !slices.ContainsFunc(planned, func(p capping.Planned) bool { return s.Stopped(p.Campaign) }) {
		return planned
	}
	return slices.DeleteFunc(slices.Clone(planned), func(p capping.Planned) bool { return s.Stopped(p.Campaign) })
}
