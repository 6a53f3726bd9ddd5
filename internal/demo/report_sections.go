package demo

// The sections' report: each section's records read back, counted per
// campaign, and printed in the blast's table style.

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
)

// record is what the sections' report and the audit read of an output
// record.
type record struct {
	campaign, id                   string
	user                           uint64
	decision, reason, heldFor, lim string
	source                         string
	waited                         bool // came through a delay tier (capper-deferred-count)
	at                             time.Time
	// Send pacing: the budget/lane it was held in (capper-lane), when
	// the budget released it and how long it waited (capper-waited-ms).
	lane      string
	released  time.Time
	waitedFor time.Duration
}

// readRecord reads an output record's headers, and its value's id, user
// and campaign (the value is the intent's, untouched).
func readRecord(m kafka.Message) record {
	r := record{source: headerOf(m, "capper-source"), decision: headerOf(m, "capper-decision"),
		reason: headerOf(m, "capper-reason"), heldFor: headerOf(m, "capper-held-for"), lim: headerOf(m, "capper-limit"),
		waited: headerOf(m, "capper-deferred-count") != ""}
	r.at, _ = time.Parse(time.RFC3339Nano, headerOf(m, "capper-decided-at"))
	r.lane = headerOf(m, "capper-lane")
	r.released, _ = time.Parse(time.RFC3339Nano, headerOf(m, "capper-released-at"))
	if ms, err := strconv.ParseInt(headerOf(m, "capper-waited-ms"), 10, 64); err == nil {
		r.waitedFor = time.Duration(ms) * time.Millisecond
	}
	r.campaign = jsonString(m.Value, "campaign_id")
	r.id = jsonString(m.Value, "id")
	r.user, _ = strconv.ParseUint(string(m.Key), 10, 64)
	return r
}

// jsonString finds "key":"value" in a compact JSON object (the intents
// the blast and the sections make; enough to tell campaigns apart).
func jsonString(v []byte, key string) string {
	k := []byte(`"` + key + `":"`)
	i := bytes.Index(v, k)
	if i < 0 {
		return ""
	}
	v = v[i+len(k):]
	j := bytes.IndexByte(v, '"')
	if j < 0 {
		return ""
	}
	return string(v[:j])
}

// campaignStats are a campaign's intents as they ended.
type campaignStats struct {
	intents                               int
	delivered, deliveredAfterWait, capped int
	held, expired, cancelled              int
	cancelledFromTiers                    int
	waited                                int             // inputs that went through a delay tier
	why                                   map[string]int  // a reason they waited: the limit, or quiet-hours
	deliveredTo, heldUsers                map[uint64]bool // users delivered to, users held for a plan
	deliveredAfter                        int             // delivered, decided after the stop was applied
}

// sectionStats counts the sections' campaigns in the outputs.
func sectionStats(o outputs, produced map[string]int, after time.Time) map[string]*campaignStats {
	st := map[string]*campaignStats{}
	get := func(c string) *campaignStats {
		if st[c] == nil {
			st[c] = &campaignStats{intents: produced[c], why: map[string]int{}, deliveredTo: map[uint64]bool{}, heldUsers: map[uint64]bool{}}
		}
		return st[c]
	}
	for c := range produced {
		get(c)
	}
	for _, m := range o.deliveries {
		r := readRecord(m)
		if _, ok := produced[r.campaign]; !ok {
			continue
		}
		c := get(r.campaign)
		c.delivered++
		c.deliveredTo[r.user] = true
		if r.waited {
			c.deliveredAfterWait++
		}
		if !after.IsZero() && r.at.After(after) {
			c.deliveredAfter++
		}
	}
	for _, m := range o.suppressed {
		r := readRecord(m)
		if _, ok := produced[r.campaign]; !ok {
			continue
		}
		c := get(r.campaign)
		switch {
		case r.decision == "cancelled":
			c.cancelled++
			if r.waited {
				c.cancelledFromTiers++
			}
		case r.reason == "defer-expired":
			c.expired++
		case r.heldFor != "":
			c.held++
			c.heldUsers[r.user] = true
		default:
			c.capped++
		}
	}
	first := map[string]bool{}
	for _, m := range o.tiers {
		r := readRecord(m)
		if _, ok := produced[r.campaign]; !ok || first[r.source] {
			continue
		}
		first[r.source] = true
		c := get(r.campaign)
		c.waited++
		why := r.reason
		if r.reason == "cap" && r.lim != "" {
			why = r.lim
		}
		c.why[why]++
	}
	return st
}

