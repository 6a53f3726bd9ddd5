package soak

// Users' own limits in the soak: the policies' user_limits section (two
// tiers, the channels users may turn down counted over 2 minutes, a
// max_defer of 1m), the records written to the user-limits topic during
// the traffic for a few dozen of the users it sends to, and the check that
// no delivery broke a limit in force when it was decided. The records
// snooze every channel or some (short snoozes, whose intents come back,
// and long ones, which cancel them), choose a tier, turn channels off or
// down to a max, set quiet hours in UTC or Asia/Kolkata around the time of
// writing, change and clear them, and now and then hold what the policy
// refuses (applied in no part). For each the soak keeps when its write
// began, when it was acknowledged, and when it saw it applied: the
// applier's group committed past it (the applier writes to Redis, then
// commits). The check reads the policy as written, the records as the soak
// wrote them and the output contract, and shares no code with the engine.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/capping"
)

// tUserLimits is kafka.topics.user_limits (compacted, as the docs ask).
const tUserLimits = "capper-user-limits"

// userApplyBound is the documented bound: a record is stored in Redis
// within it of its acknowledgement, and every decision after that reads
// it.
const userApplyBound = 2 * time.Second

// userFaultGlow: how long after a fault ends the applier may still be
// catching up (the retries' backoff, its group's rebalance after a worker
// came back), and a decision's script may still run late.
const userFaultGlow = 30 * time.Second

// A decision's capper-decided-at is taken when its attempt begins; its
// script runs a little later (the batch's call: userLead), or, in a Redis
// outage, as late as the stalled server runs what was queued (the soak's
// stalls last at most 9 s; a retry of the call within the attempt is sent
// later: userStallLead). A record written that long after a decision may
// have decided it.
const (
	userLead      = time.Second
	userStallLead = 15 * time.Second
)

// userLimitsYAML is the policies' user_limits section (both versions): a
// tier of 1 send in any 2 minutes, one of 1 push in 3 minutes and 2 sends
// a minute (deferred when full), channels counted over 2 minutes, and
// snoozes that end more than a minute after an intent's first deferral
// cancel it.
const userLimitsYAML = `user_limits:
  tiers:
    - name: fewer
      limits:
        - {name: f-2m, window: 2m, max: 1}
    - name: light
      limits:
        - {name: l-push, window: 3m, max: 1, where: {channels: [push]}}
        - {name: l-1m, window: 1m, max: 2, on_cap: defer, max_defer: 1m}
  channels: [email, push, sms]
  channel_window: 2m
  max_per_channel: 3
  max_defer: 1m
`

// userZones are the zones quiet hours are set in: the policy's (UTC, also
// an intent's "UTC") and the workload's other one.
var userZones = []string{"UTC", "Asia/Kolkata"}

// userState is one user's limits as a record sets them.
type userState struct {
	snoozeUntil    time.Time
	snoozeChannels []string // none: every channel
	tier           string
	channels       map[string]int // channel: at most that many per channel_window (0: off)
	quiet          *userQuiet
}

// userQuiet is a user's quiet hours, minutes after their local midnight
// (to before from spans midnight).
type userQuiet struct{ from, to int }

func (q userQuiet) holds(minute int) bool {
	if q.from < q.to {
		return minute >= q.from && minute < q.to
	}
	return minute >= q.from || minute < q.to
}

func hhmm(m int) string { return fmt.Sprintf("%02d:%02d", m/60, m%60) }

// record is the user-limits topic's record of s (docs/reference/event-contract.md).
func (s userState) record(user uint64, at time.Time) []byte {
	v := map[string]any{"user_id": user, "updated_at": at.UTC().Format(time.RFC3339)}
	if !s.snoozeUntil.IsZero() {
		sn := map[string]any{"until": s.snoozeUntil.UTC().Format(time.RFC3339)}
		if len(s.snoozeChannels) > 0 {
			sn["channels"] = s.snoozeChannels
		}
		v["snooze"] = sn
	}
	if s.tier != "" {
		v["tier"] = s.tier
	}
	if len(s.channels) > 0 {
		v["channels"] = s.channels
	}
	if s.quiet != nil {
		v["quiet_hours"] = map[string]string{"from": hhmm(s.quiet.from), "to": hhmm(s.quiet.to)}
	}
	b, _ := json.Marshal(v)
	return b
}

