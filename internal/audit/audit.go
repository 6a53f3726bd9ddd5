// Package audit checks, independently of the capping engine, that what
// capper delivered respects the caps: it reads the delivery records back,
// counts each user's sends per limit (rolling windows and calendar periods in
// the user's time zone, scopes, per-campaign counts, reserved slots) and
// reports every window above what the limit allows. The end-to-end tests and
// `capper demo` use it as their verdict.
package audit

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/capping"
)

// Header names and values read back; they are the output contract
// (docs/reference/event-contract.md), spelled out here rather than imported
// so the audit does not share code with what it audits.
const (
	hDecision  = "capper-decision"
	hSegment   = "capper-segment"
	hDecidedAt = "capper-decided-at"
	hUnchecked = "capper-unchecked"
	hDuplicate = "capper-duplicate"
	hOverride  = "capper-override"
	hPolicy    = "capper-policy"
	hLimit     = "capper-limit"
	hHeldFor   = "capper-held-for"
	timeLayout = "2006-01-02T15:04:05.000Z07:00"
)

// Send is one delivery that counts against the caps, with what the limits
// look at.
type Send struct {
	User      uint64
	ID        string
	Channel   string
	Category  string // "" reads as the policy's default category
	Campaign  string
	Tags      []string
	Priority  string         // low, normal (also ""), high, or a number from 0 to 100
	TimeZone  *time.Location // nil: the policy's
	Segment   string
	At        time.Time // when the caps were checked (capper-decided-at)
	Duplicate bool      // a redelivery of an id allowed before
	Bypass    bool      // an honoured bypass: delivered without checking, counted
	Policy    string    // the policy version that decided it (capper-policy)
	// Seq orders sends decided at the same time (a batch shares its
	// decision time): the order of the records read, which for one user's
	// deliveries (one partition) is the order they were decided in.
	Seq int
}

// Sends extracts the counted sends from delivery records: decision
// "allowed" and not failed open. Exempt (also bypass-uncounted) and
// shadow-capped records are not counted by the caps, so they are skipped.
func Sends(records []kafka.Message) ([]Send, error) {
	var out []Send
	for seq, r := range records {
		h := headers(r)
		if h[hDecision] != "allowed" || h[hUnchecked] == "true" {
			continue
		}
		s, err := intentOf(r, h)
		if err != nil {
			return nil, err
		}
		s.Seq = seq
		out = append(out, s)
	}
	return out, nil
}

// intentOf reads what the limits look at from an output record: the
// intent's fields, and the headers capper decided it with.
func intentOf(r kafka.Message, h map[string]string) (Send, error) {
	var v struct {
		ID       string          `json:"id"`
		UserID   json.RawMessage `json:"user_id"`
		Channel  string          `json:"channel"`
		Category string          `json:"category"`
		Campaign string          `json:"campaign_id"`
		Tags     []string        `json:"tags"`
		Priority json.RawMessage `json:"priority"`
		TimeZone string          `json:"time_zone"`
	}
	where := func(err error) error {
		return fmt.Errorf("output at %s/%d/%d: %w", r.Topic, r.Partition, r.Offset, err)
	}
	if err := json.Unmarshal(r.Value, &v); err != nil {
		return Send{}, where(err)
	}
	uid, err := strconv.ParseUint(string(bytesTrimQuotes(v.UserID)), 10, 64)
	if err != nil {
		return Send{}, where(fmt.Errorf("user_id %s: %w", v.UserID, err))
	}
	at, err := time.Parse(time.RFC3339Nano, h[hDecidedAt]) // capper writes ms; any RFC 3339 reads
	if err != nil {
		return Send{}, where(fmt.Errorf("%s: %w", hDecidedAt, err))
	}
	s := Send{User: uid, ID: v.ID, Channel: v.Channel, Category: v.Category, Campaign: v.Campaign, Tags: v.Tags,
		Priority: string(bytesTrimQuotes(v.Priority)), Segment: h[hSegment], At: at, Duplicate: h[hDuplicate] == "true",
		Bypass: h[hOverride] == "bypass", Policy: h[hPolicy]}
	if v.TimeZone != "" {
		if s.TimeZone, err = time.LoadLocation(v.TimeZone); err != nil {
			return Send{}, where(fmt.Errorf("time_zone: %w", err))
		}
	}
	return s, nil
}