// writeSections prints the sections, in the table style of the report.
func (s *sections) writeSections(w *tableWriter, o outputs) {
	st := sectionStats(o, s.produced, s.stopApplied)
	hm := func(t time.Time) string { return t.UTC().Format("15:04") }
	at := func(c string) string { return hm(s.sent[c]) }
	w.printf("\nthe sections: users above the blast's, in four segments the demo adds to the policy (%s, %s, %s, %s), decided by the same worker in the same run\n", segShoppers, segSubscribers, segMembers, segReaders)
	w.printf("the demo's clock (UTC) starts at %s with the blast, runs at the wall clock's pace through send pacing, then skips ahead to %s (the held intents are due) and to %s (cart-rescue's window)\n",
		hm(s.start), hm(s.due), hm(s.planStarts))

	// Campaign plans.
	nl, cart := st[campNewsletter], st[campCart]
	w.printf("\ncampaign plans: %s %s may get one message a day; cart-rescue plans a high-priority push for %s-%s to %d of them\n",
		segShoppers, s.shoppers, hm(s.planStarts), hm(s.planEnds), s.audience.len())
	w.table("time\tcampaign\tpriority\tintents\tdelivered\theld for the plan\tcapped",
		fmt.Sprintf("%s\t%s\tlow\t%d\t%d\t%d\t%d", at(campNewsletter), campNewsletter, nl.intents, nl.delivered, nl.held, nl.capped),
		fmt.Sprintf("%s\t%s\thigh (planned)\t%d\t%d\t%d\t%d", at(campCart), campCart, cart.intents, cart.delivered, cart.held, cart.capped))
	planned, unused := 0, 0
	for u := range cart.deliveredTo {
		if s.audience.has(u) {
			planned++
		}
	}
	for u := range nl.heldUsers {
		if !cart.deliveredTo[u] {
			unused++
		}
	}
	if s.fcfs != nil && s.plan != nil {
		w.printf("planned sends delivered: %d of %d; first come, first served: %d of %d (capper replay --plans on the same %d intents, in memory; with the plan: %d)\n",
			planned, cart.intents, s.fcfs.PlannedDelivered, s.fcfs.Planned, nl.intents+cart.intents, s.plan.PlannedDelivered)
	}
	w.printf("the price: %d newsletters held for a slot the push then did not take (users of the audience it did not go to)\n", unused)

	// Deferral and quiet hours.
	rem, upd := st[campReminders], st[campUpdate]
	w.printf("\ndeferral and quiet hours: %s %s may get a push every 2h (a capped one waits, up to 3h: on_cap: defer), none from 21:00 to 08:00 their time\n",
		segSubscribers, span{s.reminders.from, s.update.to})
	w.table("time\tcampaign\tintents\tdelivered at once\twaited\t(why it waited)\tdelivered after waiting\texpired (past max_defer)",
		fmt.Sprintf("%s\t%s\t%d\t%d\t%d\t%s\t%d\t%d", at(campReminders), campReminders, rem.intents, rem.delivered-rem.deliveredAfterWait, rem.waited, limits(rem.why), rem.deliveredAfterWait, rem.expired),
		fmt.Sprintf("%s\t%s\t%d\t%d\t%d\t%s\t%d\t%d", at(campUpdate), campUpdate, upd.intents, upd.delivered-upd.deliveredAfterWait, upd.waited, limits(upd.why), upd.deliveredAfterWait, upd.expired))
	w.printf("(reminders: 3 to each user, in Berlin; app-update: 1 to each, half in New York, where it is %s; the waiting ones came back at %s)\n",
		s.start.In(mustZone(zoneNight)).Format("15:04"), hm(s.due))

	// Refunds.
	wel, tips := st[campWelcome], st[campTips]
	toRefunded := 0
	for u := range tips.deliveredTo {
		if s.refunded[u] != nil {
			toRefunded++
		}
	}
	w.printf("\nrefunds: %s %s; %d welcome emails fail (delivery status \"failed\"), then a tips email goes to all %d\n",
		segShoppers, s.refund, s.failed, s.refund.len())
	w.table("time\tcampaign\tintents\tdelivered\tcapped",
		fmt.Sprintf("%s\t%s\t%d\t%d\t%d", at(campWelcome), campWelcome, wel.intents, wel.delivered, wel.capped),
		fmt.Sprintf("%s\t%s\t%d\t%d\t%d", at(campTips), campTips, tips.intents, tips.delivered, tips.capped))
	w.printf("refunds applied: %.0f (capper_refunds_total{result=\"applied\"}); %d of the %d tips delivered went to refunded users, into the slots their failed emails gave back\n",
		s.refundsApplied, toRefunded, tips.delivered)

	// Campaign control.
	fl := st[campFlash]
	w.printf("\ncampaign control: flash-sale (2 pushes to each of %s %s) stopped a third of the way through the blast (capper campaign stop: record %s), applied by the worker at %s with %d intents in the input topic still to decide\n",
		segSubscribers, s.flash, s.stopRecord, s.stopApplied.UTC().Format("15:04:05.000"), s.stopBacklog)
	w.table("time\tcampaign\tintents\tdelivered\t(after the stop)\tcancelled\t(from the input)\t(from the delay tiers)",
		fmt.Sprintf("%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d", at(campFlash), campFlash, fl.intents, fl.delivered, fl.deliveredAfter, fl.cancelled, fl.cancelled-fl.cancelledFromTiers, fl.cancelledFromTiers))

	s.writePacing(w, o)
	s.writeUserLimits(w, o)
}

