package policy

// Diff: what a policy change does, in words, for a reviewer (capper policy
// diff). Limits are matched by name within a segment; a limit whose only
// change is its name reads as a rename, since counts follow the scope (what
// a limit counts: where and per), not the name.

import (
	"fmt"
	"slices"
	"strings"
)

// Diff returns one line per change from old to new: the segments (added,
// removed, reordered), their limits and what they hold back (on_cap,
// max_defer, quiet_hours), default_policy, the budgets (added, removed,
// reordered, their rate, burst, min rate, coverage and lanes), then the document's
// settings. No lines: the two decide and pace alike.
func Diff(old, new *Document) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	oldNames, newNames := old.SegmentNames(), new.SegmentNames()
	for _, s := range new.Segments {
		o := findSegment(old, s.Name)
		if o == nil {
			add("segment %q: added, %s", s.Name, countLimits(s.Limits))
			for _, l := range s.Limits {
				add("segment %q: limit %q: %s", s.Name, l.Name, describeIn(l, s.Holding))
			}
			if q := s.QuietHours; q != nil {
				add("segment %q: quiet_hours: %s", s.Name, quiet(q))
			}
			continue
		}
		for _, line := range diffPolicy(Policy{Limits: o.Limits, Holding: o.Holding}, Policy{Limits: s.Limits, Holding: s.Holding}) {
			add("segment %q: %s", s.Name, line)
		}
	}
	for _, s := range old.Segments {
		if findSegment(new, s.Name) == nil {
			add("segment %q: removed; its users get default_policy", s.Name)
		}
	}
	if common := keepOrder(oldNames, newNames); !slices.Equal(common, keepOrder(newNames, oldNames)) {
		add("segment priority order: %s -> %s", strings.Join(common, ", "), strings.Join(keepOrder(newNames, oldNames), ", "))
	}
	for _, line := range diffPolicy(old.DefaultPolicy, new.DefaultPolicy) {
		add("default_policy: %s", line)
	}
	out = append(out, diffBudgets(old, new)...)
	out = append(out, diffUserLimits(old, new)...)

	lists := []struct {
		name     string
		old, new []string
	}{
		{"channels", old.Channels, new.Channels},
		{"categories", old.Categories, new.Categories},
		{"exempt_categories", old.ExemptCategories, new.ExemptCategories},
		{"overrides.campaigns", old.Overrides.Campaigns, new.Overrides.Campaigns},
		{"overrides.categories", old.Overrides.Categories, new.Overrides.Categories},
	}
	for _, l := range lists {
		if a, r := added(l.old, l.new), added(l.new, l.old); len(a)+len(r) > 0 {
			add("%s: %s", l.name, addedRemoved(a, r))
		}
	}
	for _, v := range []struct{ name, old, new string }{
		{"default_category", old.DefaultCategory, new.DefaultCategory},
		{"time_zone", old.TimeZone, new.TimeZone},
		{"week_start", old.WeekStart, new.WeekStart},
	} {
		if v.old != v.new {
			add("%s: %s -> %s", v.name, v.old, v.new)
		}
	}
	return out
}

// diffPolicy compares two versions of one policy: its limits (on_cap and
// max_defer as each limit ends up with them) and its quiet hours.
func diffPolicy(op, np Policy) []string {
	old, new := op.Limits, np.Limits
	var out []string
	var gone, born []Limit
	for _, l := range old {
		if findLimit(new, l.Name) == nil {
			gone = append(gone, l)
		}
	}
	for _, l := range new {
		if findLimit(old, l.Name) == nil {
			born = append(born, l)
		}
	}
	// A rename: the same limit under another name keeps its counts.
	for i := 0; i < len(gone); i++ {
		j := slices.IndexFunc(born, func(b Limit) bool {
			return sameBut(gone[i], b) && onCap(gone[i], op.Holding) == onCap(b, np.Holding)
		})
		if j < 0 {
			continue
		}
		out = append(out, fmt.Sprintf("limit %q: renamed to %q (counts kept)", gone[i].Name, born[j].Name))
		gone = slices.Delete(gone, i, i+1)
		born = slices.Delete(born, j, j+1)
		i--
	}
	for _, l := range new {
		o := findLimit(old, l.Name)
		if o == nil {
			if slices.ContainsFunc(born, func(b Limit) bool { return b.Name == l.Name }) {
				out = append(out, fmt.Sprintf("limit %q: added: %s", l.Name, describeIn(l, np.Holding)))
			}
			continue
		}
		for _, c := range limitChanges(*o, l) {
			out = append(out, fmt.Sprintf("limit %q: %s", l.Name, c))
		}
		if a, b := onCap(*o, op.Holding), onCap(l, np.Holding); a != b {
			out = append(out, fmt.Sprintf("limit %q: capped intents: %s -> %s", l.Name, a, b))
		}
	}
	for _, l := range gone {
		out = append(out, fmt.Sprintf("limit %q: removed (was %s)", l.Name, describeIn(l, op.Holding)))
	}
	if order(old, new) {
		out = append(out, "limit order (the first that denies is named): "+names(old)+" -> "+names(new))
	}
	switch oq, nq := op.QuietHours, np.QuietHours; {
	case oq == nil && nq != nil:
		out = append(out, "quiet_hours: added, "+quiet(nq))
	case oq != nil && nq == nil:
		out = append(out, "quiet_hours: removed (was "+quiet(oq)+")")
	case oq != nil && quiet(oq) != quiet(nq):
		out = append(out, "quiet_hours: "+quiet(oq)+" -> "+quiet(nq))
	}
	return out
}

