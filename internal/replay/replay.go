// Package replay owns `capper replay`: past send-intents (a saved
// intents.jsonl[.gz] or a time range of the input topic) decoded and
// resolved like the worker does, decided at their original times by a
// candidate policy and optionally a baseline one, each in process memory
// (capping.Memory), with no Redis and no writes anywhere; and the report of
// what each policy would have done, side by side. A policy's budgets pace
// its intents on the replay's clock (pacing.go): a paced intent is decided
// when its budget would have released it.
package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/segments"
)

// Policy is one side of a replay.
type Policy struct {
	Name    string // what the report calls it: the file, usually
	Rules   capping.Rules
	Decoder dispatch.DecoderOptions // the policy's channels and categories
	// Budgets are the policy's send budgets, with its exempt categories
	// (pacing.Set.WithExempt); nil paces nothing.
	Budgets *pacing.Set
}

// Plans are the campaign plans of a replay with plans (*plans.Set).
type Plans interface {
	// For appends the plans that book a slot against an intent of user
	// with priority prio at at (capping.Request.Planned).
	For(dst []capping.Planned, user uint64, prio capping.Priority, at time.Time) []capping.Planned
	// Owns reports whether a plan of campaign holds user: the intent is a
	// planned send.
	Owns(user uint64, campaign string) bool
}

// The sides of a replay with plans.
const (
	SideFCFS  = "fcfs"
	SidePlans = "plans"
)

// Options configure Run. Candidate is required; Baseline is optional.
type Options struct {
	Candidate Policy
	Baseline  *Policy
	// Plans, when set, replays the candidate twice instead: first come,
	// first served (side "fcfs"), and with the plans' bookings (side
	// "plans"); Baseline must be nil. The report then counts per priority
	// and what the bookings did (Stats.Plans).
	Plans Plans
	// Lookup is the user's segment (the snapshot's Lookup); nil: every
	// user is in no segment (segments.None).
	Lookup func(userID uint64) string
	// Snapshot names the snapshot version in the report.
	Snapshot string
	// IdempotencyWindow: the worker's capping.idempotency_window.
	IdempotencyWindow time.Duration
	// Observe, when set, sees every record with what each side first
	// decided (baseline first when there is one; a deferred intent's later
	// decisions are counted in the report only; an intent a budget holds
	// is Outcome.Held, and its decision goes to Released).
	Observe func(rec *Record, ds []Outcome)
	// Released, when set, sees every paced intent when its budget releases
	// it, with its decision (side: the Stats' Side).
	Released func(side string, r *Release)
	// Progress, when set, is called now and then with the records read.
	Progress func(records int64)
}

// Outcome is what one side did with one record: the engine's decision, or
// Invalid with the reason.
type Outcome struct {
	Segment  string
	Decision capping.Decision // Outcome capping.Invalid when Invalid is set
	Invalid  error
	User     uint64
	Priority capping.Priority
	// Own: the intent is a plan's own send (Plans.Owns); HeldFor: its first
	// decision was held for that plan's booking (kept when it was
	// deferred, decided again later).
	Own     bool
	HeldFor string
	// Lane is "<budget>/<lane>" for an intent a budget paces (not exempt).
	// Held: it waits there and Decision is unset (it is decided when its
	// budget releases it: Options.Released); not held, its lane would have
	// released it after its send-by, and Decision cancels it (expired).
	Lane string
	Held bool
}

// Record is one past intent as a source reads it.
type Record struct {
	// Pos says where it is: "line 17" or "<topic>/<partition>/<offset>"
	// (the worker's capper-source).
	Pos   string
	Key   []byte // nil for a source without keys (jsonl)
	Keyed bool
	Value []byte
	// Time is the decision time: the record's timestamp; zero for jsonl,
	// whose decision time is the intent's created_at.
	Time time.Time
}

// Source yields records in decision order. Next returns io.EOF after the
// last one; the record is valid until the next call.
type Source interface {
	Next(ctx context.Context) (*Record, error)
	Name() string
	Close() error
}

// side is one policy being replayed.
type side struct {
	name   string
	mem    *capping.Memory
	dec    *dispatch.Decoder
	shared int // index of the side whose decoding this one reuses, or -1
	stats  *Stats
	// waiting: what the side's policy deferred, decided again when due
	// (defer.go); seq numbers the deferrals.
	waiting waitQueue
	seq     int64
	// plans: the side books slots for them (nil: first come, first
	// served); planned is the buffer of a request's bookings.
	plans   Plans
	planned []capping.Planned
	// owns classifies intents as planned sends (both sides of a replay
	// with plans); nil otherwise.
	owns Plans
	// budgets: the policy's (nil: none), each simulated (pacing.go), in
	// the set's order; released is Options.Released.
	set      *pacing.Set
	budgets  []*budgetSim
	released func(side string, r *Release)
	// users and idx: the replay's per-user counts and this side's index.
	users *userCounts
	idx   int
}

