package control

// The control state a worker decides by (capping's control.go takes an
// intent's verdict from it).

import "fmt"

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
	// released: per partition, the offset after the latest record in the
	// state that is not a pause (a resume, a stop, an active record).
	released map[int]int64
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
	s := &Snapshot{campaigns: campaigns, all: all, released: map[int]int64{}}
	note := func(e *Entry) {
		if e.State != Paused {
			s.released[e.Pos.Partition] = max(s.released[e.Pos.Partition], e.Pos.Offset+1)
		}
	}
	for _, e := range campaigns {
		s.counts[e.State]++
		note(e)
	}
	if all != nil {
		note(all)
	}
	return s
}

// Released says, per partition of the control topic, the offset after the
// latest record in the state that is not a pause. A resume (or a stop) the
// state applied after another state was taken shows as a higher value in
// its partition: ReleasedSince tells. A pause changes nothing here.
func (s *Snapshot) Released() map[int]int64 {
	if s == nil {
		return nil
	}
	return s.released
}

// ReleasedSince reports whether s applied a resume, a stop or an active
// record after the state whose Released was before.
func (s *Snapshot) ReleasedSince(before map[int]int64) bool {
	for p, o := range s.Released() {
		if o > before[p] {
			return true
		}
	}
	return false
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
