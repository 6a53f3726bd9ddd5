package demo

// The demo's sections: what capper does beyond first come, first served
// (campaign plans, deferral and quiet hours, refunds, campaign control,
// send pacing, users' own limits), in the same run as the blast, each on
// users of its own above the blast's, in segments of their own, so that the
// blast's table is what configs/policy.yaml alone decides (and what capper
// replay finds again).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/plans"
	"github.com/capper-dev/capper/internal/replay"
)

// The sections' segments, campaigns and users' time zones.
const (
	segShoppers    = "shoppers"
	segSubscribers = "subscribers"
	segMembers     = "members"
	segReaders     = "readers"

	campNewsletter = "newsletter"
	campCart       = "cart-rescue"
	campWelcome    = "welcome"
	campTips       = "tips"
	campReminders  = "reminders"
	campUpdate     = "app-update"
	campFlash      = "flash-sale"
	campDigest     = "weekly-digest" // send pacing: the blast, in the bulk lane
	campBreaking   = "breaking-news" // its urgent lane
	campReceipts   = "receipts"      // transactional: never held
	campDeals      = "daily-deals"   // users' own limits: an email and a push, twice

	zoneDay   = "Europe/Berlin"    // 10:00 when the blast comes
	zoneNight = "America/New_York" // 04:00: inside quiet hours
)

// sectionPolicy is added to the segments of configs/policy.yaml in the
// demo's policy file.
const sectionPolicy = `  # capper-demo's sections (added by the demo to configs/policy.yaml, for
  # users above the blast's). Campaign plans and refunds: a message a day.
  - name: shoppers
    limits:
      - {name: daily, calendar: day, max: 1}
  # Deferral, quiet hours and campaign control: a push every 2h at most, a
  # capped one waits (up to 3h) rather than being suppressed; no push at
  # night in the user's time zone.
  - name: subscribers
    quiet_hours: {from: "21:00", to: "08:00", channels: [push], jitter: 10m}
    limits:
      - {name: push-gap, window: 2h, max: 1, where: {channels: [push]}, on_cap: defer, max_defer: 3h}
  # Send pacing: two pushes an hour (the digest and the breaking news).
  - name: members
    limits:
      - {name: push-hourly, window: 1h, max: 2, where: {channels: [push]}}
  # Users' own limits: four messages a day, no push at night in the user's
  # time zone (a push waits in the delay tiers), on top of what each user
  # chose (user_limits, below).
  - name: readers
    quiet_hours: {from: "21:00", to: "08:00", channels: [push], jitter: 10m}
    limits:
      - {name: daily, window: 24h, max: 4}
`

// shortHours writes whole hours as policies do (24h).
func shortHours(d time.Duration) string { return strconv.Itoa(int(d/time.Hour)) + "h" }

// withSections is the policy file: configs/policy.yaml with the sections'
// segments after its own, the pacing section's budget and the users' own
// limits section's user_limits.
func withSections(example []byte) ([]byte, error) {
	if len(noBudgets.FindAllIndex(example, -1)) != 1 {
		return nil, fmt.Errorf("demo policy: configs/policy.yaml has no top-level \"budgets: []\" to put the pacing section's budget in")
	}
	example = noBudgets.ReplaceAllLiteral(example, []byte(budgetPolicy))
	if len(noUserLimits.FindAllIndex(example, -1)) != 1 {
		return nil, fmt.Errorf("demo policy: configs/policy.yaml has no top-level \"user_limits: null\" to put the users' own limits section in")
	}
	example = noUserLimits.ReplaceAllLiteral(example, []byte(userLimitsPolicy))
	at := bytes.Index(example, []byte("\ndefault_policy:"))
	if at < 0 {
		return nil, fmt.Errorf("demo policy: configs/policy.yaml has no top-level default_policy to add the sections' segments before")
	}
	// Back over the comment lines that introduce default_policy.
	for {
		prev := bytes.LastIndexByte(example[:at], '\n')
		if prev < 0 || !bytes.HasPrefix(example[prev+1:at], []byte("#")) {
			break
		}
		at = prev
	}
	out := append([]byte{}, example[:at+1]...)
	out = append(out, sectionPolicy...)
	return append(out, example[at+1:]...), nil
}