// Run replays src through the policies and returns the report. Records
// that cannot be decoded are counted as invalid and listed (the first
// MaxListed), never dropped; an error is returned only when the source
// cannot be read.
func Run(ctx context.Context, src Source, o Options) (*Report, error) {
	if o.IdempotencyWindow < time.Second {
		return nil, fmt.Errorf("replay: idempotency window %s must be at least 1s", o.IdempotencyWindow)
	}
	sides, err := newSides(&o)
	if err != nil {
		return nil, err
	}
	r := &pass{o: &o, sides: sides, lookup: o.Lookup, rep: &Report{Source: src.Name(), Snapshot: o.Snapshot},
		users: newUserCounts(len(sides)), outs: make([]Outcome, len(sides)),
		intents: make([]dispatch.Intent, len(sides)), errs: make([]error, len(sides))}
	for i, s := range sides {
		s.users, s.idx = r.users, i
	}
	if r.lookup == nil {
		r.lookup = func(uint64) string { return segments.None }
	}
	var n int64
	for {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("replay: %w", err)
			}
			if o.Progress != nil {
				o.Progress(n)
			}
		}
		rec, err := src.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("replay %s: %w", src.Name(), err)
		}
		n++
		r.record(rec)
	}
	if o.Progress != nil {
		o.Progress(n)
	}
	r.rep.Records = n
	return r.finish(), nil
}

// newSides are the sides a replay decides on: the candidate alone, or
// the baseline and the candidate, or first come, first served and plans
// (the candidate twice, the plans on the second).
func newSides(o *Options) ([]*side, error) {
	pols := []Policy{o.Candidate}
	names := []string{"candidate"}
	switch {
	case o.Plans != nil && o.Baseline != nil:
		return nil, errors.New("replay: plans compare first come, first served with plans under one policy; no baseline")
	case o.Plans != nil:
		pols = []Policy{o.Candidate, o.Candidate}
		names = []string{SideFCFS, SidePlans}
	case o.Baseline != nil:
		pols = []Policy{*o.Baseline, o.Candidate}
		names = []string{"baseline", "candidate"}
	}
	sides := make([]*side, len(pols))
	for i, p := range pols {
		mem, err := capping.NewMemory(capping.MemoryOptions{Rules: p.Rules, PolicyVersion: p.Name, IdempotencyWindow: o.IdempotencyWindow})
		if err != nil {
			return nil, fmt.Errorf("replay: %s policy %s: %w", names[i], p.Name, err)
		}
		dec, err := dispatch.NewDecoder(p.Decoder)
		if err != nil {
			return nil, fmt.Errorf("replay: %s policy %s: %w", names[i], p.Name, err)
		}
		s := &side{name: names[i], mem: mem, dec: dec, shared: -1, stats: newStats(names[i], p.Name), owns: o.Plans,
			released: o.Released}
		s.pace(p.Budgets)
		if o.Plans != nil {
			s.stats.plans = newPlanCounts()
		}
		if names[i] == SidePlans {
			s.plans = o.Plans
		}
		// Sides that accept the same intents decode each record once.
		for j := range i {
			if sameDecoding(pols[j].Decoder, p.Decoder) {
				s.shared = j
				break
			}
		}
		sides[i] = s
	}
	return sides, nil
}

// pass is a replay under way: its sides, and what each decided of the
// record at hand (outs, intents, errs: one per side, reused).
type pass struct {
	o       *Options
	sides   []*side
	lookup  func(uint64) string
	rep     *Report
	users   *userCounts
	outs    []Outcome
	intents []dispatch.Intent
	errs    []error
}

// record decodes and decides rec on every side, and counts it.
func (r *pass) record(rec *Record) {
	seg, segUser, looked := "", uint64(0), false // one snapshot lookup per record
	for i, s := range r.sides {
		if s.shared >= 0 {
			r.intents[i], r.errs[i] = r.intents[s.shared], r.errs[s.shared]
		} else {
			r.intents[i], r.errs[i] = decode(s.dec, rec)
		}
		if r.errs[i] == nil && (!looked || segUser != r.intents[i].UserID) {
			seg, segUser, looked = r.lookup(r.intents[i].UserID), r.intents[i].UserID, true
		}
		if r.errs[i] == nil {
			s.advance(decisionTime(rec, &r.intents[i]))
		}
		r.outs[i] = s.decideOne(&r.intents[i], r.errs[i], rec, seg)
		s.stats.add(r.intents[i].Channel, r.intents[i].CampaignID, &r.outs[i])
		if r.outs[i].Invalid == nil {
			r.users.add(r.intents[i].UserID, i, !r.outs[i].Held && r.outs[i].Decision.Outcome == capping.Allowed)
		}
	}
	if r.outs[len(r.outs)-1].Invalid != nil || (len(r.outs) > 1 && r.outs[0].Invalid != nil) {
		r.rep.noteInvalid(rec.Pos, r.outs)
	}
	if t := decisionTime(rec, &r.intents[len(r.intents)-1]); !t.IsZero() {
		r.rep.span(t)
	}
	if r.o.Observe != nil {
		r.o.Observe(rec, r.outs)
	}
}

