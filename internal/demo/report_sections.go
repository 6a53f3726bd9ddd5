package demo

// The sections' report: each section's records read back, counted per
// campaign, and printed in the blast's table style.

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
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
