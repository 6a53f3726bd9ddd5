package demo

// The report's send pacing table: each lane's campaigns, their waits and
// releases.

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
)

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
	if t := s.throttle; t.done {
		w.printf("throttle feedback: then %s, a push to each member, while FCM accepts %d a second for %s (at least %s, and until the budget's rate has followed it), answering the rest throttled (%d of its %d answers, each handed back to capper with a delivery status that carries the push, and held again ahead of its lane): %s's effective rate fell to %.0f/s, within 10%% of %d/s %s after the first throttled answer, and was back within 10%% of %d/s %s after FCM accepted that; FCM accepted %d of the %d pushes delivered once, none twice\n",
			campNews, provLow, secs(t.lowFor), secs(provLowFor), t.throttled, t.answered, budgetName, t.lowest, provLow, secs(t.downIn), paceRate, secs(t.backIn), t.once, t.members)
	}
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
