package demo

// The demo's audit: what it reads back from Kafka (the input topic, the
// outputs, the delay tiers) checked against the policy, the plan, the
// refunds, the stops and the users' own limits the demo wrote, with
// internal/audit and the checks below, none of which share code with the
// worker.

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/capping"
)

// ErrAudit is returned when the audit finds a violation: a user above a
// limit, a refusal the caps do not explain, a delivery inside quiet hours,
// an intent held past its plan's window, an input without exactly one
// outcome, a delivery of a stopped campaign decided after the stop was
// applied, a second of a budget's releases above its rate and burst, a
// paced intent delivered without its release or decided before it, a
// delivery to a snoozed user while the snooze was in force, a user above
// their tier's limits.
var ErrAudit = errors.New("audit failed")

// facts are what the audit checks the records against, none of it read
// from the worker: the policy (its budgets as the demo wrote them), the
// plans' windows, the refunds reported and the stops.
type facts struct {
	rules      capping.Rules
	refunded   map[uint64]map[string]bool // ids whose delivery failed (a refund status): their slots were given back
	plans      map[string]time.Time       // a plan's campaign: the end of its window
	stops      []stopFact                 // the campaigns stopped
	budgets    []budgetFact               // the policy's budgets
	users      map[uint64]userFact        // users' own limits, as the demo wrote them
	throttle   throttleRun                // what the throttle feedback part saw
	inputTopic string
}

// userFact is a user's own limits as the demo wrote them to the
// user-limits topic, and when the worker had applied them (the demo's
// clock once the worker's metrics showed them applied: every decision
// after that read them).
type userFact struct {
	limits  capping.UserLimits
	applied time.Time
}

// checkResult is one check's verdict: what it checked, and its
// violations.
type checkResult struct {
	name       string
	ok         string // what passed, in words
	violations []string
}

// auditAll runs every check.
func auditAll(o outputs, f facts) ([]checkResult, error) {
	// Reading what the limits look at from the records is most of the
	// audit's time: the deliveries and the two halves of the suppressed
	// records are read at once.
	var sends []audit.Send
	var refusals [2][]audit.Refusal
	half := len(o.suppressed) / 2
	errs := make([]error, 3)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); sends, errs[0] = audit.Sends(o.deliveries) }()
	go func() { defer wg.Done(); refusals[0], errs[1] = audit.Refusals(o.suppressed[:half]) }()
	go func() { defer wg.Done(); refusals[1], errs[2] = audit.Refusals(o.suppressed[half:]) }()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("demo: audit: %w", err)
	}
	for i := range refusals[1] {
		refusals[1][i].Seq += half
	}
	// The pushes handed back (throttled) were not sent: they counted until
	// capper gave them back (they may explain a refusal then, like a
	// refunded send).
	maybe := map[uint64]map[string]bool{}
	for u, ids := range f.refunded {
		maybe[u] = maps.Clone(ids)
	}
	sends, back := audit.SplitSends(sends, o.deliveries, o.statuses, maybe)
	// The refusals by a user's own limit are the tier check's; the others
	// are the caps'.
	var capsRefusals, ownRefusals []audit.Refusal
	for _, r := range slices.Concat(refusals[0], refusals[1]) {
		if strings.HasPrefix(r.Limit, userTierPrefix) || strings.HasPrefix(r.Limit, userChannelPrefix) {
			ownRefusals = append(ownRefusals, r)
		} else {
			capsRefusals = append(capsRefusals, r)
		}
	}
	return []checkResult{
		checkCaps(f.rules, sends, f.refunded),
		checkRefusals(f.rules, slices.Concat(sends, back), maybe, capsRefusals),
		checkQuiet(f.rules, sends),
		checkHolds(f.plans, o),
		checkOutcomes(f.inputTopic, o),
		checkStop(f.stops, o.deliveries),
		checkBudgets(f.budgets, o.deliveries),
		checkReleases(f.rules, f.budgets, o.deliveries),
		checkThrottle(f.throttle),
		checkSnoozes(f.users, o),
		checkTiers(f.rules, f.users, sends, ownRefusals),
	}, nil
}

// checkCaps: no user above any limit, the sends whose delivery failed
// (refunded: their slots were given back) not counted.
func checkCaps(rules capping.Rules, sends []audit.Send, refunded map[uint64]map[string]bool) checkResult {
	kept := audit.WithoutRefunded(sends, refunded)
	r := checkResult{name: "caps", ok: fmt.Sprintf("no user above any limit: %d counted sends (%d refunded ones left out) against every window",
		len(kept), len(sends)-len(kept))}
	for _, v := range audit.Check(rules, kept) {
		r.violations = append(r.violations, v.String())
	}
	return r
}

