package policy

// Provider budgets as users write them (budgets:): their checks, each
// problem at its path, their defaults (burst, the one lane), and their
// conversion into the worker's pacing.Set. pacing.NewSet is the last word
// on a set; this file reports what the document got wrong in its words.

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/problems"
)

// Budget is a provider budget: the intents it covers (a channel of
// Channels, a route of Routes) are held and released at Rate a second,
// all workers together, with up to Burst above it, each lane in turn.
type Budget struct {
	Name string `yaml:"name"`
	// Rate is releases per second, all workers together: above 0, at
	// most MaxRate.
	Rate float64 `yaml:"rate"`
	// Burst is what may go above the rate in any second; 0 (left out):
	// max(1, rate/10 rounded up).
	Burst int `yaml:"burst,omitempty"`
	// MinRate is the least the budget's effective rate drops to while its
	// provider throttles sends (throttle feedback); 0 (left out): the
	// rate/10. Above 0, at most the rate.
	MinRate float64 `yaml:"min_rate,omitempty"`
	// Channels are the policy's channels the budget covers; empty, every
	// channel.
	Channels []string `yaml:"channels,omitempty"`
	// Routes are the intents' route fields (a provider or sender pool)
	// the budget covers; empty, any route, none included.
	Routes []string `yaml:"routes,omitempty"`
	// Lanes are in precedence order; empty, one lane named
	// pacing.DefaultLane that takes every priority.
	Lanes []Lane `yaml:"lanes,omitempty"`
}

// Lane is a budget's queue for the intents of MinPriority and up (the last
// lane, which names none, takes every priority the lanes before leave).
type Lane struct {
	Name string `yaml:"name"`
	// MinPriority is low, normal, high or 0-100: required on every lane
	// but the last, strictly decreasing; absent on the last.
	MinPriority string `yaml:"min_priority,omitempty"`
}

// MaxRate is the highest rate a budget may have, releases per second.
const MaxRate = 10_000_000

// BudgetPath is the path of budget i: budgets[i] (budget "name").
func BudgetPath(i int, name string) problems.Path {
	return problems.Key("budgets").Named(i, "budget", name)
}

// EffectiveBurst is the budget's burst, its default filled in.
func (b Budget) EffectiveBurst() int {
	if b.Burst != 0 {
		return b.Burst
	}
	if !(b.Rate > 0) || b.Rate > MaxRate {
		return 1 // a bad rate is reported; the default needs a good one
	}
	return max(1, int(math.Ceil(b.Rate/10)))
}

// EffectiveMinRate is the budget's min_rate, its default filled in.
func (b Budget) EffectiveMinRate() float64 {
	if b.MinRate != 0 {
		return b.MinRate
	}
	return b.Rate / 10
}

// EffectiveLanes are the budget's lanes, the default lane when it names
// none.
func (b Budget) EffectiveLanes() []Lane {
	if len(b.Lanes) == 0 {
		return []Lane{{Name: pacing.DefaultLane}}
	}
	return b.Lanes
}

// Pacing converts the budgets into the worker's set and reports every
// problem of budgets at once, each at its path. A set that comes with
// problems is nil.
func (d *Document) Pacing() (*pacing.Set, problems.List) {
	var ps problems.List
	out := make([]pacing.Budget, 0, len(d.Budgets))
	names := map[string]bool{}
	for i, b := range d.Budgets {
		at := BudgetPath(i, b.Name)
		switch {
		case b.Name == "":
			ps.Add(at.Key("name"), "is required")
		case !pacing.NamePattern.MatchString(b.Name):
			ps.Add(at.Key("name"), "%q must match %s (it names Kafka topics and metric labels)", b.Name, pacing.NamePattern)
		case names[b.Name]:
			ps.Add(at.Key("name"), "budget %q is listed twice", b.Name)
		}
		names[b.Name] = true
		switch {
		case b.Rate == 0:
			ps.Add(at.Key("rate"), "is required: releases per second, all workers together, above 0 and at most %d", MaxRate)
		case !(b.Rate > 0) || b.Rate > MaxRate: // NaN too
			ps.Add(at.Key("rate"), "%s must be above 0 and at most %d (releases per second, all workers together)", formatRate(b.Rate), MaxRate)
		}
		if b.Burst < 0 {
			ps.Add(at.Key("burst"), "%d must be at least 1 (left out: the rate/10, at least 1)", b.Burst)
		}
		if b.MinRate != 0 && (!(b.MinRate > 0) || b.MinRate > b.Rate) {
			ps.Add(at.Key("min_rate"), "%s must be above 0 and at most the rate, %s (left out: the rate/10)", formatRate(b.MinRate), formatRate(b.Rate))
		}
		pb := pacing.Budget{Name: b.Name, Where: b.matching()}
		pb.Problems(d.vocabulary(), func(key string, j int, msg string) { ps.Add(at.Key(key).Index(j), "%s", msg) })
		pb.Lanes = b.lanes(&ps, at)
		if j := shadowedBy(d, i); j >= 0 {
			ps.Add(at, "can never pace an intent: budget %q (budgets[%d]) comes first and covers every intent it covers (an intent is paced by the first budget that covers it)", d.Budgets[j].Name, j)
		}
		pb.Rate, pb.Burst, pb.MinRate = b.Rate, b.EffectiveBurst(), b.EffectiveMinRate()
		out = append(out, pb)
	}
	if len(ps) > 0 {
		return nil, ps
	}
	set, err := pacing.NewSet(out)
	if err != nil {
		ps.Add(problems.Key("budgets"), "%v", err)
		return nil, ps
	}
	return set, nil
}