// span is users [from, to).
type span struct{ from, to int }

func (s span) len() int          { return s.to - s.from }
func (s span) has(u uint64) bool { return u >= uint64(s.from) && u < uint64(s.to) }
func (s span) String() string    { return fmt.Sprintf("%d-%d", s.from, s.to-1) }

// first is the span's first n users.
func (s span) first(n int) span { return span{s.from, s.from + n} }

// half splits the span in two.
func (s span) half() (span, span) {
	m := s.from + s.len()/2
	return span{s.from, m}, span{m, s.to}
}

// spanAfter is the n users after prev.
func spanAfter(prev span, n int) span { return span{prev.to, prev.to + n} }

// sections are the users, times and campaigns of the demo's sections, and
// what happened to them while it ran.
type sections struct {
	start time.Time // the demo's clock when the blast was made

	shoppers, audience, cart span // campaign plans: newsletter to shoppers, cart-rescue's plan for audience, its pushes to cart
	refund                   span // refunds (segment shoppers too)
	reminders, update, flash span // subscribers: deferral, quiet hours, campaign control
	members                  span // send pacing (segment members)
	// Users' own limits (segment readers): snoozed for a week (longer
	// than user_limits.max_defer: cancelled), snoozed until the clock
	// skips to due (deferred to it), on the tier fewer, and no limits.
	snoozeLong, snoozeShort, fewer, plain span

	// planStarts and planEnds bound cart-rescue's window; due is when the
	// clock moves on for the intents held at the blast (start + 4h15m:
	// the reminders' slots freed at +2h, New York's night ended).
	planStarts, planEnds, due time.Time

	// Filled while the demo runs.
	produced       map[string]int             // intents per campaign
	sent           map[string]time.Time       // when a campaign's intents were made
	stopRecord     string                     // the control record of the stop
	stopApplied    time.Time                  // when the worker applied it (its clock)
	stopBacklog    int                        // intents not yet decided then
	failed         int                        // welcome emails reported failed
	refunded       map[uint64]map[string]bool // their ids, by user
	refundsApplied float64                    // capper_refunds_total{result="applied"}
	fcfs, plan     *replay.PlanStats          // capper replay --plans of the plan's intents
	pace           paceRun                    // the send pacing section's timeline
	throttle       throttleRun                // its throttle feedback part's
	own            ownRun                     // the users' own limits section's
}

// ownRun is what happened in the users' own limits section, on the demo's
// clock (the worker's).
type ownRun struct {
	tierRecords, snoozeRecords int       // the records written
	tierApplied                time.Time // the worker had applied the tier records (the demo saw it)
	snoozeApplied              time.Time // the worker had applied them (the demo saw it)
	snoozeBacklog              int       // inputs not yet decided then
	longUntil, shortUntil      time.Time // the snoozes' ends
}

// paceRun is what happened in the send pacing section, on the demo's
// clock (the worker's).
type paceRun struct {
	start      time.Time // the digest and the first receipts produced
	breakingAt time.Time // breaking-news and the other receipts produced
	stopRecord string    // the control record of the digest's stop
	stopAt     time.Time // when the demo stopped it
	applied    time.Time // when the worker applied the stop
}

// newSections lays the sections out above the blast's users: unit users a
// section (users/40, at least 20).
func newSections(users int, start time.Time) *sections {
	unit := max(users/40, 20)
	s := &sections{start: start, produced: map[string]int{}, sent: map[string]time.Time{}}
	s.shoppers = span{users, users + 2*unit}
	s.audience = s.shoppers.first(s.shoppers.len() * 2 / 5)
	s.cart = s.audience.first(s.audience.len() * 4 / 5)
	s.refund = spanAfter(s.shoppers, unit)
	s.reminders = spanAfter(s.refund, unit)
	s.update = spanAfter(s.reminders, unit)
	s.flash = spanAfter(s.update, unit)
	s.members = spanAfter(s.flash, paceUsers)
	// At most 100 readers: the applier writes users' records one at a
	// time, and the snoozes come mid-blast.
	own := spanAfter(s.members, min(unit, 100))
	q := own.len() / 4
	s.snoozeLong = own.first(q)
	s.snoozeShort = spanAfter(s.snoozeLong, q)
	s.fewer = spanAfter(s.snoozeShort, q)
	s.plain = span{s.fewer.to, own.to}
	s.planStarts, s.planEnds = start.Add(9*time.Hour), start.Add(10*time.Hour)
	s.due = start.Add(4*time.Hour + 15*time.Minute)
	return s
}

