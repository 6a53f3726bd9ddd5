package replay

// A report's three renderings: a table for people, JSON and CSV for tools.

import (
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/capping"
)

// WriteJSON writes the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// row is one line of the table and the CSV: a section, a key, a value per
// side. A row of text (a budget's rate, wait, drain end) has its table
// cells in text and its CSV fields in csv (under csvKey when it is set),
// and no change column.
type row struct {
	section, key string
	vals         []int64
	text, csv    []string
	csvKey       string
}

// nrow is a row of numbers.
func nrow(section, key string, vals []int64) row { return row{section: section, key: key, vals: vals} }

func (r *Report) rows() []row {
	var rows []row
	get := func(f func(*Stats) int64) []int64 {
		v := make([]int64, len(r.Sides))
		for i, s := range r.Sides {
			v[i] = f(s)
		}
		return v
	}
	for _, t := range []struct {
		k string
		f func(*Stats) int64
	}{
		{"intents", func(s *Stats) int64 { return s.Intents }},
		{"allowed", func(s *Stats) int64 { return s.Allowed }},
		{"capped", func(s *Stats) int64 { return s.Capped }},
		{"duplicate", func(s *Stats) int64 { return s.Duplicate }},
		{"exempt", func(s *Stats) int64 { return s.Exempt }},
		{"invalid", func(s *Stats) int64 { return s.Invalid }},
		{"cancelled", func(s *Stats) int64 { return s.Cancelled }},
		{"deferred", func(s *Stats) int64 { return s.Deferred }},
		{"deferred again", func(s *Stats) int64 { return s.Hops }},
		{"defer expired", func(s *Stats) int64 { return s.DeferExpired }},
		{"waiting at end", func(s *Stats) int64 { return s.Waiting }},
		{"users", func(s *Stats) int64 { return s.Users }},
	} {
		rows = append(rows, nrow("total", t.k, get(t.f)))
	}
	for _, by := range []struct {
		section string
		m       func(*Stats) map[string]int64
	}{
		{"capped per segment", func(s *Stats) map[string]int64 { return s.CappedBySegment }},
		{"capped per limit", func(s *Stats) map[string]int64 { return s.CappedByLimit }},
		{"capped per channel", func(s *Stats) map[string]int64 { return s.CappedByChannel }},
		{"capped per campaign", func(s *Stats) map[string]int64 { return s.CappedByCampaign }},
	} {
		keys := map[string]bool{}
		for _, s := range r.Sides {
			for k := range by.m(s) {
				keys[k] = true
			}
		}
		// Most capped (by the last side, the candidate) first.
		sorted := slices.SortedFunc(maps.Keys(keys), func(a, b string) int {
			last := by.m(r.Sides[len(r.Sides)-1])
			return cmp.Or(cmp.Compare(last[b], last[a]), strings.Compare(a, b))
		})
		for _, k := range sorted {
			rows = append(rows, nrow(by.section, k, get(func(s *Stats) int64 { return by.m(s)[k] })))
		}
	}
	for i, l := range bucketLabels {
		rows = append(rows, nrow("users by allowed sends", l, get(func(s *Stats) int64 { return s.PerUser[i].Users })))
	}
	rows = append(rows, r.planRows(get)...)
	rows = append(rows, r.budgetRows()...)
	if c := r.Change; c != nil {
		vs := r.versus()
		rows = append(rows,
			nrow(vs, "users with fewer sends", []int64{0, c.Fewer}),
			nrow(vs, "users with more sends", []int64{0, c.More}),
			nrow(vs, "users with the same", []int64{0, c.Same}),
			nrow(vs, "sends lost", []int64{0, c.SendsLost}),
			nrow(vs, "sends gained", []int64{0, c.SendsWon}))
	}
	return rows
}

// versus names the comparison of the two sides: "candidate vs baseline",
// "plans vs fcfs".
func (r *Report) versus() string {
	return r.Sides[1].Side + " vs " + r.Sides[0].Side
}

// planRows are a replay with plans' rows: per priority (the highest first)
// and what the bookings did.
func (r *Report) planRows(get func(func(*Stats) int64) []int64) []row {
	if r.Sides[0].Plans == nil {
		return nil
	}
	var prios []string // every side's, the highest first
	for _, s := range r.Sides {
		for _, p := range s.ByPriority {
			if !slices.Contains(prios, p.Priority) {
				prios = append(prios, p.Priority)
			}
		}
	}
	slices.SortStableFunc(prios, func(a, b string) int {
		pa, _ := capping.ParsePriority(a)
		pb, _ := capping.ParsePriority(b)
		return int(pb) - int(pa)
	})
	of := func(s *Stats, prio string) PriorityStats {
		for _, p := range s.ByPriority {
			if p.Priority == prio {
				return p
			}
		}
		return PriorityStats{}
	}
	var rows []row
	for _, by := range []struct {
		section string
		f       func(PriorityStats) int64
	}{
		{"delivered per priority", func(p PriorityStats) int64 { return p.Delivered }},
		{"capped per priority", func(p PriorityStats) int64 { return p.Capped }},
		{"held for a plan per priority", func(p PriorityStats) int64 { return p.Held }},
	} {
		for _, prio := range prios {
			rows = append(rows, nrow(by.section, prio, get(func(s *Stats) int64 { return by.f(of(s, prio)) })))
		}
	}
	for _, t := range []struct {
		k string
		f func(*PlanStats) int64
	}{
		{"planned intents", func(p *PlanStats) int64 { return p.Planned }},
		{"planned delivered", func(p *PlanStats) int64 { return p.PlannedDelivered }},
		{"lower-priority given up", func(p *PlanStats) int64 { return p.GivenUp }},
		{"  for a booking then used", func(p *PlanStats) int64 { return p.BookingUsed }},
		{"  for a booking not used", func(p *PlanStats) int64 { return p.BookingUnused }},
	} {
		rows = append(rows, nrow("plans", t.k, get(func(s *Stats) int64 { return t.f(s.Plans) })))
	}
	return rows
}

