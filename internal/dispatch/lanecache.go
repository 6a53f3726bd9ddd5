package dispatch

// Names and small values the paced path makes once rather than per held or
// released intent (each was an allocation per record: docs/benchmarks.md,
// "Holding with fewer allocations").

import "github.com/capper-dev/capper/internal/pacing"

// laneTopics names the lane topics of a set of budgets, each made once
// (not once per held intent). Stage 1's alone, like recent.
type laneTopics struct {
	set   *pacing.Set
	names map[pacing.Place]string
}

func (l *laneTopics) of(set *pacing.Set, pl pacing.Place, prefix string) string {
	if l.set != set {
		l.set, l.names = set, map[pacing.Place]string{}
	}
	t, ok := l.names[pl]
	if !ok {
		b := &set.Budgets()[pl.Budget]
		topic := pacing.Topic
		if pl.Retry {
			topic = pacing.RetryTopic
		}
		t = topic(prefix, b.Name, b.Lanes[pl.Lane].Name)
		l.names[pl] = t
	}
	return t
}

// laneNames interns the capper-lane values a worker reads (one string per
// lane, not one per released record). Stage 1's alone.
type laneNames map[string][2]string

func (l *laneNames) of(v []byte) (budget, lane string) {
	if n, ok := (*l)[string(v)]; ok { // no allocation to look up
		return n[0], n[1]
	}
	s := string(v)
	for i := range len(s) {
		if s[i] == '/' {
			budget, lane = s[:i], s[i+1:]
		}
	}
	if *l == nil {
		*l = laneNames{}
	}
	if len(*l) < 1024 { // a bound: the values come from records
		(*l)[s] = [2]string{budget, lane}
	}
	return budget, lane
}