// parseUserRecord reads a record (as `capper user show --json` prints it)
// back into a userState.
func parseUserRecord(b []byte) (userState, error) {
	var v struct {
		Snooze *struct {
			Until    time.Time `json:"until"`
			Channels []string  `json:"channels"`
		} `json:"snooze"`
		Tier       string                     `json:"tier"`
		Channels   map[string]int             `json:"channels"`
		QuietHours *struct{ From, To string } `json:"quiet_hours"`
	}
	var s userState
	if err := json.Unmarshal(b, &v); err != nil {
		return s, err
	}
	if v.Snooze != nil {
		s.snoozeUntil, s.snoozeChannels = v.Snooze.Until, v.Snooze.Channels
	}
	s.tier, s.channels = v.Tier, v.Channels
	if q := v.QuietHours; q != nil {
		minute := func(hm string) (int, error) {
			t, err := time.Parse("15:04", hm)
			return t.Hour()*60 + t.Minute(), err
		}
		from, err1 := minute(q.From)
		to, err2 := minute(q.To)
		if err1 != nil || err2 != nil {
			return s, fmt.Errorf("quiet_hours %q-%q", q.From, q.To)
		}
		s.quiet = &userQuiet{from, to}
	}
	return s, nil
}

// String is s for a report.
func (s userState) String() string {
	var parts []string
	if !s.snoozeUntil.IsZero() {
		ch := "every channel"
		if len(s.snoozeChannels) > 0 {
			ch = strings.Join(s.snoozeChannels, ",")
		}
		parts = append(parts, fmt.Sprintf("snooze %s until %s", ch, s.snoozeUntil.UTC().Format(time.TimeOnly)))
	}
	if s.tier != "" {
		parts = append(parts, "tier "+s.tier)
	}
	for _, c := range slices.Sorted(func(yield func(string) bool) {
		for c := range s.channels {
			if !yield(c) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%s max %d", c, s.channels[c]))
	}
	if s.quiet != nil {
		parts = append(parts, fmt.Sprintf("quiet %s-%s", hhmm(s.quiet.from), hhmm(s.quiet.to)))
	}
	if len(parts) == 0 {
		return "no limits"
	}
	return strings.Join(parts, ", ")
}

// equal compares two states as the topic's record says them.
func (s userState) equal(o userState) bool {
	sc := func(cs []string) []string { return slices.Sorted(slices.Values(cs)) }
	qe := s.quiet == nil && o.quiet == nil || s.quiet != nil && o.quiet != nil && *s.quiet == *o.quiet
	return s.snoozeUntil.Equal(o.snoozeUntil) && slices.Equal(sc(s.snoozeChannels), sc(o.snoozeChannels)) && s.tier == o.tier &&
		len(s.channels) == len(o.channels) && qe && func() bool {
		for c, m := range s.channels {
			if n, ok := o.channels[c]; !ok || n != m {
				return false
			}
		}
		return true
	}()
}

// userStep is one record the soak writes: when (from the start of
// traffic), for whom, what kind, and what was drawn for it; its limits are
// made when it is written (a snooze's end and quiet hours are around then).
type userStep struct {
	at       time.Duration
	user     uint64
	kind     string
	length   time.Duration // a snooze's
	channels []string      // a snooze's channels (none: every one)
	tier     string
	max      map[string]int
	zone     string // quiet hours' ("": none)
	refusal  int    // which refused record
}

// Kinds of records: every user's first is one of userFirst (in turn, so
// that each kind is written), later ones any of userLater.
var (
	userFirst = []string{"snooze-short", "snooze-long", "tier", "channels", "quiet", "mixed", "snooze-short", "channels", "tier", "refused",
		"mixed", "tier", "quiet"}
	userLater = []string{"snooze-short", "snooze-long", "tier", "channels", "quiet", "mixed", "clear", "clear", "refused"}
)

// userRecords is how many users the soak writes records for.
const userRecords = 60

// userPlan draws the records of a run (its own stream of the seed: the
// workload and the faults are what they were): userRecords users among
// the busiest (16 of ids 1-24, the rest of 1-120: the segments' caps let
// few deliveries through to each), each with 1 to 3 records 6 to 14 s
// apart, the first within the first 40% of the traffic, none in its last
// second.
func userPlan(seed uint64, traffic time.Duration) []userStep {
	rng := rand.New(rand.NewPCG(seed, 0x05e5))
	chosen := map[uint64]bool{}
	var us []uint64
	for len(us) < userRecords {
		hi := 120
		if len(us) < 16 {
			hi = 24
		}
		if u := uint64(1 + rng.IntN(hi)); !chosen[u] {
			chosen[u] = true
			us = append(us, u)
		}
	}
	var out []userStep
	last := traffic - time.Second
	for i, u := range us {
		at := 500*time.Millisecond + time.Duration(rng.Int64N(int64(traffic*4/10)))
		n := 1 + rng.IntN(3)
		for k := 0; k < n && at < last; k++ {
			kind := userFirst[i%len(userFirst)]
			if k > 0 {
				kind = userLater[rng.IntN(len(userLater))]
			}
			out = append(out, drawUserStep(rng, at, u, kind))
			at += 6*time.Second + time.Duration(rng.Int64N(int64(8*time.Second)))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

func drawUserStep(rng *rand.Rand, at time.Duration, u uint64, kind string) userStep {
	s := userStep{at: at, user: u, kind: kind}
	snoozed := [][]string{nil, nil, {"push"}, {"email", "sms"}, {"inapp"}, {"push", "inapp"}}
	maxes := func() map[string]int {
		m := map[string]int{}
		for len(m) == 0 {
			for _, c := range []string{"email", "push", "sms"} {
				if rng.IntN(2) == 0 {
					m[c] = rng.IntN(4)
				}
			}
		}
		return m
	}
	switch kind {
	case "snooze-short": // ends within max_defer: its intents come back at its end
		s.length, s.channels = time.Duration(8+rng.IntN(38))*time.Second, snoozed[rng.IntN(len(snoozed))]
	case "snooze-long": // ends past max_defer: its intents are cancelled
		s.length, s.channels = time.Duration(75+rng.IntN(76))*time.Second, snoozed[rng.IntN(len(snoozed))]
	case "tier":
		s.tier = []string{"fewer", "light"}[rng.IntN(2)]
	case "channels":
		s.max = maxes()
	case "quiet":
		s.zone = userZones[rng.IntN(len(userZones))]
	case "mixed":
		s.tier, s.max = []string{"fewer", "light"}[rng.IntN(2)], maxes()
		if rng.IntN(2) == 0 {
			s.zone = userZones[rng.IntN(len(userZones))]
		}
	case "refused":
		s.refusal = rng.IntN(3)
	}
	return s
}

// state is the step's limits written at now, and whether the policy
// refuses them (nothing of the record is applied). Quiet hours start a
// minute before now's local minute and end one or two minutes after it
// (within 90 s): the intents they hold come back in the drain.
func (s userStep) state(now time.Time) (userState, bool) {
	var st userState
	switch s.kind {
	case "snooze-short", "snooze-long":
		st.snoozeUntil, st.snoozeChannels = now.Truncate(time.Second).Add(s.length), s.channels
	case "refused":
		switch s.refusal {
		case 0:
			st.channels = map[string]int{"inapp": 1} // not a channel users may turn down
		case 1:
			st.tier = "most" // not a tier of the policy
		default:
			st.channels = map[string]int{"push": 9} // above max_per_channel
		}
		return st, true
	}
	st.tier = s.tier
	if len(s.max) > 0 {
		st.channels = s.max
	}
	if s.zone != "" {
		loc, err := time.LoadLocation(s.zone)
		if err != nil {
			panic(err)
		}
		l := now.In(loc)
		m := l.Hour()*60 + l.Minute()
		to := m + 1
		if l.Second() >= 30 {
			to++
		}
		st.quiet = &userQuiet{(m + 1439) % 1440, to % 1440}
	}
	return st, false
}

// userWrite is a record the soak wrote, and when: its write began (start),
// was acknowledged (acked; zero: never) and was seen applied (applied: the
// applier's group had committed past its offset; zero: never seen).
type userWrite struct {
	user      uint64
	kind      string
	state     userState
	refused   bool // the policy refuses it: it changes nothing
	value     []byte
	partition int
	offset    int64
	start     time.Time
	acked     time.Time
	applied   time.Time
	zone      string // its quiet hours' zone, for a report
}

// settled is when w's limits are in force for sure (its acknowledgement
// plus the apply bound, or when it was seen applied if later), and
// whether they ever are.
func (w userWrite) settled() (time.Time, bool) {
	if w.acked.IsZero() || w.applied.IsZero() {
		return time.Time{}, false
	}
	at := w.acked.Add(userApplyBound)
	if w.applied.After(at) {
		at = w.applied
	}
	return at, true
}

func (w userWrite) String() string {
	s := fmt.Sprintf("%s %s/%d/%d %s (%s), written %s", w.kind, tUserLimits, w.partition, w.offset, w.state, w.zone,
		w.start.UTC().Format("15:04:05.000"))
	if w.refused {
		s += ", refused by the policy"
	}
	if !w.acked.IsZero() {
		s += ", acknowledged " + w.acked.UTC().Format("15:04:05.000")
	}
	if !w.applied.IsZero() {
		s += ", seen applied " + w.applied.UTC().Format("15:04:05.000")
	}
	return s
}

// userWriter writes a run's records (in time order, one at a time,
// retrying through a broker restart) and follows the applier's group's
// commits.
type userWriter struct {
	addr  string
	group string // the applier's group, <group_id>-user-limits
	mu    sync.Mutex
	ws    []*userWrite
}

// run writes the steps, each at t0 plus its time (or as soon after as the
// one before it is acknowledged), until ctx ends.
func (uw *userWriter) run(ctx context.Context, t0 time.Time, steps []userStep) {
	c := &kafka.Client{Addr: kafka.TCP(uw.addr), Timeout: 3 * time.Second}
	parts := make([]int, partitions)
	for i := range parts {
		parts[i] = i
	}
	for _, s := range steps {
		sleep(ctx, time.Until(t0.Add(s.at)))
		if ctx.Err() != nil {
			return
		}
		now := time.Now()
		st, refused := s.state(now)
		w := &userWrite{user: s.user, kind: s.kind, state: st, refused: refused, start: now, value: st.record(s.user, now), zone: s.zone}
		key := []byte(strconv.FormatUint(s.user, 10))
		w.partition = (&kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: key}, parts...)
		uw.mu.Lock()
		uw.ws = append(uw.ws, w)
		uw.mu.Unlock()
		for ctx.Err() == nil {
			resp, err := c.Produce(ctx, &kafka.ProduceRequest{Topic: tUserLimits, Partition: w.partition, RequiredAcks: kafka.RequireAll,
				Records: kafka.NewRecordReader(kafka.Record{Key: kafka.NewBytes(key), Value: kafka.NewBytes(w.value), Time: now})})
			if err == nil {
				err = resp.Error
			}
			if err == nil {
				uw.mu.Lock()
				w.offset, w.acked = resp.BaseOffset, time.Now()
				uw.mu.Unlock()
				break
			}
			sleep(ctx, 200*time.Millisecond)
		}
	}
}

// follow notes, every 100 ms until ctx ends, the records the applier's
// group has committed past: applied in Redis by then.
func (uw *userWriter) follow(ctx context.Context) {
	c := &kafka.Client{Addr: kafka.TCP(uw.addr), Timeout: 2 * time.Second}
	parts := make([]int, partitions)
	for i := range parts {
		parts[i] = i
	}
	for ctx.Err() == nil {
		sleep(ctx, 100*time.Millisecond)
		uw.mu.Lock()
		pending := slices.ContainsFunc(uw.ws, func(w *userWrite) bool { return !w.acked.IsZero() && w.applied.IsZero() })
		uw.mu.Unlock()
		if !pending {
			continue
		}
		res, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: uw.group, Topics: map[string][]int{tUserLimits: parts}})
		if err != nil || res.Error != nil {
			continue
		}
		now := time.Now()
		committed := map[int]int64{}
		for _, p := range res.Topics[tUserLimits] {
			if p.Error == nil {
				committed[p.Partition] = p.CommittedOffset
			}
		}
		uw.mu.Lock()
		for _, w := range uw.ws {
			if !w.acked.IsZero() && w.applied.IsZero() && committed[w.partition] > w.offset {
				w.applied = now
			}
		}
		uw.mu.Unlock()
	}
}

// writes are the records written so far.
func (uw *userWriter) writes() []userWrite {
	uw.mu.Lock()
	defer uw.mu.Unlock()
	out := make([]userWrite, 0, len(uw.ws))
	for _, w := range uw.ws {
		out = append(out, *w)
	}
	return out
}

// hasUsers reports whether the binary has users' own limits (`capper
// user`): an older build, run through CAPPER_SOAK_BIN, has not.
func hasUsers(bin string) bool { return exec.Command(bin, "user", "--help").Run() == nil }

// userShown is a user's limits as `capper user show --json` prints them
// (what Redis holds), or why not.
type userShown struct {
	state userState
	err   error
}

// showUsers reads every user's limits at the end through the binary.
func showUsers(bin, config string, users []uint64) map[uint64]userShown {
	out := map[uint64]userShown{}
	for _, u := range users {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		b, err := exec.CommandContext(ctx, bin, "user", "show", strconv.FormatUint(u, 10), "--json", "--config", config).Output()
		cancel()
		var s userShown
		if err != nil {
			s.err = fmt.Errorf("capper user show %d: %v", u, err)
		} else if s.state, err = parseUserRecord(b); err != nil {
			s.err = fmt.Errorf("capper user show %d printed %q: %v", u, b, err)
		}
		out[u] = s
	}
	return out
}

// stateAt is the state of a user's records (ws, in write order) in force
// for a decision at t: the latest record settled by t, known false when
// none is; ambiguous when a record's write began less than userLead after
// t (userStallLead in a Redis outage: stalls) and it settled after t
// (either state may have decided). A refused record changes nothing.
func stateAt(ws []userWrite, t time.Time, stalls []downWindow) (st userState, known, ambiguous bool) {
	for _, w := range ws {
		if w.refused {
			continue
		}
		lead := userLead
		if slices.ContainsFunc(stalls, func(d downWindow) bool { return !w.start.Before(d.from) && !w.start.After(d.to) }) {
			lead = userStallLead
		}
		if t.Before(w.start.Add(-lead)) {
			continue // written later
		}
		at, ok := w.settled()
		if !ok || t.Before(at) {
			ambiguous = true
			continue
		}
		st, known = w.state, true
	}
	if ambiguous {
		return userState{}, false, true
	}
	return st, known, false
}

// tierOf is the tier named name of rules.
func tierOf(rules capping.Rules, name string) (capping.UserTier, bool) {
	if rules.Users != nil {
		for _, t := range rules.Users.Tiers {
			if t.Name == name {
				return t, true
			}
		}
	}
	return capping.UserTier{}, false
}

// countBefore counts the sends of list decided at or before s (the same
// time: before it in its batch) and after from that match.
func countBefore(list []audit.Send, s audit.Send, from time.Time, match func(audit.Send) bool) int {
	n := 0
	for _, o := range list {
		before := o.At.Before(s.At) || o.At.Equal(s.At) && o.Seq <= s.Seq
		if before && o.At.After(from) && match(o) {
			n++
		}
	}
	return n
}

// checkUserLimits: no delivery to a user broke a limit of theirs in force
// when it was decided (capper-decided-at). A record is in force once it
// settled: acknowledged plus the apply bound (2 s), or seen applied when
// that was later (a fault: Redis down, the applier's group rebalancing;
// the bound itself is checked apart, outside faults). A delivery decided
// between the start of a record's write (less userLead, or userStallLead
// when the write began in a Redis outage, stalls: its script may have run
// that much later) and its settling is ambiguous (either state may have
// decided it): counted, not judged. A record the policy refuses changes
// nothing. Under the limits in force:
//   - snooze: no delivery of a snoozed channel (none listed: every one)
//     decided before its end;
//   - quiet hours: no delivery decided inside them, in the intent's
//     time_zone (else the policy's);
//   - a channel's max: none delivered at 0; else at most max deliveries of
//     the channel in the channel_window ending at each one;
//   - a tier: at most each limit's max of the deliveries it matches in
//     its window ending at each one it matches.
//
// The windows count every delivery of the user that counts, before the
// record too, as the cap check does (internal/audit): allowed and not
// failed open (exempt ones are not), an id once (its first delivery; one
// read only as a duplicate counts, a second later, and is not judged),
// honoured bypasses counted but not judged, refunded ids neither (a
// refund takes the send out). Refusals by a user's limit (capper-limit
// user-tier/<tier>/<limit>, user-channel/<channel>; never cached, each a
// script call) must be explained by the limits in force: the limit is the
// user's, and its window may have been full; a cancellation
// snooze-too-long must come from a snooze of its channel ending more than
// max_defer after its first deferral. The users' limits Redis holds at the
// end (shown) must be their latest record's; a record seen applied later
// than the bound after its acknowledgement (never seen applied: counted)
// is a problem unless it was written or applied in a span the applier may
// lag in (lagging: a fault and the recovery after it, the workers' start).
// deferred are the delay tiers' records, for the counts of what users'
// limits held.
func checkUserLimits(r *report, o outputs, versions map[string]capping.Rules, refunded map[uint64]map[string]bool,
	writes []userWrite, shown map[uint64]userShown, deferred []kafka.Message, lagging, stalls []downWindow) {
	const c = "user limits"
	byUser := map[uint64][]userWrite{}
	for _, w := range writes {
		byUser[w.user] = append(byUser[w.user], w)
		r.counts["user limits: records written"]++
		if w.refused {
			r.counts["user limits: records the policy refuses"]++
		}
	}
	for _, ws := range byUser {
		slices.SortStableFunc(ws, func(a, b userWrite) int { return a.start.Compare(b.start) })
	}
	history := func(u uint64) string {
		var b strings.Builder
		for _, w := range byUser[u] {
			fmt.Fprintf(&b, "\n    %s", w)
		}
		return b.String()
	}

	sends, err := audit.Sends(o.delivered())
	if err != nil {
		r.add("read", "%v", err)
		return
	}
	type key struct {
		user uint64
		id   string
	}
	first := map[key]audit.Send{}
	for _, s := range sends {
		if _, ok := byUser[s.User]; !ok {
			continue
		}
		k := key{s.User, s.ID}
		if f, ok := first[k]; !ok || f.Duplicate && !s.Duplicate || f.Duplicate == s.Duplicate && s.At.Before(f.At) {
			first[k] = s
		}
	}
	all := map[uint64][]audit.Send{}     // every first delivery
	counted := map[uint64][]audit.Send{} // those not refunded
	for _, s := range first {
		if s.Duplicate {
			s.At = s.At.Add(time.Second - time.Millisecond) // as the cap check takes it
		}
		all[s.User] = append(all[s.User], s)
		if !refunded[s.User][s.ID] {
			counted[s.User] = append(counted[s.User], s)
		}
	}
	order := func(a, b audit.Send) int {
		if x := a.At.Compare(b.At); x != 0 {
			return x
		}
		return a.Seq - b.Seq
	}
	users := make([]uint64, 0, len(byUser))
	for u := range byUser {
		users = append(users, u)
		slices.SortFunc(all[u], order)
		slices.SortFunc(counted[u], order)
	}
	slices.Sort(users)

	for _, u := range users {
		for _, s := range all[u] {
			if s.Duplicate {
				continue
			}
			if s.Bypass {
				r.counts["user limits: honoured bypasses (counted and not judged)"]++
				continue
			}
			rules, ok := versions[s.Policy]
			if !ok || rules.Users == nil {
				continue
			}
			st, known, amb := stateAt(byUser[u], s.At, stalls)
			if amb {
				r.counts["user limits: deliveries ambiguous (a record of the user settling)"]++
				continue
			}
			if !known {
				continue // before the user's first record
			}
			r.counts["user limits: deliveries judged"]++
			what := fmt.Sprintf("user %d: %s %q (campaign %s) decided at %s", u, s.Channel, s.ID, s.Campaign, s.At.UTC().Format(timeLayout))
			bad := func(format string, args ...any) {
				r.add(c, "%s: %s; in force: %s; the user's records:%s", what, fmt.Sprintf(format, args...), st, history(u))
			}
			isRefunded := refunded[u][s.ID]
			if !st.snoozeUntil.IsZero() {
				r.counts["user limits: deliveries judged, with a snooze set"]++
				if s.At.Before(st.snoozeUntil) && (len(st.snoozeChannels) == 0 || slices.Contains(st.snoozeChannels, s.Channel)) {
					bad("delivered while snoozed until %s", st.snoozeUntil.UTC().Format(time.TimeOnly))
				}
			}
			if q := st.quiet; q != nil {
				r.counts["user limits: deliveries judged, with quiet hours"]++
				loc := s.TimeZone
				if loc == nil {
					loc = rules.TimeZone
				}
				l := s.At.In(loc)
				if q.holds(l.Hour()*60 + l.Minute()) {
					bad("delivered at %s in %s, inside the user's quiet hours", l.Format("15:04:05"), loc)
				}
			}
			if m, ok := st.channels[s.Channel]; ok {
				r.counts["user limits: deliveries judged, of a channel with a max"]++
				w := rules.Users.ChannelWindow
				switch {
				case m == 0:
					bad("channel %s is off", s.Channel)
				case !isRefunded:
					n := countBefore(counted[u], s, s.At.Add(-w), func(o audit.Send) bool { return o.Channel == s.Channel })
					if n > m {
						bad("the %d-th %s delivery in the %s ending then, the user's max is %d", n, s.Channel, w, m)
					}
				}
			}
			if st.tier != "" {
				r.counts["user limits: deliveries judged, with a tier"]++
				t, ok := tierOf(rules, st.tier)
				if !ok {
					bad("tier %q is not one of the policy's", st.tier)
				}
				for _, l := range t.Limits {
					if isRefunded || l.Calendar != capping.None || !audit.Matches(rules, l.Where, s) {
						continue
					}
					n := countBefore(counted[u], s, s.At.Add(-l.Window), func(o audit.Send) bool {
						return audit.Matches(rules, l.Where, o) && (l.Per != capping.PerCampaign || o.Campaign == s.Campaign)
					})
					if n > l.Max {
						bad("the %d-th delivery in the %s ending then that tier %s's limit %q counts, it allows %d", n, l.Window, st.tier, l.Name, l.Max)
					}
				}
			}
		}
	}

	// Refusals by a user's limit.
	refusals, err := audit.Refusals(o.suppressed)
	if err != nil {
		r.add("read", "%v", err)
		return
	}
	for _, f := range refusals {
		if !strings.HasPrefix(f.Limit, "user-") {
			continue
		}
		r.counts["user limits: refusals by a user's limit"]++
		r.counts["user limits: refusals by a user's limit, "+strings.SplitN(f.Limit, "/", 2)[0]]++
		rules, ok := versions[f.Policy]
		if !ok || rules.Users == nil {
			continue
		}
		st, known, amb := stateAt(byUser[f.User], f.At, stalls)
		if amb {
			r.counts["user limits: refusals and cancellations ambiguous (a record of the user settling)"]++
			continue
		}
		bad := func(format string, args ...any) {
			r.add(c, "user %d: %s %q capped by %q at %s: %s; in force: %s; the user's records:%s", f.User, f.Channel, f.ID, f.Limit,
				f.At.UTC().Format(timeLayout), fmt.Sprintf(format, args...), st, history(f.User))
		}
		if !known {
			bad("no record of the user was in force")
			continue
		}
		// maybe: the sends that may have been in the window (a second
		// wider, refunded ones too), as the refusal check counts them.
		maybe := func(w time.Duration, match func(audit.Send) bool) int {
			n := 0
			for _, o := range all[f.User] {
				if o.ID != f.ID && o.At.After(f.At.Add(-w-time.Second)) && !o.At.After(f.At) && match(o) {
					n++
				}
			}
			return n
		}
		switch rest := strings.TrimPrefix(f.Limit, "user-"); {
		case strings.HasPrefix(rest, "channel/"):
			ch := strings.TrimPrefix(rest, "channel/")
			m, ok := st.channels[ch]
			switch {
			case !ok || ch != f.Channel:
				bad("the user's limits in force have no max for %s", f.Channel)
			case m > 0:
				if n := maybe(rules.Users.ChannelWindow, func(o audit.Send) bool { return o.Channel == ch }); n < m {
					bad("its window held %d %s deliveries at most, the user's max is %d", n, ch, m)
				}
			}
		case strings.HasPrefix(rest, "tier/"):
			tl := strings.SplitN(strings.TrimPrefix(rest, "tier/"), "/", 2)
			t, ok := tierOf(rules, tl[0])
			var l *capping.Limit
			if ok && len(tl) == 2 {
				if i := slices.IndexFunc(t.Limits, func(l capping.Limit) bool { return l.Name == tl[1] }); i >= 0 {
					l = &t.Limits[i]
				}
			}
			switch {
			case st.tier != tl[0] || l == nil:
				bad("not a limit of the user's tier in force")
			case !audit.Matches(rules, l.Where, f.Send):
				bad("the limit does not apply to it")
			case l.Calendar == capping.None:
				if n := maybe(l.Window, func(o audit.Send) bool {
					return audit.Matches(rules, l.Where, o) && (l.Per != capping.PerCampaign || o.Campaign == f.Campaign)
				}); n < l.Max {
					bad("its window held %d deliveries at most, the limit allows %d", n, l.Max)
				}
			}
		default:
			bad("not a limit of users' own")
		}
	}

	// Cancellations snooze-too-long.
	for _, m := range o.suppressed {
		if header(m, hDecision) != "cancelled" || header(m, "capper-reason") != "snooze-too-long" {
			continue
		}
		r.counts["user limits: cancelled snooze-too-long"]++
		var v struct {
			Channel string          `json:"channel"`
			UserID  json.RawMessage `json:"user_id"`
		}
		at, err := time.Parse(timeLayout, header(m, hDecidedAt))
		err2 := json.Unmarshal(m.Value, &v)
		var uid uint64
		if err2 == nil {
			uid, err2 = strconv.ParseUint(strings.Trim(string(v.UserID), `"`), 10, 64)
		}
		if err != nil || err2 != nil {
			r.add(c, "%s cancelled snooze-too-long: decided-at %q (%v), user %s (%v)", header(m, hSource), header(m, hDecidedAt), err, v.UserID, err2)
			continue
		}
		since := at
		if ds := header(m, hDeferredSince); ds != "" {
			if t, err := time.Parse(timeLayout, ds); err == nil {
				since = t
			}
		}
		rules, ok := versions[header(m, hPolicy)]
		st, known, amb := stateAt(byUser[uid], at, stalls)
		switch {
		case amb:
			r.counts["user limits: refusals and cancellations ambiguous (a record of the user settling)"]++
		case !known || st.snoozeUntil.IsZero() || !at.Before(st.snoozeUntil.Add(time.Second)) ||
			len(st.snoozeChannels) > 0 && !slices.Contains(st.snoozeChannels, v.Channel):
			r.add(c, "user %d: %s %s cancelled snooze-too-long at %s, but no snooze of its channel was in force (in force: %s); the user's records:%s",
				uid, v.Channel, header(m, hSource), at.UTC().Format(timeLayout), st, history(uid))
		case ok && rules.Users != nil && st.snoozeUntil.Sub(since) <= rules.Users.MaxDefer-time.Second:
			r.add(c, "user %d: %s %s cancelled snooze-too-long at %s (first deferred %s), but the snooze ends %s, within max_defer %s",
				uid, v.Channel, header(m, hSource), at.UTC().Format(timeLayout), since.UTC().Format(timeLayout),
				st.snoozeUntil.UTC().Format(time.TimeOnly), rules.Users.MaxDefer)
		}
	}
	for _, m := range deferred {
		switch reason := header(m, "capper-reason"); reason {
		case "snoozed", "user-quiet-hours":
			r.counts["user limits: deferrals (tier records) "+reason]++
		case "cap":
			if strings.HasPrefix(header(m, "capper-limit"), "user-") {
				r.counts["user limits: deferrals (tier records) by a user's limit"]++
			}
		}
	}

	// What Redis holds at the end: the latest record's limits.
	if shown != nil {
		for _, u := range users {
			var want userState
			for _, w := range byUser[u] {
				if !w.refused && !w.acked.IsZero() {
					want = w.state
				}
			}
			got := shown[u]
			switch {
			case got.err != nil:
				r.add("user limits at the end", "user %d: %v", u, got.err)
			case !got.state.equal(want):
				r.add("user limits at the end", "user %d: Redis holds %s, the latest record says %s; the user's records:%s", u, got.state, want, history(u))
			}
		}
	}

	// The apply bound, outside faults.
	most := time.Duration(0)
	for _, w := range writes {
		switch {
		case w.acked.IsZero():
			r.add("user limits apply", "user %d's record never acknowledged: %s", w.user, w)
			continue
		case w.applied.IsZero():
			// Its group never committed past it: a commit that failed is
			// covered by the next one only (docs: the applier), and a
			// partition's last record may have none. Every later decision
			// of its user is ambiguous; the state at the end is checked.
			r.counts["user limits: records never seen applied (their user's later deliveries ambiguous)"]++
			continue
		}
		lag := w.applied.Sub(w.acked)
		most = max(most, lag)
		if lag <= userApplyBound {
			continue
		}
		if slices.ContainsFunc(lagging, func(f downWindow) bool { return !f.from.After(w.applied) && !f.to.Before(w.start) }) {
			r.counts["user limits: records applied past the bound in or after a fault"]++
			continue
		}
		r.add("user limits apply", "user %d's record seen applied %s after its acknowledgement, no fault near: %s", w.user, lag.Round(time.Millisecond), w)
	}
	r.counts["user limits: longest apply seen (ms)"] = int(most.Milliseconds())
}