// MaxTableRows bounds each "capped per" section of the table (JSON and CSV
// have every row).
const MaxTableRows = 15

// WriteTable writes the report for people.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "replay of %s: %d records", r.Source, r.Records)
	if !r.First.IsZero() {
		fmt.Fprintf(w, ", decided at %s .. %s", r.First.UTC().Format(time.RFC3339), r.Last.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "\nsnapshot: %s\n", cmp.Or(r.Snapshot, "none (every user in no segment)"))
	for _, s := range r.Sides {
		fmt.Fprintf(w, "%s: %s\n", s.Side, s.Policy)
	}
	fmt.Fprintln(w)
	rows := r.rows()
	keyW := 0
	for _, x := range rows {
		keyW = max(keyW, len(x.key)+2, len(x.section))
	}
	keyW = min(keyW, 48)
	cols := make([]string, 0, 3)
	for _, s := range r.Sides {
		cols = append(cols, s.Side)
	}
	if len(r.Sides) == 2 {
		cols = append(cols, "change")
	}
	colW := 11 // wider for a long cell (a drain end on another day)
	for _, x := range rows {
		for _, c := range x.text {
			colW = max(colW, len(c)+1)
		}
	}
	line := func(key string, cells []string) {
		fmt.Fprintf(w, "%-*s", keyW, key)
		for _, c := range cells {
			fmt.Fprintf(w, "%*s", colW, c)
		}
		fmt.Fprintln(w)
	}
	section, shown := "", 0
	for _, x := range rows {
		if len(r.Sides) == 2 && x.section == r.versus() || deferRows[x.key] && !slices.ContainsFunc(x.vals, func(v int64) bool { return v != 0 }) {
			continue // (the deferral rows only where a policy deferred)
		}
		if x.section != section {
			section, shown = x.section, 0
			if x.section == "total" {
				line("", cols)
			} else {
				fmt.Fprintln(w, x.section)
			}
		}
		if shown++; shown > MaxTableRows && strings.HasPrefix(section, "capped per") {
			if shown == MaxTableRows+1 {
				fmt.Fprintln(w, "  ... (every row in -o json and -o csv)")
			}
			continue
		}
		cells := make([]string, 0, 3)
		for _, v := range x.vals {
			cells = append(cells, strconv.FormatInt(v, 10))
		}
		if len(x.vals) == 2 {
			cells = append(cells, signed(x.vals[1]-x.vals[0]))
		}
		cells = append(cells, x.text...)
		line("  "+clip(x.key, keyW-2), cells)
	}
	if c := r.Change; c != nil {
		fmt.Fprintf(w, "\n%s: %d users would get fewer sends (%d sends less), %d more (%d sends more), %d the same\n",
			r.versus(), c.Fewer, c.SendsLost, c.More, c.SendsWon, c.Same)
	}
	if n := r.Sides[len(r.Sides)-1].Invalid; n > 0 || len(r.Invalid) > 0 {
		fmt.Fprintf(w, "\ninvalid records (dead-lettered by a worker; the first %d):\n", len(r.Invalid))
		for _, x := range r.Invalid {
			fmt.Fprintf(w, "  %s: %s\n", x.Pos, x.Reason)
		}
	}
	return nil
}

// clip shortens a key (a campaign id may be 256 bytes) to n bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func signed(v int64) string {
	switch {
	case v > 0:
		return "+" + strconv.FormatInt(v, 10)
	case v < 0:
		return strconv.FormatInt(v, 10)
	}
	return ""
}

// WriteCSV writes one row per figure: section, key, then a column per side.
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	head := []string{"section", "key"}
	for _, s := range r.Sides {
		head = append(head, s.Side)
	}
	_ = cw.Write(head)
	for _, x := range r.rows() {
		rec := []string{x.section, cmp.Or(x.csvKey, x.key)}
		rec = append(rec, x.csv...)
		for i, v := range x.vals {
			if len(r.Sides) == 2 && x.section == r.versus() && i == 0 {
				rec = append(rec, "")
				continue
			}
			rec = append(rec, strconv.FormatInt(v, 10))
		}
		_ = cw.Write(rec)
	}
	for _, x := range r.Invalid {
		rec := []string{"invalid record", x.Pos + ": " + x.Reason}
		for range r.Sides {
			rec = append(rec, "")
		}
		_ = cw.Write(rec)
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// Write writes the report in format (table, json or csv).
func (r *Report) Write(w io.Writer, format string) error {
	switch format {
	case "", "table":
		return r.WriteTable(w)
	case "json":
		return r.WriteJSON(w)
	case "csv":
		return r.WriteCSV(w)
	}
	return fmt.Errorf("output format %q: want table, json or csv", format)
}
