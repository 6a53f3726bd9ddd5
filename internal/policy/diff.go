package policy

// Diff: what a policy change does, in words, for a reviewer (capper policy
// diff). Limits are matched by name within a segment; a limit whose only
// change is its name reads as a rename, since counts follow the scope (what
// a limit counts: where and per), not the name.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Diff returns one line per change from old to new: the segments (added,
// removed, reordered), their limits and what they hold back (on_cap,
// max_defer, quiet_hours), default_policy, the budgets (added, removed,
// reordered, their rate, burst, coverage and lanes), then the document's
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

// onCap says what becomes of the intents a limit caps, its policy's
// on_cap and max_defer filling what it leaves out (as the worker reads
// them).
func onCap(l Limit, h Holding) string {
	if cmp.Or(l.OnCap, h.OnCap, "suppress") == "suppress" {
		return "suppressed"
	}
	return "deferred for up to " + shortDuration(cmp.Or(l.MaxDefer, h.MaxDefer, DefaultMaxDefer).D())
}

// describeIn is Describe with what becomes of a capped intent when it is
// deferred.
func describeIn(l Limit, h Holding) string {
	if d := onCap(l, h); d != "suppressed" {
		return Describe(l) + ", capped intents " + d
	}
	return Describe(l)
}

// quiet says when quiet hours hold intents back, in words.
func quiet(q *QuietHours) string {
	s := q.From + "-" + q.To + " in the user's time zone, "
	if len(q.Channels) == 0 {
		s += "every channel"
	} else {
		c := slices.Clone(q.Channels)
		slices.Sort(c)
		s += "channels " + strings.Join(c, "|")
	}
	s += ", released over " + shortDuration(cmp.Or(q.Jitter, DefaultJitter).D())
	if q.IncludeExempt {
		s += ", exempt categories too"
	}
	return s
}

// limitChanges says what changed in one limit.
func limitChanges(o, n Limit) []string {
	var out []string
	if period(o) != period(n) {
		out = append(out, fmt.Sprintf("%s -> %s", period(o), period(n)))
	}
	if maxOf(o) != maxOf(n) {
		out = append(out, fmt.Sprintf("max %d -> %d", maxOf(o), maxOf(n)))
	}
	if scope(o) != scope(n) {
		out = append(out, fmt.Sprintf("counts %s -> %s (another scope: its counts are the sends recorded for it, none unless another limit already counts it)", scope(o), scope(n)))
	}
	if reserve(o) != reserve(n) {
		out = append(out, fmt.Sprintf("reserve %s -> %s", reserve(o), reserve(n)))
	}
	return out
}

// Describe says what a limit allows, in words.
func Describe(l Limit) string {
	s := fmt.Sprintf("at most %d %s, %s", maxOf(l), period(l), scope(l))
	if r := reserve(l); r != "none" {
		s += ", reserve " + r
	}
	return s
}

func period(l Limit) string {
	if l.Calendar != "" {
		return "per calendar " + l.Calendar
	}
	return "in any " + shortDuration(time.Duration(l.Window))
}

// shortDuration prints 24h as 24h and 168h as 7d, the way policies are
// written.
func shortDuration(d time.Duration) string {
	if d >= 48*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return strings.TrimSuffix(d.String(), "0s") // 1h30m0s -> 1h30m
	}
	return d.String()
}

func maxOf(l Limit) int {
	if l.Max == nil {
		return 0
	}
	return *l.Max
}

// scope is what a limit counts: its where (the channel shorthand read as
// where) and per.
func scope(l Limit) string {
	w := l.Where
	if l.Channel != "" && len(w.Channels) == 0 {
		w.Channels = []string{l.Channel}
	}
	var parts []string
	for _, f := range w.Lists() {
		v := slices.Clone(f.Values)
		slices.Sort(v)
		parts = append(parts, f.Key+" "+strings.Join(v, "|"))
	}
	s := "every intent"
	if len(parts) > 0 {
		s = "intents with " + strings.Join(parts, " and ")
	}
	if l.Per == "campaign" {
		s += ", per campaign"
	}
	return s
}

func reserve(l Limit) string {
	if l.Reserve == nil {
		return "none"
	}
	below := l.Reserve.Below
	if below == "" {
		below = DefaultBelow
	}
	return fmt.Sprintf("%d slots for %s priority", l.Reserve.Slots, below)
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
		if a, z := budgetChannels(*o), budgetChannels(b); a != z {
			add("budget %q: %s -> %s", b.Name, a, z)
		}
		if a, z := budgetRoutes(*o), budgetRoutes(b); a != z {
			add("budget %q: %s -> %s", b.Name, a, z)
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
