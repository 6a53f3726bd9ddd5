package demo

// The audit's checks of users' own limits: nothing delivered while a user
// was snoozed, and nobody above their tier.

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/kafka"
)

// checkSnoozes: no delivery to a snoozed user was decided while the
// snooze was in force (from when the worker applied it to its end); every
// intent cancelled for its snooze (snooze-too-long) is of a snoozed user,
// decided before the snooze's end, and every intent deferred for it
// (snoozed) is of a snoozed user and waits for the snooze's end
// (capper-not-before). (A decision's time is its batch's, taken before
// its script runs: one timed a little before the snooze was written may
// still have read it.)
func checkSnoozes(users map[uint64]userFact, o outputs) checkResult {
	r := checkResult{name: "snooze"}
	bad := func(m kafka.Message, format string, args ...any) {
		r.violations = append(r.violations, fmt.Sprintf("%s (input %s) to user %s: %s", jsonString(m.Value, "id"), headerOf(m, "capper-source"),
			m.Key, fmt.Sprintf(format, args...)))
	}
	snoozeOf := func(m kafka.Message) (userFact, bool) {
		u, err := strconv.ParseUint(string(m.Key), 10, 64)
		f, ok := users[u]
		return f, err == nil && ok && !f.limits.SnoozeUntil.IsZero()
	}
	snoozed, first := 0, time.Time{}
	for _, f := range users {
		if until := f.limits.SnoozeUntil; !until.IsZero() {
			snoozed++
			if first.IsZero() || f.applied.Before(first) {
				first = f.applied
			}
		}
	}
	for _, m := range o.deliveries {
		f, ok := snoozeOf(m)
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, headerOf(m, "capper-decided-at"))
		if err != nil || !at.Before(f.applied) && at.Before(f.limits.SnoozeUntil) {
			bad(m, "delivered, decided at %s, while their snooze was in force (applied at %s, until %s)",
				headerOf(m, "capper-decided-at"), stamp(f.applied), stamp(f.limits.SnoozeUntil))
		}
	}
	cancelled, deferred := 0, 0
	for _, m := range o.suppressed {
		if headerOf(m, "capper-reason") != "snooze-too-long" {
			continue
		}
		cancelled++
		f, ok := snoozeOf(m)
		at, err := time.Parse(time.RFC3339Nano, headerOf(m, "capper-decided-at"))
		switch {
		case !ok:
			bad(m, "cancelled for a snooze (snooze-too-long), but the user has none")
		case err != nil || !at.Before(f.limits.SnoozeUntil):
			bad(m, "cancelled for a snooze (snooze-too-long), decided at %s, not before its end (%s)",
				headerOf(m, "capper-decided-at"), stamp(f.limits.SnoozeUntil))
		}
	}
	for _, m := range o.tiers {
		if headerOf(m, "capper-reason") != "snoozed" {
			continue
		}
		deferred++
		f, ok := snoozeOf(m)
		nb, err := time.Parse(time.RFC3339Nano, headerOf(m, "capper-not-before"))
		switch {
		case !ok:
			bad(m, "deferred for a snooze (snoozed), but the user has none")
		case err != nil || !nb.Equal(f.limits.SnoozeUntil):
			bad(m, "deferred for a snooze (snoozed) until %s, not to the snooze's end (%s)", headerOf(m, "capper-not-before"), stamp(f.limits.SnoozeUntil))
		}
	}
	r.ok = fmt.Sprintf("no delivery to the %d snoozed users decided while their snooze was in force (from %s, when the worker applied it); %d intents cancelled for it (snooze-too-long), %d deferred to its end (snoozed)",
		snoozed, stamp(first), cancelled, deferred)
	return r
}

