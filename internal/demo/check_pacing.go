package demo

// The audit's checks of send pacing: the budget's rate over its releases,
// and a release before every decision of what it covers.

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/pacing"
)

// budgetFact is a budget of the demo's policy: its rate a second, its
// burst, and the intents it covers (pacing's table matches them).
type budgetFact struct {
	name  string
	rate  float64
	burst int
	where pacing.Where
}

// checkBudgets: no budget's deliveries (capper-released-at, of those held
// in one of its lanes) above 1.01 x its rate plus its burst in any
// one-second window.
func checkBudgets(budgets []budgetFact, deliveries []kafka.Message) checkResult {
	r := checkResult{name: "budget rate"}
	var oks []string
	for _, b := range budgets {
		var released []time.Time
		for _, m := range deliveries {
			if !strings.HasPrefix(headerOf(m, "capper-lane"), b.name+"/") {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, headerOf(m, "capper-released-at"))
			if err != nil {
				r.violations = append(r.violations, fmt.Sprintf("%s (input %s), held for budget %s: capper-released-at %q: %v",
					jsonString(m.Value, "id"), headerOf(m, "capper-source"), b.name, headerOf(m, "capper-released-at"), err))
				continue
			}
			released = append(released, at)
		}
		limit := 1.01*b.rate + float64(b.burst)
		most, from := audit.BusiestSecond(released)
		if float64(most) > limit {
			r.violations = append(r.violations, fmt.Sprintf("budget %s: %d releases from %s to %s, above 1.01 x %g + %d = %g in one second",
				b.name, most, stamp(from), stamp(from.Add(time.Second)), b.rate, b.burst, limit))
		}
		oks = append(oks, fmt.Sprintf("%s at most %d releases in any one second of its %d (1.01 x %g + %d = %g)", b.name, most, len(released), b.rate, b.burst, limit))
	}
	r.ok = "no budget above its rate: " + strings.Join(oks, "; ")
	return r
}

// checkReleases: every delivery of an intent a budget covers (one that is
// not exempt) was held in one of the budget's lanes and decided at or
// after its release (capper-released-at); no exempt intent was held.
func checkReleases(rules capping.Rules, budgets []budgetFact, deliveries []kafka.Message) checkResult {
	r := checkResult{name: "paced release"}
	paced, exempt := 0, 0
	bad := func(m kafka.Message, format string, args ...any) {
		r.violations = append(r.violations, fmt.Sprintf("%s (input %s): %s", jsonString(m.Value, "id"), headerOf(m, "capper-source"), fmt.Sprintf(format, args...)))
	}
	for _, m := range deliveries {
		var budget *budgetFact
		for i := range budgets {
			if budgets[i].where.Matches(pacing.Intent{Channel: jsonString(m.Value, "channel"), Route: jsonString(m.Value, "route")}) {
				budget = &budgets[i]
				break
			}
		}
		if budget == nil {
			continue
		}
		category := jsonString(m.Value, "category")
		if category == "" {
			category = rules.DefaultCategory
		}
		lane := headerOf(m, "capper-lane")
		if rules.IsExempt(category) {
			exempt++
			if lane != "" {
				bad(m, "exempt (%s), held in lane %s", category, lane)
			}
			continue
		}
		paced++
		if !strings.HasPrefix(lane, budget.name+"/") {
			bad(m, "covered by budget %s, delivered from lane %q", budget.name, lane)
			continue
		}
		released, err1 := time.Parse(time.RFC3339Nano, headerOf(m, "capper-released-at"))
		decided, err2 := time.Parse(time.RFC3339Nano, headerOf(m, "capper-decided-at"))
		switch {
		case err1 != nil || err2 != nil:
			bad(m, "capper-released-at %q, capper-decided-at %q: %v", headerOf(m, "capper-released-at"), headerOf(m, "capper-decided-at"), errors.Join(err1, err2))
		case decided.Before(released):
			bad(m, "decided at %s, before its release at %s", stamp(decided), stamp(released))
		}
	}
	r.ok = fmt.Sprintf("%d deliveries of paced intents, each held and decided at or after its release; %d exempt ones a budget covers, none held", paced, exempt)
	return r
}

// The capper-limit of a refusal by a user's own limit: user-tier/<tier>/<limit>
// or user-channel/<channel> (the policy format's words).
const (
	userTierPrefix    = "user-tier/"
	userChannelPrefix = "user-channel/"
)

// mostInOneSecond is the most of ts within any one second.
func mostInOneSecond(ts []time.Time) int {
	most, _ := audit.BusiestSecond(ts)
	return most
}

// checkThrottle: FCM's throttled answers brought the budget's effective
// rate within 10% of what FCM accepted, and it climbed back within 10% of
// the budget's rate once FCM accepted that.
func checkThrottle(r throttleRun) checkResult {
	c := checkResult{name: "throttling"}
	switch {
	case !r.done:
		c.violations = append(c.violations, "the throttle feedback part did not run")
	case r.throttled == 0:
		c.violations = append(c.violations, fmt.Sprintf("FCM throttled none of %d answers: nothing to follow", r.answered))
	case r.downIn == 0:
		c.violations = append(c.violations, fmt.Sprintf("the effective rate fell to %.0f/s, never within 10%% of %d/s", r.lowest, provLow))
	case r.backIn == 0:
		c.violations = append(c.violations, fmt.Sprintf("the effective rate never came back within 10%% of %d/s", paceRate))
	case r.once != r.members || r.twice != 0:
		c.violations = append(c.violations, fmt.Sprintf("FCM accepted %d of the %d pushes once and %d more than once, want each once (the throttled ones handed back and delivered again)",
			r.once, r.members, r.twice))
	}
	c.ok = fmt.Sprintf("%s's effective rate followed FCM down to %.0f/s (%d of %d answers throttled, each handed back and held again) and back up to %d/s; FCM accepted each of the %d pushes delivered once",
		budgetName, r.lowest, r.throttled, r.answered, paceRate, r.members)
	return c
}
