package policy

// A limit in words: what it allows, counts and reserves, and what becomes
// of what it caps (Describe; the diff's lines).

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

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