// sameBut reports whether two limits differ only by name.
func sameBut(a, b Limit) bool {
	return period(a) == period(b) && maxOf(a) == maxOf(b) && scope(a) == scope(b) && reserve(a) == reserve(b)
}

func findSegment(d *Document, name string) *Segment {
	i := slices.IndexFunc(d.Segments, func(s Segment) bool { return s.Name == name })
	if i < 0 {
		return nil
	}
	return &d.Segments[i]
}

func findLimit(ls []Limit, name string) *Limit {
	i := slices.IndexFunc(ls, func(l Limit) bool { return l.Name == name })
	if i < 0 {
		return nil
	}
	return &ls[i]
}

func countLimits(ls []Limit) string {
	if len(ls) == 1 {
		return "1 limit"
	}
	return fmt.Sprintf("%d limits", len(ls))
}

// keepOrder is a's names that b has too, in a's order.
func keepOrder(a, b []string) []string {
	var out []string
	for _, n := range a {
		if slices.Contains(b, n) {
			out = append(out, n)
		}
	}
	return out
}

// order reports whether the limits both lists have are in another order.
func order(old, new []Limit) bool {
	return !slices.Equal(keepOrder(limitNames(old), limitNames(new)), keepOrder(limitNames(new), limitNames(old)))
}

func limitNames(ls []Limit) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.Name
	}
	return out
}

func names(ls []Limit) string { return strings.Join(limitNames(ls), ", ") }

// added is what b has and a does not.
func added(a, b []string) []string {
	var out []string
	for _, v := range b {
		if !slices.Contains(a, v) {
			out = append(out, v)
		}
	}
	return out
}

func addedRemoved(a, r []string) string {
	var parts []string
	if len(a) > 0 {
		parts = append(parts, "added "+strings.Join(a, ", "))
	}
	if len(r) > 0 {
		parts = append(parts, "removed "+strings.Join(r, ", "))
	}
	return strings.Join(parts, "; ")
}

// diffBudgets compares the budgets of two documents, matched by name (a
// budget's name names its topics: a renamed budget is another budget).
// Burst and lanes are compared as the worker reads them, defaults filled
// in.
func diffBudgets(old, new *Document) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	for _, b := range new.Budgets {
		o := findBudget(old, b.Name)
		if o == nil {
			add("budget %q: added: %s", b.Name, DescribeBudget(b))
			continue
		}
		if o.Rate != b.Rate {
			add("budget %q: rate %s/s -> %s/s", b.Name, formatRate(o.Rate), formatRate(b.Rate))
		}
		if a, z := o.EffectiveBurst(), b.EffectiveBurst(); a != z {
			add("budget %q: burst %d -> %d", b.Name, a, z)
		}
		// (A default min rate follows the rate: said when one is set.)
		if a, z := o.EffectiveMinRate(), b.EffectiveMinRate(); a != z && (o.MinRate != 0 || b.MinRate != 0) {
			add("budget %q: min rate %s/s -> %s/s", b.Name, formatRate(a), formatRate(z))
		}
		zs := b.matching().Covering()
		for k, a := range o.matching().Covering() {
			if z := zs[k]; a != z {
				add("budget %q: %s -> %s", b.Name, a, z)
			}
		}
		if a, z := describeLanes(*o), describeLanes(b); a != z {
			add("budget %q: lanes %s -> %s", b.Name, a, z)
		}
	}
	for _, b := range old.Budgets {
		if findBudget(new, b.Name) == nil {
			add("budget %q: removed (was %s)", b.Name, DescribeBudget(b))
		}
	}
	oldNames, newNames := budgetNames(old), budgetNames(new)
	if common := keepOrder(oldNames, newNames); !slices.Equal(common, keepOrder(newNames, oldNames)) {
		add("budget order (the first that covers an intent paces it): %s -> %s", strings.Join(common, ", "), strings.Join(keepOrder(newNames, oldNames), ", "))
	}
	return out
}

func findBudget(d *Document, name string) *Budget {
	i := slices.IndexFunc(d.Budgets, func(b Budget) bool { return b.Name == name })
	if i < 0 {
		return nil
	}
	return &d.Budgets[i]
}

func budgetNames(d *Document) []string {
	out := make([]string, len(d.Budgets))
	for i, b := range d.Budgets {
		out[i] = b.Name
	}
	return out
}