// checkRefusals: every capped intent (the suppressed records' refusals)
// is explained by the caps as the deliveries show them
// (audit.CheckRefusals): the limit it names was full, or a plan's booking
// held it, and no limit ahead of it was.
func checkRefusals(rules capping.Rules, sends []audit.Send, refunded map[uint64]map[string]bool, refusals []audit.Refusal) checkResult {
	r := checkResult{name: "refusals",
		ok: fmt.Sprintf("%d capped intents, each explained by a full limit (or a plan's booking), none by a limit that was not", len(refusals))}
	for _, p := range audit.CheckRefusals(func(string) (capping.Rules, bool) { return rules, true }, sends, refunded, refusals) {
		r.violations = append(r.violations, p.String())
	}
	return r
}

// checkQuiet: nothing delivered inside its user's quiet hours.
func checkQuiet(rules capping.Rules, sends []audit.Send) checkResult {
	n := 0
	for _, s := range sends {
		if rules.PolicyOf(s.Segment).QuietHours != nil {
			n++
		}
	}
	r := checkResult{name: "quiet hours", ok: fmt.Sprintf("no delivery inside its user's quiet hours (%d deliveries to users with quiet hours)", n)}
	for _, v := range audit.Quiet(rules, sends) {
		r.violations = append(r.violations, v.String())
	}
	return r
}

// checkHolds: an intent held for a plan (capper-held-for) was held while
// the plan's window had not ended, and not past its end: a suppressed one
// was decided before the end, with a retry-after up to it; one deferred
// into a delay tier waits no later than the end (capper-not-before). A
// hold for a campaign with no plan is a violation too.
func checkHolds(plans map[string]time.Time, o outputs) checkResult {
	r := checkResult{name: "plan holds"}
	held := 0
	bad := func(m kafka.Message, format string, args ...any) {
		r.violations = append(r.violations, fmt.Sprintf("%s (input %s): %s", jsonString(m.Value, "id"), headerOf(m, "capper-source"), fmt.Sprintf(format, args...)))
	}
	for _, set := range [][]kafka.Message{o.suppressed, o.deliveries} {
		for _, m := range set {
			campaign := headerOf(m, "capper-held-for")
			if campaign == "" {
				continue
			}
			held++
			ends, ok := plans[campaign]
			if !ok {
				bad(m, "held for %s, which has no plan", campaign)
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, headerOf(m, "capper-decided-at"))
			if err != nil {
				bad(m, "capper-decided-at %q: %v", headerOf(m, "capper-decided-at"), err)
				continue
			}
			if !at.Before(ends) {
				bad(m, "held for %s at %s, when its plan's window had ended (%s)", campaign, stamp(at), stamp(ends))
				continue
			}
			// The engine counts whole seconds: the retry-after may end up to
			// a second past the end.
			if ms, err := strconv.ParseInt(headerOf(m, "capper-retry-after-ms"), 10, 64); err == nil && ms >= 0 {
				if until := at.Add(time.Duration(ms) * time.Millisecond); until.After(ends.Add(time.Second)) {
					bad(m, "held for %s until %s, past its plan's end (%s)", campaign, stamp(until), stamp(ends))
				}
			}
		}
	}
	for _, m := range o.tiers {
		campaign := headerOf(m, "capper-held-for")
		if campaign == "" {
			continue
		}
		held++
		ends, ok := plans[campaign]
		if !ok {
			bad(m, "deferred for %s, which has no plan", campaign)
			continue
		}
		nb, err := time.Parse(time.RFC3339Nano, headerOf(m, "capper-not-before"))
		switch {
		case err != nil:
			bad(m, "capper-not-before %q: %v", headerOf(m, "capper-not-before"), err)
		case nb.After(ends.Add(time.Second)):
			bad(m, "deferred for %s until %s, past its plan's end (%s)", campaign, stamp(nb), stamp(ends))
		}
	}
	r.ok = fmt.Sprintf("%d intents held for a plan, each while its window was open and not past its end", held)
	return r
}