// paceStats are a campaign of the send pacing section as it ended.
type paceStats struct {
	intents, delivered, cancelled int
	held                          int           // records that waited in a lane (capper-lane)
	longest                       time.Duration // the longest capper-waited-ms of its deliveries
	releases                      []time.Time   // its deliveries' capper-released-at
	cancelledHeld                 int           // cancelled after waiting in a lane
	deliveredAfter                int           // delivered, decided after the digest's stop was applied
	latest                        time.Duration // not held: the longest from its making to its decision
}

// paceStatsOf counts the pacing section's campaigns in the outputs.
func (s *sections) paceStatsOf(o outputs) map[string]*paceStats {
	st := map[string]*paceStats{}
	for _, c := range []string{campDigest, campBreaking, campReceipts} {
		st[c] = &paceStats{intents: s.produced[c]}
	}
	for i, set := range [][]kafka.Message{o.deliveries, o.suppressed} {
		for _, m := range set {
			r := readRecord(m)
			c := st[r.campaign]
			if c == nil || !s.members.has(r.user) {
				continue
			}
			if r.lane != "" {
				c.held++
			}
			if i == 1 {
				if r.decision == "cancelled" {
					c.cancelled++
					if r.lane != "" {
						c.cancelledHeld++
					}
				}
				continue
			}
			c.delivered++
			c.longest = max(c.longest, r.waitedFor)
			if !r.released.IsZero() {
				c.releases = append(c.releases, r.released)
			}
			if r.at.After(s.pace.applied) {
				c.deliveredAfter++
			}
			if r.lane == "" {
				c.latest = max(c.latest, r.at.Sub(s.paceMade(r.campaign, r.user)))
			}
		}
	}
	return st
}

