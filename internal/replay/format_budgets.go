package replay

// The budgets' rows of a report: each budget's pacing on each side, per
// lane when it has several.

import (
	"slices"
	"strconv"
	"time"
)

// budgetRows are a section per budget (of any side, the last side's
// first): its rate and burst, what it paced, the longest wait, when its
// lanes drained, what expired for it and the exempt sends charged, then
// the same per lane when it has several. A side whose policy has no such
// budget shows "-" (an empty CSV field).
func (r *Report) budgetRows() []row {
	var names []string
	for i := len(r.Sides) - 1; i >= 0; i-- {
		for _, b := range r.Sides[i].Budgets {
			if !slices.Contains(names, b.Budget) {
				names = append(names, b.Budget)
			}
		}
	}
	var rows []row
	for _, name := range names {
		bs := make([]*BudgetStats, len(r.Sides))
		lanes := 0
		for i, s := range r.Sides {
			for _, b := range s.Budgets {
				if b.Budget == name {
					bs[i] = b
					lanes = max(lanes, len(b.Lanes))
				}
			}
		}
		section := "budget " + name
		add := func(key, csvKey string, f func(*BudgetStats) (table, csv string)) {
			x := row{section: section, key: key, csvKey: csvKey}
			for _, b := range bs {
				t, c := "-", ""
				if b != nil {
					t, c = f(b)
				}
				x.text, x.csv = append(x.text, t), append(x.csv, c)
			}
			rows = append(rows, x)
		}
		num := func(n int64) (string, string) { v := strconv.FormatInt(n, 10); return v, v }
		add("rate per second", "", func(b *BudgetStats) (string, string) {
			v := strconv.FormatFloat(b.Rate, 'f', -1, 64)
			return v, v
		})
		add("burst", "", func(b *BudgetStats) (string, string) { return num(int64(b.Burst)) })
		add("paced", "", func(b *BudgetStats) (string, string) { return num(b.Paced) })
		add("longest wait", "longest wait ms", func(b *BudgetStats) (string, string) { return waitCells(b.LongestWaitMs) })
		add("drain end", "", func(b *BudgetStats) (string, string) { return r.timeCells(b.DrainEnd) })
		add("expired at arrival", "", func(b *BudgetStats) (string, string) { return num(b.ExpiredAtArrival) })
		add("expired waiting", "", func(b *BudgetStats) (string, string) { return num(b.ExpiredWaiting) })
		add("exempt charged", "", func(b *BudgetStats) (string, string) { return num(b.ExemptCharged) })
		if lanes < 2 {
			continue
		}
		var laneNames []string
		for _, b := range bs {
			for _, l := range b.lanesOrNone() {
				if !slices.Contains(laneNames, l.Lane) {
					laneNames = append(laneNames, l.Lane)
				}
			}
		}
		for _, ln := range laneNames {
			lane := func(f func(*LaneStats) (string, string)) func(*BudgetStats) (string, string) {
				return func(b *BudgetStats) (string, string) {
					for i := range b.Lanes {
						if b.Lanes[i].Lane == ln {
							return f(&b.Lanes[i])
						}
					}
					return "-", ""
				}
			}
			add("lane "+ln+": paced", "", lane(func(l *LaneStats) (string, string) { return num(l.Paced) }))
			add("lane "+ln+": longest wait", "lane "+ln+": longest wait ms", lane(func(l *LaneStats) (string, string) { return waitCells(l.LongestWaitMs) }))
			add("lane "+ln+": drain end", "", lane(func(l *LaneStats) (string, string) { return r.timeCells(l.DrainEnd) }))
		}
	}
	return rows
}

// lanesOrNone are b's lanes (none for a side without the budget).
func (b *BudgetStats) lanesOrNone() []LaneStats {
	if b == nil {
		return nil
	}
	return b.Lanes
}

// waitCells are a wait in ms: 2.5s in the table, 2500 in the CSV.
func waitCells(ms int64) (string, string) {
	return (time.Duration(ms) * time.Millisecond).String(), strconv.FormatInt(ms, 10)
}

// timeCells are a drain end: the time of day in UTC in the table (with its
// date when it is not the day of the last record), RFC 3339 in the CSV; "-"
// and empty when nothing left a lane.
func (r *Report) timeCells(t time.Time) (string, string) {
	if t.IsZero() {
		return "-", ""
	}
	t = t.UTC()
	table := t.Format("15:04:05.999")
	if y, m, d := t.Date(); r.Last.IsZero() || y != r.Last.UTC().Year() || m != r.Last.UTC().Month() || d != r.Last.UTC().Day() {
		table = t.Format("01-02 ") + table
	}
	return table, t.Format(time.RFC3339Nano)
}

// deferRows are the total rows about deferral and cancellation, shown in
// the table only when a side has some.
var deferRows = map[string]bool{"cancelled": true, "deferred": true, "deferred again": true, "defer expired": true, "waiting at end": true}