// segments are the sections' users in the snapshot.
func (s *sections) segments() []userRange {
	return []userRange{{segShoppers, s.shoppers.from, s.refund.to}, {segSubscribers, s.reminders.from, s.flash.to},
		{segMembers, s.members.from, s.members.to}, {segReaders, s.snoozeLong.from, s.plain.to}}
}

func isSectionSegment(seg string) bool {
	return seg == segShoppers || seg == segSubscribers || seg == segMembers || seg == segReaders
}

// intent is one of the sections' send-intents.
type intent struct {
	ID       string `json:"id"`
	User     uint64 `json:"user_id"`
	Campaign string `json:"campaign_id"`
	Channel  string `json:"channel"`
	Created  string `json:"created_at"`
	Priority string `json:"priority,omitempty"`
	TimeZone string `json:"time_zone,omitempty"`
	Category string `json:"category,omitempty"`
	Route    string `json:"route,omitempty"`
}

// intents are n intents of campaign per user of users, made at at;
// zone, when set, names each user's time zone.
func (s *sections) intents(campaign, channel, prio string, users span, n int, at time.Time, zone func(u int) string) []kafka.Message {
	var out []kafka.Message
	for u := users.from; u < users.to; u++ {
		for i := range n {
			in := intent{ID: fmt.Sprintf("%s-%d-%d", campaign, u, i), User: uint64(u), Campaign: campaign, Channel: channel,
				Created: at.UTC().Format(time.RFC3339), Priority: prio}
			if zone != nil {
				in.TimeZone = zone(u)
			}
			v, _ := json.Marshal(in)
			out = append(out, kafka.Message{Key: []byte(strconv.Itoa(u)), Value: v})
		}
	}
	s.produced[campaign] += len(out)
	if _, ok := s.sent[campaign]; !ok {
		s.sent[campaign] = at
	}
	return out
}

// morning are the intents that come with the blast: the newsletter, the
// welcome emails, the reminders, the app update, flash-sale's first half
// and the readers' first deals (decided before the stop and the snoozes;
// late are flash-sale's other half and the readers' second deals, in the
// second half of the blast).
func (s *sections) morning(at time.Time) (early, late []kafka.Message) {
	day := func(int) string { return zoneDay }
	early = append(early, s.intents(campNewsletter, "email", "low", s.shoppers, 1, at, nil)...)
	early = append(early, s.intents(campWelcome, "email", "", s.refund, 1, at, nil)...)
	early = append(early, s.intents(campReminders, "push", "", s.reminders, 3, at, day)...)
	early = append(early, s.intents(campUpdate, "push", "", s.update, 1, at, func(u int) string {
		if u%2 == 0 {
			return zoneNight
		}
		return zoneDay
	})...)
	flashZone := func(u int) string {
		if u%4 == 0 {
			return zoneNight
		}
		return zoneDay
	}
	a, b := s.flash.half()
	early = append(early, s.intents(campFlash, "push", "", a, 2, at, flashZone)...)
	early = append(early, s.deals(1, at)...)
	late = append(s.intents(campFlash, "push", "", b, 2, at, flashZone), s.deals(2, at)...)
	return early, late
}

// readers are the users' own limits section's users.
func (s *sections) readers() span { return span{s.snoozeLong.from, s.plain.to} }