// checkOutcomes: every input record has exactly one outcome (a delivery,
// a suppressed record or a dead letter, by capper-source), every output
// names an input, and every input that waited in a delay tier ended
// delivered or suppressed.
func checkOutcomes(inputTopic string, o outputs) checkResult {
	c := audit.NewCopies(inputTopic, o.input, o.deliveries, o.suppressed, o.dlq)
	handBacks := audit.HandBacks(o.statuses) // inputs too: the pushes held again
	c.AddInputs(topicStatus, handBacks)
	r := checkResult{name: "one outcome"}
	// (A delivery status dead-lettered names the status topic: no intent.)
	for _, src := range c.Unknown(inputTopic + "/") {
		r.violations = append(r.violations, fmt.Sprintf("an output names input %s, which the input topic does not hold", src))
	}
	for _, src := range c.Missing() {
		r.violations = append(r.violations, fmt.Sprintf("input %s has no outcome: lost", src))
	}
	for _, s := range c.Several() {
		r.violations = append(r.violations, "input "+s+" has several outcomes")
	}
	waited := map[string]bool{}
	for _, m := range o.tiers {
		src := headerOf(m, "capper-source")
		if waited[src] {
			continue
		}
		waited[src] = true
		if cs := c.Of(src); len(cs) != 1 || cs[0].Topic == topicDLQ {
			r.violations = append(r.violations, fmt.Sprintf("input %s waited in a delay tier and ended in %v, not one delivery or suppressed record", src, topicsOf(cs)))
		}
	}
	r.ok = fmt.Sprintf("%d inputs, each with exactly one outcome (%d of them after waiting in the delay tiers)", len(o.input), len(waited))
	if len(handBacks) > 0 {
		r.ok += fmt.Sprintf("; so has each of the %d delivery statuses that handed a throttled push back", len(handBacks))
	}
	return r
}

func topicsOf(ms []kafka.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Topic
	}
	return out
}

// checkStop: no delivery of a stopped campaign was decided after the
// worker applied its stop (what was held in a lane then included).
func checkStop(stops []stopFact, deliveries []kafka.Message) checkResult {
	var parts []string
	applied := map[string]time.Time{}
	for i, s := range stops {
		applied[s.campaign] = s.applied
		if i == 0 {
			parts = append(parts, fmt.Sprintf("no delivery of %s decided after %s", s.campaign, stamp(s.applied)))
		} else {
			parts = append(parts, fmt.Sprintf("nor of %s after %s", s.campaign, stamp(s.applied)))
		}
	}
	when := "its stop"
	if len(stops) > 1 {
		when = "their stops"
	}
	r := checkResult{name: "campaign stop", ok: strings.Join(parts, ", ") + ", when the worker applied " + when}
	for _, m := range deliveries {
		campaign := jsonString(m.Value, "campaign_id")
		stopped, ok := applied[campaign]
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, headerOf(m, "capper-decided-at"))
		if err != nil || at.After(stopped) {
			r.violations = append(r.violations, fmt.Sprintf("%s of stopped campaign %s delivered, decided at %s, after the stop was applied (%s)",
				jsonString(m.Value, "id"), campaign, headerOf(m, "capper-decided-at"), stamp(stopped)))
		}
	}
	return r
}

// stopFact is a campaign stopped, and when the worker applied the stop
// (on its clock, as capper-decided-at).
type stopFact struct {
	campaign string
	applied  time.Time
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

// writeAudit prints each check's verdict, then the audit's: "audit: ok,
// ..." or the number of violations (then it returns ErrAudit).
func writeAudit(w io.Writer, results []checkResult, deliveries, inputs int) error {
	fmt.Fprintln(w, "audit (the records read back from Kafka, checked independently of the worker):")
	width := 0
	for _, r := range results {
		width = max(width, len(r.name))
	}
	bad := 0
	var failed []string
	for _, r := range results {
		if len(r.violations) == 0 {
			fmt.Fprintf(w, "  %-*s  ok: %s\n", width, r.name, r.ok)
			continue
		}
		bad += len(r.violations)
		failed = append(failed, fmt.Sprintf("%s %d", r.name, len(r.violations)))
		fmt.Fprintf(w, "  %-*s  %d violations\n", width, r.name, len(r.violations))
		for i, v := range r.violations {
			if i == 20 {
				fmt.Fprintf(w, "  %*s    ... and %d more\n", width, "", len(r.violations)-20)
				break
			}
			fmt.Fprintf(w, "  %*s    %s\n", width, "", v)
		}
	}
	if bad > 0 {
		fmt.Fprintf(w, "audit: %d violations (%s)\n", bad, strings.Join(failed, ", "))
		return fmt.Errorf("%w: %d violations (%s)", ErrAudit, bad, strings.Join(failed, ", "))
	}
	fmt.Fprintf(w, "audit: ok, no user above any limit, every refusal explained, nothing inside quiet hours, nothing held past its plan, one outcome per input, nothing delivered after a stop, no budget above its rate, every paced intent decided when released, the budget's rate following its provider down and back up, nothing delivered to a snoozed user, no user above their tier (%d delivery records, %d inputs checked)\n",
		deliveries, inputs)
	return nil
}
