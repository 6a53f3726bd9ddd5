package control

// The control state a worker decides by, and the verdict for one intent.

import (
	"fmt"
	"time"
)

// Position names a record of the control topic (topic/partition/offset):
// what a cancelled intent's capper-control header says.
type Position struct {
	Topic     string
	Partition int
	Offset    int64
}

func (p Position) String() string { return fmt.Sprintf("%s/%d/%d", p.Topic, p.Partition, p.Offset) }

// Entry is the latest record of a key, and where it is.
type Entry struct {
	Record
	Pos Position
}

// Snapshot is the control state at one point; it never changes (the
// follower publishes a new one). A nil *Snapshot is the empty state.
type Snapshot struct {
	campaigns map[string]*Entry
	all       *Entry // the incident switch's latest record; nil: none
	counts    [Stopped + 1]int
}

// NewSnapshot is a state of the given campaigns' records and the switch's
// (nil: none), as a follower would build it from the topic: for callers
// that decide by a state they set themselves (tests, tools).
func NewSnapshot(campaigns []*Entry, all *Entry) *Snapshot {
	m := make(map[string]*Entry, len(campaigns))
	for _, e := range campaigns {
		m[e.Campaign] = e
	}
	return newSnapshot(m, all)
}

func newSnapshot(campaigns map[string]*Entry, all *Entry) *Snapshot {
	s := &Snapshot{campaigns: campaigns, all: all}
	for _, e := range campaigns {
		s.counts[e.State]++
	}
	return s
}

// Campaign is a campaign's latest record; nil when it has none (active).
func (s *Snapshot) Campaign(id string) *Entry {
	if s == nil || len(s.campaigns) == 0 {
		return nil
	}
	return s.campaigns[id]
}

// All is the incident switch's latest record; nil when it has none.
func (s *Snapshot) All() *Entry {
	if s == nil {
		return nil
	}
	return s.all
}

// Campaigns lists every campaign's latest record, in no order.
func (s *Snapshot) Campaigns() []*Entry {
	if s == nil {
		return nil
	}
	out := make([]*Entry, 0, len(s.campaigns))
	for _, e := range s.campaigns {
		out = append(out, e)
	}
	return out
}

// Count is how many campaigns are in state st.
func (s *Snapshot) Count(st State) int {
	if s == nil {
		return 0
	}
	return s.counts[st]
}

// Stopped reports whether campaign is stopped: its plans book nothing.
func (s *Snapshot) Stopped(campaign string) bool {
	e := s.Campaign(campaign)
	return e != nil && e.State == Stopped
}

// Action is what an intent may do now.
type Action uint8

const (
	// Go: decided as usual (the engine checks the caps).
	Go Action = iota
	// Wait: its campaign is paused (or every intent is): it waits in the
	// delay tiers, uncounted.
	Wait
	// Cancel: never delivered, never counted (Verdict.Reason says why).
	Cancel
)

// Reasons of a verdict (capper-reason).
const (
	ReasonStopped = "campaign-stopped"
	ReasonExpired = "expired" // past its send-by, or paused for longer than control.max_pause
	ReasonPaused  = "paused"
)

// Verdict is what control says of one intent.
type Verdict struct {
	Action Action
	Reason string // Wait, Cancel
	// By is the record that decided (nil: the intent's own send-by, or
	// Go). For Go, it is the campaign's record when its send-by is the
	// deadline.
	By *Entry
	// SendBy is the intent's deadline (the earlier of its own and its
	// campaign's; zero: none): a deferral past it cancels instead.
	SendBy time.Time
}

// Check is the verdict for an intent of campaign at now. exempt: of an
// exempt category (the incident switch does not pause it; its campaign's
// state applies all the same). sendBy is the intent's own (zero: none).
// A pause that began more than maxPause ago cancels.
func (s *Snapshot) Check(campaign string, exempt bool, sendBy, now time.Time, maxPause time.Duration) Verdict {
	e := s.Campaign(campaign)
	v := Verdict{SendBy: sendBy}
	if e != nil && !e.SendBy.IsZero() && (v.SendBy.IsZero() || e.SendBy.Before(v.SendBy)) {
		v.SendBy, v.By = e.SendBy, e
	}
	if !v.SendBy.IsZero() && now.After(v.SendBy) {
		v.Action, v.Reason = Cancel, ReasonExpired
		return v
	}
	if e != nil && e.State == Stopped {
		v.Action, v.Reason, v.By = Cancel, ReasonStopped, e
		return v
	}
	p := e
	if p == nil || p.State != Paused {
		p = nil
		if a := s.All(); a != nil && a.State == Paused && !exempt {
			p = a
		}
	}
	if p != nil {
		v.Action, v.Reason, v.By = Wait, ReasonPaused, p
		if now.Sub(p.Since) > maxPause {
			v.Action, v.Reason = Cancel, ReasonExpired
		}
	}
	return v
}