// writePacing prints the send pacing section.
func (s *sections) writePacing(w *tableWriter, o outputs) {
	st := s.paceStatsOf(o)
	dg, br, rc := st[campDigest], st[campBreaking], st[campReceipts]
	since := func(t time.Time) string { return fmt.Sprintf("+%.1f s", t.Sub(s.pace.start).Seconds()) }
	secs := func(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
	span := func(c *paceStats) string {
		if len(c.releases) == 0 {
			return "-"
		}
		first, last := slices.MinFunc(c.releases, time.Time.Compare), slices.MaxFunc(c.releases, time.Time.Compare)
		return fmt.Sprintf("%.1f-%.1f s", first.Sub(s.pace.start).Seconds(), last.Sub(s.pace.start).Seconds())
	}
	most := func(c *paceStats) string {
		if len(c.releases) == 0 {
			return "-"
		}
		return strconv.Itoa(mostInOneSecond(c.releases))
	}
	w.printf("\nsend pacing: %s %s get their pushes through FCM (route %s); budget %s paces them: rate %d a second, burst %d, all workers together, lane %s (priority high) before %s\n",
		segMembers, s.members, paceRoute, budgetName, paceRate, paceBurst, laneUrgent, laneBulk)
	w.printf("%s (a push to each) waits in the bulk lane, receipts (transactional) beside it; %s comes at %s, when the bulk lane has released %d; %s is stopped at %s\n",
		campDigest, campBreaking, since(s.pace.breakingAt), paceBreakingAfter, campDigest, since(s.pace.stopAt))
	w.table("campaign\tpriority\tlane\tintents\theld\tdelivered\tcancelled\tlongest wait\tmost releases in 1 s\treleased",
		fmt.Sprintf("%s\tnormal\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s", campDigest, laneBulk, dg.intents, dg.held, dg.delivered, dg.cancelled, secs(dg.longest), most(dg), span(dg)),
		fmt.Sprintf("%s\thigh\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s", campBreaking, laneUrgent, br.intents, br.held, br.delivered, br.cancelled, secs(br.longest), most(br), span(br)),
		fmt.Sprintf("%s\ttransactional\t(none)\t%d\t%d\t%d\t%d\t%s\t%s\t%s", campReceipts, rc.intents, rc.held, rc.delivered, rc.cancelled, secs(rc.longest), most(rc), span(rc)))
	w.printf("(held: waited in its lane, undecided; wait: capper-waited-ms, held to released; released: capper-released-at, after %s came)\n", campDigest)
	if len(br.releases) > 0 {
		first, last := slices.MinFunc(br.releases, time.Time.Compare), slices.MaxFunc(br.releases, time.Time.Compare)
		before, during := 0, 0
		for _, t := range dg.releases {
			switch {
			case t.Before(first):
				before++
			case !t.After(last):
				during++
			}
		}
		w.printf("%s overtook: its %d pushes were released from %s to %s, while the bulk lane, %d digest pushes still held, released %d\n",
			campBreaking, len(br.releases), since(first), since(last), dg.intents-before, during)
	}
	w.printf("%s: never held (exempt: decided at once, and charged to the budget: the lanes wait for them), each decided within %d ms of being produced\n", campReceipts, rc.latest.Milliseconds())
	w.printf("%s stopped (capper campaign stop: record %s), applied by the worker at %s (%s): the %d pushes still held in its lane cancelled, %d delivered after the stop\n",
		campDigest, s.pace.stopRecord, s.pace.applied.UTC().Format("15:04:05.000"), since(s.pace.applied), dg.cancelledHeld, dg.deliveredAfter)
	if all := slices.Concat(dg.releases, br.releases); len(all) > 0 {
		w.printf("the budget: at most %d releases in any one second (rate %d + burst %d = %d); %d releases and %d receipts charged in %s\n",
			mostInOneSecond(all), paceRate, paceBurst, paceRate+paceBurst, len(all), rc.delivered, secs(slices.MaxFunc(all, time.Time.Compare).Sub(s.pace.start)))
	}
}

// ownStats are a group of the users' own limits section as it ended.
type ownStats struct {
	users, intents, delivered int
	whileSnoozed              int // delivered, decided while the snooze was in force
	snoozed                   int // inputs deferred to the snooze's end
	cancelled, fromTiers      int // cancelled for the snooze (snooze-too-long); of them, after waiting in the tiers
	capped                    int // capped by the user's own limit
	most                      int // the most delivered to one user
}

// ownStatsOf counts the readers' outcomes, by group.
func (s *sections) ownStatsOf(o outputs, groups []span) []*ownStats {
	st := make([]*ownStats, len(groups))
	group := func(u uint64) *ownStats {
		for i, g := range groups {
			if g.has(u) {
				return st[i]
			}
		}
		return nil
	}
	for i, g := range groups {
		st[i] = &ownStats{users: g.len(), intents: 4 * g.len()}
	}
	perUser := map[uint64]int{}
	for _, m := range o.deliveries {
		r := readRecord(m)
		g := group(r.user)
		if g == nil || r.campaign != campDeals || headerOf(m, "capper-duplicate") == "true" {
			continue
		}
		g.delivered++
		perUser[r.user]++
		g.most = max(g.most, perUser[r.user])
		if until := s.snoozeOf(r.user); !until.IsZero() && !r.at.Before(s.own.snoozeApplied) && r.at.Before(until) {
			g.whileSnoozed++
		}
	}
	for _, m := range o.suppressed {
		r := readRecord(m)
		g := group(r.user)
		switch {
		case g == nil || r.campaign != campDeals:
		case r.reason == "snooze-too-long":
			g.cancelled++
			if r.waited {
				g.fromTiers++
			}
		case r.decision == "capped" && strings.HasPrefix(r.lim, userTierPrefix):
			g.capped++
		}
	}
	seen := map[string]bool{}
	for _, m := range o.tiers {
		r := readRecord(m)
		if g := group(r.user); g != nil && r.reason == "snoozed" && !seen[r.source] {
			seen[r.source] = true
			g.snoozed++
		}
	}
	return st
}

// writeUserLimits prints the users' own limits section.
func (s *sections) writeUserLimits(w *tableWriter, o outputs) {
	hm := func(t time.Time) string { return t.UTC().Format("15:04") }
	readers := s.readers()
	w.printf("\nusers' own limits: %s %s may get 4 messages a day, no push from 21:00 to 08:00 their time; all in New York (%s when the blast comes), each gets a %s email and push with the blast's first part, and again in its second\n",
		segReaders, readers, s.start.In(mustZone(zoneNight)).Format("15:04"), campDeals)
	w.printf("the policy's user_limits: tier %s (daily 1 in 24h, weekly 3 in 7d); a snooze that ends more than %s after an intent first waited cancels it. Tier %s written to %s before the blast (%d records), applied by the worker at %s; snoozes written mid-blast (%d records), applied at %s, %d intents of the blast still to decide\n",
		tierFewer, shortHours(userMaxDefer), tierFewer, topicUsers, s.own.tierRecords, s.own.tierApplied.UTC().Format("15:04:05.000"),
		s.own.snoozeRecords, s.own.snoozeApplied.UTC().Format("15:04:05.000"), s.own.snoozeBacklog)
	groups := []span{s.snoozeLong, s.snoozeShort, s.fewer, s.plain}
	names := []string{"snoozed for 7 days", "snoozed until " + hm(s.own.shortUntil), "tier " + tierFewer, "none"}
	st := s.ownStatsOf(o, groups)
	rows := make([]string, len(groups))
	for i, g := range st {
		while := "-"
		if i < 2 {
			while = strconv.Itoa(g.whileSnoozed)
		}
		rows[i] = fmt.Sprintf("%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d", names[i], g.users, g.intents, g.delivered, while, g.snoozed, g.cancelled, g.cancelled-g.fromTiers, g.fromTiers, g.capped)
	}
	w.table("user's own limit\tusers\tintents\tdelivered\t(while snoozed)\tdeferred to its end\tcancelled (snooze-too-long)\t(from the input)\t(from the delay tiers)\tcapped by the tier", rows...)
	long, short, fewer, plain := st[0], st[1], st[2], st[3]
	w.printf("snoozed for 7 days: %d delivered while snoozed; %d of the intents it cancelled had waited in the delay tiers (pushes, for the night) and were cancelled when they came due at %s, uncounted\n",
		long.whileSnoozed, long.fromTiers, hm(s.due))
	w.printf("snoozed until %s: %d delivered while snoozed; %d intents that came during the snooze waited for its end (capper-reason snoozed), then went with the rest: %d delivered\n",
		hm(s.own.shortUntil), short.whileSnoozed, short.snoozed, short.delivered)
	w.printf("tier %s: at most %d delivered to a user (%d capped by user-tier/%s/daily), against %d to a reader without limits of their own\n",
		tierFewer, fewer.most, fewer.capped, tierFewer, plain.most)
}

// paceMade is when the pacing section's intent of campaign to user was
// made: the receipts came in two waves, with the digest and with the
// breaking news.
func (s *sections) paceMade(campaign string, user uint64) time.Time {
	switch {
	case campaign == campBreaking:
		return s.pace.breakingAt
	case campaign == campReceipts && (int(user)-s.members.from)%(2*paceReceiptEvery) == 1+paceReceiptEvery:
		return s.pace.breakingAt
	}
	return s.pace.start
}

func mustZone(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		return time.UTC
	}
	return loc
}

// tableWriter prints the report's lines and tables.
type tableWriter struct{ w io.Writer }

func (t *tableWriter) printf(format string, args ...any) { fmt.Fprintf(t.w, format, args...) }

// table prints a header and rows (tab-separated cells) right-aligned, as
// the segment table is.
func (t *tableWriter) table(header string, rows ...string) {
	tw := newTable(t.w)
	fmt.Fprintln(tw, header+"\t")
	for _, r := range rows {
		fmt.Fprintln(tw, r+"\t")
	}
	_ = tw.Flush()
}