// finish drains each side's lanes (every paced intent is decided), then
// completes each side's stats and the report.
func (r *pass) finish() *Report {
	for i, s := range r.sides {
		s.drain()
		s.stats.Waiting = int64(len(s.waiting))
		s.stats.Users = int64(r.users.len())
		s.stats.PerUser = r.users.distribution(i)
		s.stats.finish()
		r.rep.Sides = append(r.rep.Sides, s.stats)
	}
	if len(r.sides) == 2 {
		r.rep.Change = r.users.change()
	}
	return r.rep
}

func sameDecoding(a, b dispatch.DecoderOptions) bool {
	return slices.Equal(a.Channels, b.Channels) && slices.Equal(a.Categories, b.Categories) &&
		a.DefaultCategory == b.DefaultCategory && a.MaxBytes == b.MaxBytes
}

// ErrNoTime: a saved intent without created_at has no decision time.
var ErrNoTime = &dispatch.InvalidError{Field: "created_at", Reason: "is required to replay a saved intent (its decision time)"}

func decode(dec *dispatch.Decoder, rec *Record) (dispatch.Intent, error) {
	if rec.Keyed {
		return dec.Decode(rec.Key, rec.Value)
	}
	in, err := dec.DecodeValue(rec.Value)
	if err == nil && in.CreatedAt.IsZero() {
		return in, ErrNoTime
	}
	return in, err
}

// decisionTime is the record's timestamp, else the intent's created_at, to
// the millisecond like the worker's clock.
func decisionTime(rec *Record, in *dispatch.Intent) time.Time {
	if !rec.Time.IsZero() {
		return rec.Time.Truncate(time.Millisecond)
	}
	return in.CreatedAt.Truncate(time.Millisecond)
}

// decideOne decides a decoded intent of a user in segment seg; the side
// holds it in its lane when a budget paces it, and for its due time when
// its policy defers it.
func (s *side) decideOne(in *dispatch.Intent, err error, rec *Record, seg string) Outcome {
	if err != nil {
		return Outcome{Decision: capping.Decision{Outcome: capping.Invalid}, Invalid: err}
	}
	r := dispatch.NewRequest(in, seg)
	r.At = decisionTime(rec, in)
	r.SendBy = in.SendBy
	own := s.owns != nil && s.owns.Owns(r.UserID, r.Campaign)
	pi := in.Pacing()
	sim, lane, charge := s.place(&r, pi)
	var laneName string
	if sim != nil {
		laneName = sim.b.Name + "/" + sim.b.Lanes[lane].Name
		if at, late := sim.late(lane, r.At, r.SendBy); late {
			r.ReleaseAt = at // cancelled now (expired), not when it comes due
		} else {
			sim.hold(ownRequest(&r, pi, own, ""), lane, r.At)
			return Outcome{Segment: seg, User: r.UserID, Priority: r.Priority, Own: own, Lane: laneName, Held: true}
		}
	}
	d := s.decide(&r)
	if d.Err != nil {
		// The decoder accepts what the engine does; an intent the engine
		// refuses anyway (a time before 1970) is dead-lettered like one
		// that does not decode.
		return Outcome{Segment: seg, Decision: capping.Decision{Outcome: capping.Invalid}, Invalid: d.Err}
	}
	o := Outcome{Segment: seg, Decision: d, User: r.UserID, Priority: r.Priority, HeldFor: d.HeldFor, Own: own, Lane: laneName}
	switch {
	case sim != nil:
		sim.expired(&r, &d)
	case charge != nil:
		charge.charge(r.At, &d)
	}
	if d.Outcome == capping.Deferred {
		s.hold(&r, pi, &o)
	}
	return o
}

// decide decides r with the bookings of the plans in force at r.At (a
// side with plans).
func (s *side) decide(r *capping.Request) capping.Decision {
	if s.plans != nil {
		s.planned = s.plans.For(s.planned[:0], r.UserID, r.Priority, r.At)
		r.Planned = s.planned
		defer func() { r.Planned = nil }()
	}
	return s.mem.Decide(r)
}