func headers(r kafka.Message) map[string]string {
	m := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}

func bytesTrimQuotes(b []byte) []byte {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		return b[1 : len(b)-1]
	}
	return b
}

// Violation is a window holding more sends than its limit allows.
type Violation struct {
	User    uint64
	Segment string
	Limit   capping.Limit
	// Campaign is set for a per-campaign limit.
	Campaign string
	Count    int
	// Allowed is what the limit allowed the send that ended the window:
	// Max, or Max minus the reserved slots for a lower priority.
	Allowed   int
	From      time.Time // the calendar period's start; zero for a rolling window
	WindowEnd time.Time
}

func (v Violation) String() string {
	what := fmt.Sprintf("the %s window ending %s", v.Limit.Window, v.WindowEnd.UTC().Format(timeLayout))
	if !v.From.IsZero() {
		what = fmt.Sprintf("the calendar %s from %s, up to %s", v.Limit.Calendar, v.From.Format(timeLayout), v.WindowEnd.UTC().Format(timeLayout))
	}
	if v.Campaign != "" {
		what += fmt.Sprintf(" for campaign %q", v.Campaign)
	}
	return fmt.Sprintf("user %d (segment %s): %d sends in %s, limit %q allows %d", v.User, v.Segment, v.Count, what, v.Limit.Name, v.Allowed)
}

// Check returns every violation of rules in sends. A user's repeated id
// counts once, at its original delivery (else the earliest duplicate). Sends with the same time (one batch)
// are taken in Seq order, the order they were decided in. For each counted send s under its
// segment's policy, every limit whose where it matches must see, among the
// user's sends that match it (of the same campaign for a per-campaign limit):
//   - rolling window W: at most the allowed number in (s.At-W, s.At];
//   - calendar period: at most the allowed number from the start of the
//     local day, week or month that holds s.At (in the send's time zone, or
//     the policy's) up to s.At.
//
// That is the decision the engine made for s (the allowed number is Max, or
// Max minus the reserved slots when s's priority is below the reserve's), and
// since the busiest window always ends at a send, it is "at most Max in any
// window". An honoured bypass is not checked itself, but counts for the
// others.
func Check(rules capping.Rules, sends []Send) []Violation {
	return CheckVersions(func(string) (capping.Rules, bool) { return rules, true }, sends)
}

// sendKey is a user's intent id: one send, however many copies.
type sendKey struct {
	user uint64
	id   string
}

// firstSends is each send's original delivery, not a redelivery marked
// duplicate (that one carries the time in whole seconds, and its own place
// in the order); a duplicate only when nothing else of it was read.
func firstSends(sends []Send) map[sendKey]Send {
	first := map[sendKey]Send{}
	for _, s := range sends {
		k := sendKey{s.User, s.ID}
		if f, ok := first[k]; !ok || f.Duplicate && !s.Duplicate || f.Duplicate == s.Duplicate && s.At.Before(f.At) {
			first[k] = s
		}
	}
	return first
}

// unknownVersion is the version of a send read only as a duplicate.
const unknownVersion = "\x00unknown"

