package pacing

// Budgets as the worker uses them: which budget and lane an intent waits
// in, and the topic of each lane.

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/capper-dev/capper/internal/capping"
)

// Budget is one provider budget: at most Rate releases a second (all
// workers together) with up to Burst above it, for the intents its Where
// covers (match.go). Lanes are in precedence order: an intent waits in the
// first lane whose MinPriority it reaches.
type Budget struct {
	Name  string
	Rate  float64
	Burst int
	// MinRate is the least its effective rate drops to while its provider
	// throttles (throttle.go).
	MinRate float64
	Where
	Lanes []Lane
}

// Lane is a budget's queue for a band of priorities: intents of priority
// MinPriority or higher (the last lane takes every priority).
type Lane struct {
	Name        string
	MinPriority capping.Priority
}

// DefaultLane is the one lane of a budget that names none.
const DefaultLane = "marketing"

// NamePattern is what a budget's and a lane's name may be: they name
// Kafka topics and metric labels.
var NamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,47}$`)

// Set is the budgets of a policy version, in the order the policy lists
// them (the first that covers an intent is its budget). The zero Set and
// a nil *Set pace nothing.
type Set struct {
	budgets []Budget
	exempt  []string
}

// NewSet checks budgets (the policy checks them at their paths first;
// this is the last word for anyone else) and returns their set.
func NewSet(budgets []Budget) (*Set, error) {
	seen := map[string]bool{}
	for i, b := range budgets {
		switch {
		case !NamePattern.MatchString(b.Name):
			return nil, fmt.Errorf("budget %d: name %q does not match %s", i, b.Name, NamePattern)
		case seen[b.Name]:
			return nil, fmt.Errorf("budget %q: named twice", b.Name)
		case !(b.Rate > 0):
			return nil, fmt.Errorf("budget %q: rate %v must be above 0", b.Name, b.Rate)
		case b.Burst < 1:
			return nil, fmt.Errorf("budget %q: burst %d must be at least 1", b.Name, b.Burst)
		case len(b.Lanes) == 0:
			return nil, fmt.Errorf("budget %q: no lane", b.Name)
		}
		seen[b.Name] = true
		lanes := map[string]bool{}
		for j, l := range b.Lanes {
			switch {
			case !NamePattern.MatchString(l.Name):
				return nil, fmt.Errorf("budget %q: lane %d: name %q does not match %s", b.Name, j, l.Name, NamePattern)
			case lanes[l.Name]:
				return nil, fmt.Errorf("budget %q: lane %q named twice", b.Name, l.Name)
			case j == len(b.Lanes)-1 && l.MinPriority != 0:
				return nil, fmt.Errorf("budget %q: the last lane %q takes every priority (min_priority 0)", b.Name, l.Name)
			case j > 0 && l.MinPriority >= b.Lanes[j-1].MinPriority:
				return nil, fmt.Errorf("budget %q: lane %q: min_priority %s must be below the lane before's (%s)", b.Name, l.Name, l.MinPriority, b.Lanes[j-1].MinPriority)
			}
			lanes[l.Name] = true
		}
	}
	return &Set{budgets: slices.Clone(budgets)}, nil
}

// Budgets returns the set's budgets, in order.
func (s *Set) Budgets() []Budget {
	if s == nil {
		return nil
	}
	return s.budgets
}

// Len is the number of budgets.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.budgets)
}

// Budget returns the budget named name.
func (s *Set) Budget(name string) (*Budget, bool) {
	if s == nil {
		return nil, false
	}
	for i := range s.budgets {
		if s.budgets[i].Name == name {
			return &s.budgets[i], true
		}
	}
	return nil, false
}

// Place is where an intent waits: a budget and one of its lanes (indexes
// into the set and the budget's lanes); Retry: the lane's retry topic
// (sends handed back after their provider throttled them, released ahead
// of the lane's own records).
type Place struct {
	Budget, Lane int
	Retry        bool
}

// Match returns the budget and lane of an intent: the first budget that
// covers it, the first of its lanes its priority reaches; ok is false for
// an intent no budget covers (it is not paced).
func (s *Set) Match(in Intent) (Place, bool) {
	if s == nil {
		return Place{}, false
	}
	for i := range s.budgets {
		b := &s.budgets[i]
		if !b.covers(&in) {
			continue
		}
		for j, l := range b.Lanes {
			if in.Priority >= l.MinPriority {
				return Place{Budget: i, Lane: j}, true
			}
		}
	}
	return Place{}, false
}

// Topic is the topic the intents of a budget's lane wait in:
// <prefix>.<budget>.<lane>.
func Topic(prefix, budget, lane string) string { return prefix + "." + budget + "." + lane }

// RetrySuffix ends a lane's retry topic: <prefix>.<budget>.<lane>.retry
// (no lane's topic ends so: a name has no dot).
const RetrySuffix = ".retry"

// RetryTopic is the topic where the sends of a lane that their provider
// throttled, handed back by the sender, wait to be released again: ahead
// of the lane's own records.
func RetryTopic(prefix, budget, lane string) string { return Topic(prefix, budget, lane) + RetrySuffix }

// Topics returns the topics of every lane of every budget, in order.
func (s *Set) Topics(prefix string) []string {
	var ts []string
	for _, b := range s.Budgets() {
		for _, l := range b.Lanes {
			ts = append(ts, Topic(prefix, b.Name, l.Name))
		}
	}
	return ts
}

// RetryTopics returns the retry topics of every lane of every budget, in
// order.
func (s *Set) RetryTopics(prefix string) []string {
	ts := s.Topics(prefix)
	for i := range ts {
		ts[i] += RetrySuffix
	}
	return ts
}

// Of returns the place whose topic (a lane's, or its retry topic) is
// topic.
func (s *Set) Of(prefix, topic string) (Place, bool) {
	lane, retry := strings.CutSuffix(topic, RetrySuffix)
	for i, b := range s.Budgets() {
		for j, l := range b.Lanes {
			if Topic(prefix, b.Name, l.Name) == lane {
				return Place{i, j, retry}, true
			}
		}
	}
	return Place{}, false
}

// WithExempt returns the set with the policy's exempt categories: their
// intents are never held (they take a budget's tokens ahead of every
// lane).
func (s *Set) WithExempt(categories []string) *Set {
	c := &Set{}
	if s != nil {
		*c = *s
	}
	c.exempt = slices.Clone(categories)
	return c
}

// Exempt reports whether an intent of category is never held.
func (s *Set) Exempt(category string) bool {
	return s != nil && slices.Contains(s.exempt, category)
}