// PacingSet is the set of a document whose problems were already reported
// (the worker config's validation, Load); nil when its budgets have any.
func (d *Document) PacingSet() *pacing.Set {
	s, _ := d.Pacing()
	return s
}

// lanes checks and converts the lanes of budget b at path at.
func (b Budget) lanes(ps *problems.List, at problems.Path) []pacing.Lane {
	if len(b.Lanes) == 0 {
		return []pacing.Lane{{Name: pacing.DefaultLane}}
	}
	out := make([]pacing.Lane, 0, len(b.Lanes))
	prev, prevOK := capping.Priority(0), false // the lane before's min_priority, when it is one
	for j, l := range b.Lanes {
		lp := at.Key("lanes").Named(j, "lane", l.Name)
		switch {
		case l.Name == "":
			ps.Add(lp.Key("name"), "is required")
		case !pacing.NamePattern.MatchString(l.Name):
			ps.Add(lp.Key("name"), "%q must match %s (it names a Kafka topic and metric labels)", l.Name, pacing.NamePattern)
		case slices.ContainsFunc(b.Lanes[:j], func(o Lane) bool { return o.Name == l.Name }):
			ps.Add(lp.Key("name"), "lane %q is listed twice", l.Name)
		}
		last := j == len(b.Lanes)-1
		var p capping.Priority
		ok := false
		switch {
		case last && l.MinPriority != "":
			ps.Add(lp.Key("min_priority"), "the last lane takes every priority the lanes before leave: leave min_priority out")
		case last:
		case l.MinPriority == "":
			ps.Add(lp.Key("min_priority"), "is required on every lane but the last: the lowest priority the lane takes (low, normal, high or 1-100)")
		default:
			var err error
			if p, err = threshold(l.MinPriority); err != nil {
				ps.Add(lp.Key("min_priority"), "%v%s", err, orZero(l.MinPriority, ": 0 takes every priority, which only the last lane does (leave min_priority out there)"))
				break
			}
			switch {
			case prevOK && p >= prev:
				ps.Add(lp.Key("min_priority"), "%s must be below the lane before's (%s): lanes go from the highest priority down", p, prev)
			default:
				ok = true
			}
		}
		prev, prevOK = p, ok
		out = append(out, pacing.Lane{Name: l.Name, MinPriority: p})
	}
	return out
}

// matching is what the budget covers, as pacing matches intents
// (pacing/match.go): the one place a dimension's policy field meets
// pacing's.
func (b Budget) matching() pacing.Where {
	return pacing.Where{Channels: b.Channels, Routes: b.Routes}
}

// vocabulary is what the document names that budgets' values are checked
// against.
func (d *Document) vocabulary() pacing.Vocabulary {
	return pacing.Vocabulary{Channels: d.Channels}
}

// shadowedBy returns the first budget before budget i that covers every
// intent budget i covers (-1 when none does): budget i could never pace
// one (pacing.Where.CoveredBy).
func shadowedBy(d *Document, i int) int {
	b := d.Budgets[i].matching()
	for j, e := range d.Budgets[:i] {
		if b.CoveredBy(e.matching(), d.vocabulary()) {
			return j
		}
	}
	return -1
}

// formatRate writes a rate as a policy does: 2000, 0.5.
func formatRate(r float64) string { return strconv.FormatFloat(r, 'f', -1, 64) }

// DescribeBudget says what a budget does, in words: its rate and burst,
// the intents it covers and its lanes.
func DescribeBudget(b Budget) string {
	floor := ""
	if b.MinRate != 0 {
		floor = ", min rate " + formatRate(b.MinRate) + "/s"
	}
	return fmt.Sprintf("%s/s, burst %d%s, %s, lanes %s",
		formatRate(b.Rate), b.EffectiveBurst(), floor, b.matching().Covers(), describeLanes(b))
}

// describeLanes lists a budget's lanes with the priorities each takes.
func describeLanes(b Budget) string {
	lanes := b.EffectiveLanes()
	parts := make([]string, len(lanes))
	for i, l := range lanes {
		switch {
		case i < len(lanes)-1:
			p := l.MinPriority
			if q, err := capping.ParsePriority(p); err == nil {
				p = q.String() // 75 reads high
			}
			parts[i] = fmt.Sprintf("%s (%s and up)", l.Name, p)
		case len(lanes) == 1:
			parts[i] = l.Name + " (every priority)"
		default:
			parts[i] = l.Name + " (the rest)"
		}
	}
	return strings.Join(parts, ", ")
}

// threshold reads the priority a lane or a reservation starts at: low,
// normal, high or a whole number from 1 to 100 (0 would take every
// priority, which is no threshold).
func threshold(s string) (capping.Priority, error) {
	if p, err := capping.ParsePriority(s); err == nil && p > 0 {
		return p, nil
	}
	return 0, fmt.Errorf("%q is not low, normal, high or a whole number from 1 to %d", s, capping.MaxPriority)
}

// orZero is why, for a threshold written 0; "" for any other.
func orZero(s, why string) string {
	if s == "0" {
		return why
	}
	return ""
}
