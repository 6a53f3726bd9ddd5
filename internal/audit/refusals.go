package audit

// Refusals, checked against the caps as the deliveries show them: a capped
// intent must have been capped by the first of its limits, in policy
// order, that was full, and that limit must have been full. The engine
// keeps times in whole seconds and a batch shares one decision time, so
// each window is taken a second wider (may have been full) or a second
// narrower (was full for sure) than its length.

import (
	"fmt"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/capping"
)

// Refusal is a capped intent read back from the suppressed topic.
type Refusal struct {
	Send         // the intent; At, Segment and Policy are the decision's
	Limit string // the limit that capped it (capper-limit)
	// HeldFor: a campaign plan's booking made the difference
	// (capper-held-for); the bookings are not in the deliveries.
	HeldFor string
}

// Refusals reads the capped records (decision capped) of suppressed.
func Refusals(records []kafka.Message) ([]Refusal, error) {
	var out []Refusal
	for seq, r := range records {
		h := headers(r)
		if h[hDecision] != "capped" {
			continue
		}
		s, err := intentOf(r, h)
		if err != nil {
			return nil, err
		}
		s.Seq = seq
		out = append(out, Refusal{Send: s, Limit: h[hLimit], HeldFor: h[hHeldFor]})
	}
	return out, nil
}

// RefusalProblem is a refusal the caps do not explain.
type RefusalProblem struct {
	Refusal Refusal
	Reason  string
}

func (p RefusalProblem) String() string {
	r := p.Refusal
	return fmt.Sprintf("user %d (segment %s): intent %q capped by %q at %s (policy %s): %s",
		r.User, r.Segment, r.ID, r.Limit, r.At.UTC().Format(timeLayout), r.Policy, p.Reason)
}

// CheckRefusals returns the refusals that the policy version which made
// them does not explain, given every delivery that counts (sends) and the
// ids refunded (refunded[user]: their sends may or may not have counted
// when the refusal was made). A refusal is explained when:
//   - its limit is one of its segment's policy, and applies to the intent;
//   - its id was not allowed before it (Redis would answer duplicate);
//   - no limit ahead of it in policy order that applies was full for sure
//     (Redis names the first full limit);
//   - its limit may have been full: at least the sends it allows were in
//     its window (for the intent's campaign when it counts per campaign),
//     unless a campaign plan's booking made the difference (HeldFor).
func CheckRefusals(rulesOf func(version string) (capping.Rules, bool), sends []Send, refunded map[uint64]map[string]bool, refusals []Refusal) []RefusalProblem {
	first := firstSends(sends)
	byUser := map[uint64][]Send{}
	for _, s := range first {
		byUser[s.User] = append(byUser[s.User], s)
	}
	var out []RefusalProblem
	for _, r := range refusals {
		rules, ok := rulesOf(r.Policy)
		if !ok {
			continue
		}
		problem := func(format string, args ...any) {
			out = append(out, RefusalProblem{r, fmt.Sprintf(format, args...)})
		}
		if s, ok := first[sendKey{r.User, r.ID}]; ok && !s.Duplicate && s.At.Before(r.At.Add(-time.Second)) {
			problem("its id was allowed at %s: Redis answers a duplicate", s.At.UTC().Format(timeLayout))
			continue
		}
		limits := rules.PolicyOf(r.Segment).Limits
		k := -1
		for i, l := range limits {
			if l.Name == r.Limit {
				k = i
			}
		}
		if k < 0 || !Matches(rules, limits[k].Where, r.Send) {
			problem("no limit of that name applies to it in its segment's policy")
			continue
		}
		loc := r.TimeZone
		if loc == nil {
			loc = rules.TimeZone
		}
		for i, l := range limits[:k+1] {
			if !Matches(rules, l.Where, r.Send) {
				continue
			}
			allowed := l.Max
			if l.Reserve.Slots > 0 && priority(r.Priority) < l.Reserve.Below {
				allowed -= l.Reserve.Slots
			}
			from := r.At.Add(-l.Window)
			if l.Calendar != capping.None {
				from = periodStart(l.Calendar, r.At, loc, rules.WeekStart)
			}
			sure, maybe := 0, 0
			for _, o := range byUser[r.User] {
				if o.ID == r.ID || !Matches(rules, l.Where, o) || l.Per == capping.PerCampaign && o.Campaign != r.Campaign {
					continue
				}
				if o.At.After(from.Add(-time.Second)) && !o.At.After(r.At) {
					maybe++
				}
				if o.At.After(from.Add(time.Second)) && o.At.Before(r.At.Add(-time.Second)) && !o.Duplicate && !refunded[r.User][o.ID] {
					sure++
				}
			}
			switch {
			case i < k && sure >= allowed:
				problem("limit %q, ahead of it in policy order, was full (%d sends, it allows %d): Redis names the first full limit", l.Name, sure, allowed)
			case i == k && r.HeldFor == "" && maybe < allowed:
				problem("its window held %d sends at most, and the limit allows %d", maybe, allowed)
			}
		}
	}
	return out
}