// checkTiers: no user on a tier above its limits in any decision after
// the worker applied the tier (a rolling window over every send: the demo's
// tier), and every refusal by a user's own limit is explained: the user is
// on that tier (or has that channel limit), and the limit may have been
// full (a second wider, as the engine counts whole seconds).
func checkTiers(rules capping.Rules, users map[uint64]userFact, sends []audit.Send, refusals []audit.Refusal) checkResult {
	r := checkResult{name: "user tier"}
	byUser := map[uint64][]time.Time{}
	seen := map[string]bool{}
	for _, s := range sends {
		if f, ok := users[s.User]; !ok || f.limits.Tier == "" || seen[s.ID] {
			continue
		}
		seen[s.ID] = true // a redelivery is counted once
		byUser[s.User] = append(byUser[s.User], s.At)
	}
	tiered, checked := 0, 0
	for _, u := range slices.Sorted(maps.Keys(users)) {
		f := users[u]
		if f.limits.Tier == "" {
			continue
		}
		tiered++
		limits, ok := tierLimits(rules, f.limits.Tier)
		if !ok {
			r.violations = append(r.violations, fmt.Sprintf("user %d: tier %q is not one of the policy's", u, f.limits.Tier))
			continue
		}
		ts := byUser[u]
		for _, at := range ts {
			if !at.Before(f.applied) {
				checked++
			}
		}
		for _, l := range limits {
			if !rollingLimit(l) {
				r.violations = append(r.violations, fmt.Sprintf("tier %s, limit %s: the demo's audit checks rolling limits over every send only", f.limits.Tier, l.Name))
				continue
			}
			for _, at := range ts {
				if n := sendsIn(ts, at, l.Window, false); !at.Before(f.applied) && n > l.Max {
					r.violations = append(r.violations, fmt.Sprintf("user %d (tier %s): %d sends in the %s up to %s, above %s's max %d",
						u, f.limits.Tier, n, l.Window, stamp(at), l.Name, l.Max))
				}
			}
		}
	}
	for _, ref := range refusals {
		if why := explainRefusal(rules, users[ref.User], byUser[ref.User], ref); why != "" {
			r.violations = append(r.violations, fmt.Sprintf("user %d: intent %q capped by %q at %s: %s", ref.User, ref.ID, ref.Limit, stamp(ref.At), why))
		}
	}
	r.ok = fmt.Sprintf("no user above their tier: %d users on a tier, their %d sends since checked against every limit of it; %d intents capped by a user's own limit, each explained by a full one",
		tiered, checked, len(refusals))
	return r
}

// explainRefusal says what is wrong with a refusal by a user's own limit
// ("": nothing, a full limit of theirs explains it); ts are the user's
// sends.
func explainRefusal(rules capping.Rules, f userFact, ts []time.Time, ref audit.Refusal) string {
	if ch, ok := strings.CutPrefix(ref.Limit, userChannelPrefix); ok {
		if _, has := f.limits.Channels[ch]; !has {
			return fmt.Sprintf("the user has no limit of channel %s", ch)
		}
		return ""
	}
	tier, name, _ := strings.Cut(strings.TrimPrefix(ref.Limit, userTierPrefix), "/")
	limits, ok := tierLimits(rules, tier)
	i := slices.IndexFunc(limits, func(l capping.Limit) bool { return l.Name == name })
	switch {
	case f.limits.Tier != tier:
		return fmt.Sprintf("the user is not on tier %s (%q)", tier, f.limits.Tier)
	case !ok || i < 0:
		return fmt.Sprintf("tier %s has no limit %s", tier, name)
	case !rollingLimit(limits[i]):
		return "the demo's audit checks rolling limits over every send only"
	case sendsIn(ts, ref.At, limits[i].Window, true) < limits[i].Max:
		return fmt.Sprintf("%d sends in its window, below its max %d: not full", sendsIn(ts, ref.At, limits[i].Window, true), limits[i].Max)
	}
	return ""
}

// tierLimits are the limits of a users' tier of the policy.
func tierLimits(rules capping.Rules, name string) ([]capping.Limit, bool) {
	if rules.Users == nil {
		return nil, false
	}
	t, ok := rules.Users.Tier(name)
	return t.Limits, ok
}

// sendsIn counts ts within the window of length w ending at at: widen (a
// second wider: may have counted) or not (a second narrower: counted for
// sure), as the engine counts whole seconds.
func sendsIn(ts []time.Time, at time.Time, w time.Duration, widen bool) int {
	from := at.Add(-w + time.Second)
	if widen {
		from = at.Add(-w - time.Second)
	}
	n := 0
	for _, t := range ts {
		if t.After(from) && !t.After(at) {
			n++
		}
	}
	return n
}

// rollingLimit reports whether l is a rolling limit over every send of the
// user (what the demo's audit checks).
func rollingLimit(l capping.Limit) bool {
	return l.Calendar == capping.None && l.Per == capping.PerUser && reflect.DeepEqual(l.Where, capping.Where{})
}
