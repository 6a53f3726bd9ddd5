package soak

// The checks of a soak, on what the topics hold at the end. They read the
// output contract (headers) and the policies as written, and share no code
// with the engine: caps and refusals are internal/audit's, the rest is
// here.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/capping"
)

// Header names of the output contract.
const (
	hSource        = "capper-source"
	hDecision      = "capper-decision"
	hDecidedAt     = "capper-decided-at"
	hDuplicate     = "capper-duplicate"
	hDeferredSince = "capper-deferred-since"
	hRetryAfter    = "capper-retry-after-ms"
	hHeldFor       = "capper-held-for"
	hPolicy        = "capper-policy"
	timeLayout     = "2006-01-02T15:04:05.000Z07:00"
)

// outputs is every record of the input and output topics, and the
// delivery statuses.
type outputs struct {
	inputs                    []kafka.Message
	deliveries, suppressed, d []kafka.Message // d: dead letters
	statuses                  []kafka.Message
}

func readAll(ctx context.Context, addr string) (outputs, error) {
	var o outputs
	for _, x := range []struct {
		topic string
		dst   *[]kafka.Message
	}{{tIn, &o.inputs}, {tDeliveries, &o.deliveries}, {tSuppressed, &o.suppressed}, {tDLQ, &o.d}, {tStatus, &o.statuses}} {
		msgs, err := audit.ReadTopic(ctx, []string{addr}, x.topic)
		if err != nil {
			return o, err
		}
		*x.dst = msgs
	}
	return o, nil
}

