package demo

// The report's users' own limits table: each group of readers and what
// reached them.

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

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