// deals are the readers' intents of a wave: an email and a push to each
// (in New York, where the blast comes at night: the push waits for the
// segment's quiet hours).
func (s *sections) deals(wave int, at time.Time) []kafka.Message {
	var out []kafka.Message
	for u := s.readers().from; u < s.readers().to; u++ {
		for _, ch := range []string{"email", "push"} {
			in := intent{ID: fmt.Sprintf("%s-%d-%s-%d", campDeals, u, ch, wave), User: uint64(u), Campaign: campDeals, Channel: ch,
				Created: at.UTC().Format(time.RFC3339), TimeZone: zoneNight}
			v, _ := json.Marshal(in)
			out = append(out, kafka.Message{Key: []byte(strconv.Itoa(u)), Value: v})
		}
	}
	s.produced[campDeals] += len(out)
	if _, ok := s.sent[campDeals]; !ok {
		s.sent[campDeals] = at
	}
	return out
}

// publishPlan publishes cart-rescue's plan to the plan store, as
// segment-builder plan publish does: priority high, a push, its window,
// the audience's bitmap.
func (s *sections) publishPlan(ctx context.Context, st objstore.Store, rules capping.Rules, now time.Time) (*plans.Manifest, error) {
	spec := &plans.Spec{Campaign: campCart, Priority: "high", Starts: s.planStarts, Ends: s.planEnds,
		Message: plans.Message{Channel: "push"}, Audience: []string{"(the demo's shoppers " + s.audience.String() + ")"}}
	prio, ps := spec.Check(rules)
	if err := ps.Err(); err != nil {
		return nil, fmt.Errorf("demo plan: %w", err)
	}
	bm := roaring.New()
	bm.AddRange(uint64(s.audience.from), uint64(s.audience.to))
	data, err := bm.ToBytes()
	if err != nil {
		return nil, fmt.Errorf("demo plan: %w", err)
	}
	m, err := plans.Publish(ctx, st, spec, prio, data, bm.GetCardinality(), now)
	if err != nil {
		return nil, fmt.Errorf("demo plan: %w", err)
	}
	return m, nil
}

// failures picks the welcome emails that failed: every tenth delivered
// one (by user), read back from the deliveries; it returns their
// delivery statuses ("failed"), keyed like intents.
func (s *sections) failures(deliveries []kafka.Message, at time.Time) []kafka.Message {
	var out []kafka.Message
	s.refunded = map[uint64]map[string]bool{}
	for _, m := range deliveries {
		r := readRecord(m)
		if r.campaign != campWelcome || r.decision != "allowed" || (r.user-uint64(s.refund.from))%10 != 0 {
			continue
		}
		s.failed++
		if s.refunded[r.user] == nil {
			s.refunded[r.user] = map[string]bool{}
		}
		s.refunded[r.user][r.id] = true
		v, _ := json.Marshal(map[string]any{"id": r.id, "user_id": r.user, "status": "failed", "at": at.UTC().Format(time.RFC3339)})
		out = append(out, kafka.Message{Key: []byte(strconv.FormatUint(r.user, 10)), Value: v})
	}
	return out
}

// replayPlan replays the plan section's intents (the newsletter and
// cart-rescue's pushes, as produced) in memory as capper replay --plans
// does: first come, first served and with the plan.
func (s *sections) replayPlan(ctx context.Context, replayFn func(ctx context.Context, from string) (*replay.Report, error), dir string, msgs []kafka.Message) error {
	file := filepath.Join(dir, "plan-intents.jsonl")
	var b bytes.Buffer
	for _, m := range msgs {
		b.Write(m.Value)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("demo: replay the plan's intents: %w", err)
	}
	rep, err := replayFn(ctx, file)
	if err != nil {
		return fmt.Errorf("demo: replay the plan's intents: %w", err)
	}
	for _, side := range rep.Sides {
		switch side.Side {
		case replay.SideFCFS:
			s.fcfs = side.Plans
		case replay.SidePlans:
			s.plan = side.Plans
		}
	}
	if s.fcfs == nil || s.plan == nil {
		return fmt.Errorf("demo: the replay of the plan's intents has no %s and %s sides", replay.SideFCFS, replay.SidePlans)
	}
	return nil
}