func header(m kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// missing lists the inputs without any outcome yet.
func (o outputs) missing() []string { return o.copies().Missing() }

// copies are the outputs of each input: a status that hands a throttled
// send back is an input too.
func (o outputs) copies() *audit.Copies {
	c := audit.NewCopies(tIn, o.inputs, o.deliveries, o.suppressed, o.d)
	c.AddInputs(tStatus, audit.HandBacks(o.statuses))
	return c
}

// delivered are the deliveries the users received: without those the
// sender handed back (throttled).
func (o outputs) delivered() []kafka.Message { return audit.Delivered(o.deliveries, o.statuses) }

// report collects the problems of a run, by check.
type report struct {
	problems map[string][]string
	counts   map[string]int
}

func (r *report) add(check, format string, args ...any) {
	if r.problems == nil {
		r.problems = map[string][]string{}
	}
	r.problems[check] = append(r.problems[check], fmt.Sprintf(format, args...))
}

// check runs every check on o. versions maps a policy version (the
// worker's capper-policy) to its rules; refunded are the refunded ids;
// held are the times campaigns were stopped or paused.
func check(o outputs, versions map[string]capping.Rules, refunded map[uint64]map[string]bool, p *plan, held []heldWindow) *report {
	r := &report{counts: map[string]int{}}
	checkOutcomes(r, o)
	checkOrder(r, o)
	checkHeld(r, o, held)
	rulesOf := func(v string) (capping.Rules, bool) { rules, ok := versions[v]; return rules, ok }
	for _, x := range [][]kafka.Message{o.deliveries, o.suppressed} {
		for _, m := range x {
			if v := header(m, hPolicy); v != "" {
				if _, ok := versions[v]; !ok {
					r.add("policy", "%s decided by policy %q, which the soak never wrote", header(m, hSource), v)
				}
			}
		}
	}
	all, err := audit.Sends(o.deliveries)
	if err != nil {
		r.add("read", "%v", err)
		return r
	}
	// A send handed back counted until capper gave it back: it may explain
	// a refusal then, like a refunded one; no cap counts it.
	maybe := map[uint64]map[string]bool{}
	for u, ids := range refunded {
		maybe[u] = maps.Clone(ids)
	}
	sends, backSends := audit.SplitSends(all, o.deliveries, o.statuses, maybe)
	r.counts["counted sends"] = len(sends)
	r.counts["deliveries handed back"] = len(backSends)
	for _, v := range audit.CheckVersions(rulesOf, audit.WithoutRefunded(sends, refunded)) {
		r.add("caps", "%s; the user's deliveries:%s", v, deliveriesOf(o, v.User))
	}
	refusals, err := audit.Refusals(o.suppressed)
	if err != nil {
		r.add("read", "%v", err)
		return r
	}
	r.counts["refusals"] = len(refusals)
	// A refusal by a user's own limit (user-tier/..., user-channel/...)
	// is checked against the user's records (checkUserLimits), not the
	// policy's limits.
	policyRefusals := slices.DeleteFunc(slices.Clone(refusals), func(f audit.Refusal) bool { return strings.HasPrefix(f.Limit, "user-") })
	for _, v := range audit.CheckRefusals(rulesOf, slices.Concat(sends, backSends), maybe, policyRefusals) {
		r.add("refusals", "%s", v)
	}
	for v, rules := range versions {
		var mine []audit.Send
		for _, s := range sends {
			if s.Policy == v {
				mine = append(mine, s)
			}
		}
		for _, q := range audit.Quiet(rules, mine) {
			r.add("quiet hours", "%s", q)
		}
	}
	for _, f := range refusals {
		switch {
		case f.HeldFor == "":
		case f.HeldFor != p.campaign:
			r.add("plans", "%q held for %q, not a plan of the soak", f.ID, f.HeldFor)
		case !p.has(f.User) || f.Campaign == p.campaign || !f.At.Before(p.ends):
			r.add("plans", "%q of user %d (campaign %s) held for %s at %s: not in its audience, its own campaign, or after its window",
				f.ID, f.User, f.Campaign, p.campaign, f.At.Format(timeLayout))
		default:
			r.counts["held for the plan"]++
		}
	}
	return r
}

// checkOutcomes: every input has an outcome; the soak's bad records, and
// only they, are dead-lettered; an id is delivered and counted once
// (later copies carry capper-duplicate); an input in two topics was capped,
// then delivered after its retry-after (a redelivery decided again).
func checkOutcomes(r *report, o outputs) {
	copies := o.copies()
	r.counts["inputs"] = len(o.inputs)
	for i, src := range copies.Inputs() {
		var bad string
		if i < len(o.inputs) { // (the rest: statuses handing a send back)
			bad = header(o.inputs[i], hBad)
		}
		cs := copies.Of(src)
		if len(cs) == 0 {
			r.add("outcomes", "input %s has no outcome: lost", src)
			continue
		}
		if len(cs) > 1 {
			r.counts["inputs decided more than once (redelivered)"]++
		}
		for _, c := range cs {
			dead := c.Topic == tDLQ
			switch {
			case bad != "" && !dead:
				r.add("outcomes", "input %s (bad: %s) was not dead-lettered: %s %s", src, bad, c.Topic, header(c, hDecision))
			case bad == "" && dead:
				r.add("outcomes", "input %s was dead-lettered: %s", src, header(c, "capper-error"))
			}
		}
		redecided(r, src, cs)
	}
	for _, src := range copies.Unknown("") {
		r.add("outcomes", "an output names input %s, which the input topic does not hold", src)
	}
	type key struct{ user, id string }
	allowed := map[key][]string{}
	for _, m := range o.delivered() {
		if header(m, hDecision) != "allowed" || header(m, hDuplicate) == "true" || header(m, "capper-unchecked") == "true" {
			continue
		}
		k := key{string(m.Key), intentID(m)}
		allowed[k] = append(allowed[k], header(m, hSource))
	}
	for k, srcs := range allowed {
		if len(srcs) > 1 {
			r.add("twice", "user %s, id %q delivered and counted %d times without capper-duplicate (inputs %v)", k.user, k.id, len(srcs), srcs)
		}
	}
}

// redecided checks the copies of one input: at most one that is not a
// duplicate is allowed, and one allowed after a capped copy was decided
// no earlier than that copy's retry-after.
func redecided(r *report, src string, cs []kafka.Message) {
	for _, a := range cs {
		if a.Topic != tDeliveries || header(a, hDecision) != "allowed" || header(a, hDuplicate) == "true" {
			continue
		}
		at, err := time.Parse(timeLayout, header(a, hDecidedAt))
		if err != nil {
			r.add("outcomes", "input %s: %s %q: %v", src, hDecidedAt, header(a, hDecidedAt), err)
			continue
		}
		for _, c := range cs {
			if c.Topic != tSuppressed || header(c, hDecision) != "capped" {
				continue
			}
			cat, err1 := time.Parse(timeLayout, header(c, hDecidedAt))
			ms, err2 := strconv.ParseInt(header(c, hRetryAfter), 10, 64)
			if err1 != nil || err2 != nil {
				r.add("outcomes", "input %s: capped copy without a readable decision time or retry-after", src)
				continue
			}
			if cat.Before(at) && (ms < 0 || at.Before(cat.Add(time.Duration(ms)*time.Millisecond-time.Second))) {
				r.add("outcomes", "input %s: capped at %s (retry after %dms), then delivered at %s", src,
					cat.Format(timeLayout), ms, at.Format(timeLayout))
			}
		}
	}
}

func intentID(m kafka.Message) string {
	s := string(m.Value)
	i := strings.Index(s, `"id":"`)
	if i < 0 {
		return ""
	}
	s = s[i+len(`"id":"`):]
	return s[:max(strings.IndexByte(s, '"'), 0)]
}

// checkOrder: a user's inputs, in partition order, were decided in that
// order, within each delivery pass and lane (audit.Order says how passes
// are told apart).
func checkOrder(r *report, o outputs) {
	for _, f := range audit.Order(o.inputs, o.deliveries, o.suppressed) {
		r.add("order", "%s", f)
	}
}

// deliveriesOf lists a user's deliveries and refusals, for a report.
func deliveriesOf(o outputs, user uint64) string {
	var b strings.Builder
	for _, x := range [][]kafka.Message{o.deliveries, o.suppressed} {
		for _, m := range x {
			if string(m.Key) != strconv.FormatUint(user, 10) {
				continue
			}
			fmt.Fprintf(&b, "\n    %s %s %s id=%s decided=%s policy=%s dup=%s limit=%s deferred-since=%s",
				m.Topic, header(m, hSource), header(m, hDecision), intentID(m), header(m, hDecidedAt), header(m, hPolicy),
				header(m, hDuplicate), header(m, "capper-limit"), header(m, hDeferredSince))
		}
	}
	return b.String()
}

// checkHeld: no delivery of a stopped or paused campaign was decided after
// every worker had applied the stop (or pause) and before its resume was
// written; a duplicate's decided-at is its first allowance's, so it takes
// no part.
func checkHeld(r *report, o outputs, held []heldWindow) {
	for _, w := range held {
		for _, m := range o.deliveries {
			if header(m, hDuplicate) == "true" || campaignOf(m) != w.campaign {
				continue
			}
			at, err := time.Parse(timeLayout, header(m, hDecidedAt))
			if err == nil && at.After(w.from) && at.Before(w.to) {
				r.add("control", "%s of campaign %s delivered, decided at %s, while it was %s (applied by every worker at %s, resumed at %s)",
					header(m, hSource), w.campaign, at.Format(timeLayout), w.state, w.from.Format(timeLayout), w.to.Format(timeLayout))
			}
		}
	}
	for _, m := range o.suppressed {
		if header(m, hDecision) == "cancelled" && header(m, "capper-reason") != "snooze-too-long" {
			r.counts["cancelled by control"]++
		}
	}
}

func campaignOf(m kafka.Message) string {
	s := string(m.Value)
	i := strings.Index(s, `"campaign_id":"`)
	if i < 0 {
		return ""
	}
	s = s[i+len(`"campaign_id":"`):]
	return s[:max(strings.IndexByte(s, '"'), 0)]
}