// CheckVersions is Check with each send checked under the rules of the
// policy version that decided it (Send.Policy; a version rulesOf does not
// know is not checked), counting the sends of every version: a policy
// swapped live applies to the decisions it made. A send read only as a
// duplicate is counted but not checked: its record names the version of
// the batch that redelivered it, not of the one that allowed it.
func CheckVersions(rulesOf func(version string) (capping.Rules, bool), sends []Send) []Violation {
	first := firstSends(sends)
	byUser := map[uint64][]Send{}
	for _, s := range first {
		if s.Duplicate {
			// Only a redelivery of it was read (the original's record was
			// lost in a crash): its time is in whole seconds, so it was
			// decided in the second after. Taking the end of that second
			// never counts it before a send it was decided after; the
			// engine, which counts in whole seconds, counted it no less.
			s.At = s.At.Add(time.Second - time.Millisecond)
			s.Policy = unknownVersion
		}
		byUser[s.User] = append(byUser[s.User], s)
	}
	users := make([]uint64, 0, len(byUser))
	for u := range byUser {
		users = append(users, u)
	}
	slices.Sort(users)

	var out []Violation
	type window struct {
		user  uint64
		limit string
		end   time.Time
	}
	reported := map[window]bool{}
	for _, u := range users {
		list := byUser[u]
		sort.Slice(list, func(i, j int) bool {
			return list[i].At.Before(list[j].At) || list[i].At.Equal(list[j].At) && list[i].Seq < list[j].Seq
		})
		for _, s := range list {
			rules, ok := rulesOf(s.Policy)
			if s.Bypass || !ok {
				continue
			}
			for _, l := range rules.PolicyOf(s.Segment).Limits {
				if !Matches(rules, l.Where, s) {
					continue // this limit did not apply to this decision
				}
				from := s.At.Add(-l.Window)
				var start time.Time
				if l.Calendar != capping.None {
					loc := s.TimeZone
					if loc == nil {
						loc = rules.TimeZone
					}
					start = periodStart(l.Calendar, s.At, loc, rules.WeekStart).In(loc)
					from = start.Add(-time.Nanosecond) // (from, s.At] holds start
				}
				n := 0
				for _, o := range list {
					// Sends decided before s: earlier, or at the same time
					// and before it in its batch.
					before := o.At.Before(s.At) || o.At.Equal(s.At) && o.Seq <= s.Seq
					if o.At.After(from) && before && Matches(rules, l.Where, o) &&
						(l.Per != capping.PerCampaign || o.Campaign == s.Campaign) {
						n++
					}
				}
				allowed := l.Max
				if l.Reserve.Slots > 0 && priority(s.Priority) < l.Reserve.Below {
					allowed -= l.Reserve.Slots
				}
				if w := (window{u, l.Name, s.At}); n > allowed && !reported[w] {
					reported[w] = true
					v := Violation{User: u, Segment: s.Segment, Limit: l, Count: n, Allowed: allowed, From: start, WindowEnd: s.At}
					if l.Per == capping.PerCampaign {
						v.Campaign = s.Campaign
					}
					out = append(out, v)
				}
			}
		}
	}
	return out
}

// Matches reports whether a send falls in a limit's where: every dimension
// that is set (any of the tags).
func Matches(rules capping.Rules, w capping.Where, s Send) bool {
	category := s.Category
	if category == "" {
		category = rules.DefaultCategory
	}
	if len(w.Channels) > 0 && !slices.Contains(w.Channels, s.Channel) ||
		len(w.Categories) > 0 && !slices.Contains(w.Categories, category) ||
		len(w.Campaigns) > 0 && !slices.Contains(w.Campaigns, s.Campaign) {
		return false
	}
	if len(w.Tags) == 0 {
		return true
	}
	for _, t := range s.Tags {
		if slices.Contains(w.Tags, t) {
			return true
		}
	}
	return false
}

// priority reads an intent's priority: a name or a number from 0 to 100
// (the event contract); anything else reads as normal.
func priority(p string) capping.Priority {
	switch p {
	case "low":
		return capping.Low
	case "high":
		return capping.High
	}
	if n, err := strconv.ParseUint(p, 10, 8); err == nil && n <= 100 {
		return capping.Priority(n)
	}
	return capping.Normal
}

// periodStart is the first instant of the local day, week (from weekStart)
// or month that holds t in loc: the instant the local date turns to that
// day's date, found by bisection (so it needs nothing but t.In(loc).Date,
// and gets days of 23 or 25 hours, and midnights a DST change skips, right).
func periodStart(c capping.Calendar, t time.Time, loc *time.Location, weekStart time.Weekday) time.Time {
	y, m, d := t.In(loc).Date()
	switch c {
	case capping.Week:
		wd := time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Weekday()
		y, m, d = time.Date(y, m, d-(int(wd)-int(weekStart)+7)%7, 12, 0, 0, 0, time.UTC).Date()
	case capping.Month:
		d = 1
	}
	before := func(u time.Time) bool {
		uy, um, ud := u.In(loc).Date()
		return uy < y || uy == y && (um < m || um == m && ud < d)
	}
	lo, hi := t.Unix()-33*86400, t.Unix() // before(lo), !before(hi): midnights are whole seconds
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if before(time.Unix(mid, 0)) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return time.Unix(hi, 0)
}
