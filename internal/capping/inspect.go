package capping

// Inspect: a user's limits as Redis holds them at some time, read-only.

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// LimitState is one limit of a user at some time.
type LimitState struct {
	Limit Limit
	// Scope is what the limit counts, in words ("channels push; tags
	// promo", "every intent; per campaign").
	Scope string
	// Campaign is, for a per-campaign limit, the campaign asked about, or
	// the 3-byte hash (hex) of one the user has sends of: the record keeps
	// no names.
	Campaign string
	// From and To bound the window: a rolling one ends at the time asked
	// about, a calendar one is the local period holding it.
	From, To time.Time
	Count    int
	// Reserved slots are for priority Limit.Reserve.Below and up.
	Reserved int
	// Trimmed: the log dropped sends this scope's limits still count (more
	// than its largest max in a window): refunds take nothing from it for
	// now, and a limit whose max is above what it holds (raised since)
	// counts it full until its oldest kept send leaves the window
	// (record.go). Count is then what the log holds.
	Trimmed bool
	// NextFree is when the limit admits one more intent of the highest
	// priority: the time asked about if Count < Max, later if the window is
	// full, and the zero Time if Max is 0 (never).
	NextFree time.Time
	// Booked are the plans that hold a slot in it at the time asked about
	// (InspectOptions.Planned): an intent of a priority below a plan's
	// counts its slot beside Count.
	Booked []Planned
}

// InspectOptions say what Inspect looks at.
type InspectOptions struct {
	At       time.Time      // required
	TimeZone *time.Location // the user's, for calendar limits; nil: the rules'
	// Campaign: per-campaign limits show this campaign only. Empty: a row
	// per campaign the user has sends of (one without a campaign when none).
	Campaign string
	// Planned are the campaign plans whose audience holds the user
	// (plans.Set.For with priority 0): each limit lists those that book a
	// slot in it (LimitState.Booked).
	Planned []Planned
}

// Inspect reports every limit of the segment's policy for a user, then
// the limits of their tier and the channels they turned down (named
// user-tier/<tier>/<limit>, user-channel/<channel>). It only reads.
func (e *Engine) Inspect(ctx context.Context, userID uint64, segment string, o InspectOptions) ([]LimitState, error) {
	at, tz := o.At, o.TimeZone
	if at.IsZero() {
		return nil, errors.New("inspect: no time")
	}
	set := e.set.Load()
	raw, err := e.client.HGet(ctx, e.keys.bucket(userID), field(userID)).Bytes()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	rec, err := decodeRecord(raw)
	if len(raw) > 0 && err != nil {
		return nil, fmt.Errorf("inspect: the user's record: %w", err)
	}
	if tz == nil {
		tz = set.rules.TimeZone
	}
	in := inspection{set: set, rec: rec, o: o, at: at, tz: tz}
	var out []LimitState
	for _, l := range set.pols[set.policyIndex(segment)].limits {
		out = append(out, in.rows(l, true)...)
	}
	// The user's own limits: their tier's, and the channels they set (at
	// their max), after the segment's, as the script checks them.
	if set.users != nil {
		u, err := e.UserLimits(ctx, userID)
		if err != nil {
			return nil, fmt.Errorf("inspect: %w", err)
		}
		for ti, t := range set.users.Tiers {
			if t.Name == u.Tier {
				for _, l := range set.ulimits[set.tiers[ti][0]:set.tiers[ti][1]] {
					out = append(out, in.rows(l, false)...)
				}
			}
		}
		for i, c := range set.users.Channels {
			if m, ok := u.Channels[c]; ok {
				l := set.ulimits[set.chanBase+i]
				l.Max = m
				out = append(out, in.rows(l, false)...)
			}
		}
	}
	return out, nil
}

// inspection is one Inspect's record and question.
type inspection struct {
	set *policySet
	rec record
	o   InspectOptions
	at  time.Time
	tz  *time.Location
}

// rows is limit l's state: a row per section of its scope (per campaign,
// for a per-campaign limit asked without a campaign); bookable: campaign
// plans may book it.
func (in *inspection) rows(l compiledLimit, bookable bool) []LimitState {
	set, at, now := in.set, in.at, in.at.Unix()
	s := set.scopes[l.scope]
	st := LimitState{Limit: l.Limit, Scope: s.describe(), Reserved: l.Reserve.Slots, From: time.Unix(now-l.window, 0), To: at}
	until := at.Add(time.Duration(l.window) * time.Second)
	if l.Calendar != None {
		st.From, st.To = period(l.Calendar, at, in.tz, set.rules.WeekStart)
		until = st.To
	}
	for _, p := range in.o.Planned {
		if bookable && set.books(&l, &p, at, until) {
			st.Booked = append(st.Booked, p)
		}
	}
	var secs []section
	want := campaignHash(in.o.Campaign)
	for _, sec := range in.rec.sections {
		if sec.id == s.id && (s.per != PerCampaign || in.o.Campaign == "" || sec.campaign == want) {
			secs = append(secs, sec)
		}
	}
	if len(secs) == 0 {
		secs = []section{{id: s.id}}
	}
	out := make([]LimitState, 0, len(secs))
	for _, sec := range secs {
		row := st
		row.Trimmed = sec.trimmed
		switch {
		case s.per != PerCampaign:
		case in.o.Campaign != "":
			row.Campaign = in.o.Campaign
		case len(sec.times) > 0:
			row.Campaign = hex.EncodeToString(sec.campaign[:])
		}
		row.Count, row.NextFree = sectionState(l, sec, st, at)
		out = append(out, row)
	}
	return out
}

// sectionState is how many of a section's sends limit l counts in st's
// window, and when it has a free slot (zero: never, a max of 0).
func sectionState(l compiledLimit, sec section, st LimitState, at time.Time) (int, time.Time) {
	from, count := st.From.Unix(), 0
	for i, t := range sec.times {
		if t >= from {
			count = len(sec.times) - i
			break
		}
	}
	// The decision's view: a trimmed log with fewer sends than the max
	// counts its dropped ones as at its oldest kept send.
	full, nth := count >= l.Max, len(sec.times)-l.Max
	if !full && sec.trimmed && len(sec.times) > 0 && sec.times[0] >= from {
		full, nth = true, 0
	}
	switch {
	case l.Max == 0:
		return count, time.Time{}
	case full && l.Calendar != None:
		return count, st.To
	case full:
		return count, time.Unix(sec.times[max(nth, 0)]+l.window+1, 0)
	}
	return count, at
}
