package replay

// What a replay found, per side, and its three renderings: a table for
// people, JSON and CSV for tools.

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
	"github.com/capper-dev/capper/internal/dispatch"
)

// MaxListed is how many invalid records a report lists (all are counted).
const MaxListed = 20

// Report is what a replay found.
type Report struct {
	Source   string `json:"source"`
	Snapshot string `json:"snapshot"`
	Records  int64  `json:"records"`
	// First and Last are the earliest and latest decision times.
	First time.Time `json:"first"`
	Last  time.Time `json:"last"`
	// Sides: the baseline first when there is one, then the candidate.
	Sides []*Stats `json:"sides"`
	// Change compares the candidate with the baseline, per user.
	Change *Change `json:"change,omitempty"`
	// Invalid lists the first MaxListed records that could not be decided.
	Invalid []InvalidRecord `json:"invalid,omitempty"`
}

// Stats are one side's counts.
type Stats struct {
	Side      string `json:"side"`   // baseline or candidate
	Policy    string `json:"policy"` // its file
	Intents   int64  `json:"intents"`
	Allowed   int64  `json:"allowed"`
	Capped    int64  `json:"capped"`
	Duplicate int64  `json:"duplicate"`
	Exempt    int64  `json:"exempt"`
	Invalid   int64  `json:"invalid"`
	// Capped per segment (the snapshot's, "none"), per limit (segment/limit),
	// per channel and per campaign.
	CappedBySegment  map[string]int64 `json:"capped_by_segment"`
	CappedByLimit    map[string]int64 `json:"capped_by_limit"`
	CappedByChannel  map[string]int64 `json:"capped_by_channel"`
	CappedByCampaign map[string]int64 `json:"capped_by_campaign"`
	// Users with a valid intent, and how many sends each would have got.
	Users   int64         `json:"users"`
	PerUser []UsersBucket `json:"allowed_per_user"`

	counts [4]map[string]*int64 // the capped-per maps while counting
}

// UsersBucket is how many users got a number of sends in a range.
type UsersBucket struct {
	Sends string `json:"sends"` // "0", "4-5", ">10"
	Users int64  `json:"users"`
}

// Change is the candidate against the baseline, per user.
type Change struct {
	Fewer     int64 `json:"users_fewer_sends"`
	More      int64 `json:"users_more_sends"`
	Same      int64 `json:"users_same_sends"`
	SendsLost int64 `json:"sends_lost"` // over the users with fewer
	SendsWon  int64 `json:"sends_gained"`
}

// InvalidRecord is a record that could not be decided, and why.
type InvalidRecord struct {
	Pos    string `json:"at"`
	Reason string `json:"reason"`
}

func newStats(side, policy string) *Stats {
	s := &Stats{Side: side, Policy: policy}
	for i := range s.counts {
		s.counts[i] = map[string]*int64{}
	}
	return s
}

// inc counts k. The count is behind a pointer: assigning to an existing
// string key stores the new key's bytes, and an intent's strings are views
// of a buffer the source reuses; a new key is copied.
func inc(m map[string]*int64, k string) {
	if p := m[k]; p != nil {
		*p++
		return
	}
	n := int64(1)
	m[strings.Clone(k)] = &n
}

// finish turns the counts into the report's maps.
func (s *Stats) finish() {
	for i, dst := range []*map[string]int64{&s.CappedBySegment, &s.CappedByLimit, &s.CappedByChannel, &s.CappedByCampaign} {
		*dst = make(map[string]int64, len(s.counts[i]))
		for k, p := range s.counts[i] {
			(*dst)[k] = *p
		}
	}
}

func (s *Stats) add(in *dispatch.Intent, o *Outcome) {
	s.Intents++
	switch o.Decision.Outcome {
	case capping.Allowed:
		s.Allowed++
	case capping.Duplicate:
		s.Duplicate++
	case capping.Exempt:
		s.Exempt++
	case capping.Invalid:
		s.Invalid++
	case capping.Capped:
		s.Capped++
		inc(s.counts[0], o.Segment)
		inc(s.counts[1], o.Segment+"/"+o.Decision.Limit)
		inc(s.counts[2], in.Channel)
		inc(s.counts[3], in.CampaignID)
	}
}

func (r *Report) span(t time.Time) {
	if r.First.IsZero() || t.Before(r.First) {
		r.First = t
	}
	if t.After(r.Last) {
		r.Last = t
	}
}

// noteInvalid lists a record some side could not decide (the first reason).
func (r *Report) noteInvalid(pos string, outs []Outcome) {
	if len(r.Invalid) >= MaxListed {
		return
	}
	for _, o := range outs {
		if o.Invalid != nil {
			r.Invalid = append(r.Invalid, InvalidRecord{Pos: pos, Reason: o.Invalid.Error()})
			return
		}
	}
}

// userCounts are the sends each user was allowed, per side (saturating).
type userCounts struct {
	sides int
	m     map[uint64][2]uint16
}

func newUserCounts(sides int) *userCounts {
	return &userCounts{sides: sides, m: map[uint64][2]uint16{}}
}

func (u *userCounts) add(uid uint64, side int, allowed bool) {
	c := u.m[uid]
	if allowed && c[side] < 65535 {
		c[side]++
	}
	u.m[uid] = c
}

func (u *userCounts) len() int { return len(u.m) }

var bucketLabels = []string{"0", "1", "2", "3", "4-5", "6-10", ">10"}

func bucketOf(n uint16) int {
	switch {
	case n <= 3:
		return int(n)
	case n <= 5:
		return 4
	case n <= 10:
		return 5
	}
	return 6
}

func (u *userCounts) distribution(side int) []UsersBucket {
	out := make([]UsersBucket, len(bucketLabels))
	for i, l := range bucketLabels {
		out[i].Sends = l
	}
	for _, c := range u.m {
		out[bucketOf(c[side])].Users++
	}
	return out
}

func (u *userCounts) change() *Change {
	var c Change
	for _, x := range u.m {
		switch {
		case x[1] < x[0]:
			c.Fewer++
			c.SendsLost += int64(x[0] - x[1])
		case x[1] > x[0]:
			c.More++
			c.SendsWon += int64(x[1] - x[0])
		default:
			c.Same++
		}
	}
	return &c
}

// WriteJSON writes the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// row is one line of the table and the CSV: a section, a key, a value per side.
type row struct {
	section, key string
	vals         []int64
}

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
		{"users", func(s *Stats) int64 { return s.Users }},
	} {
		rows = append(rows, row{"total", t.k, get(t.f)})
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
			rows = append(rows, row{by.section, k, get(func(s *Stats) int64 { return by.m(s)[k] })})
		}
	}
	for i, l := range bucketLabels {
		rows = append(rows, row{"users by allowed sends", l, get(func(s *Stats) int64 { return s.PerUser[i].Users })})
	}
	if c := r.Change; c != nil {
		rows = append(rows,
			row{"candidate vs baseline", "users with fewer sends", []int64{0, c.Fewer}},
			row{"candidate vs baseline", "users with more sends", []int64{0, c.More}},
			row{"candidate vs baseline", "users with the same", []int64{0, c.Same}},
			row{"candidate vs baseline", "sends lost", []int64{0, c.SendsLost}},
			row{"candidate vs baseline", "sends gained", []int64{0, c.SendsWon}})
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
	line := func(key string, cells []string) {
		fmt.Fprintf(w, "%-*s", keyW, key)
		for _, c := range cells {
			fmt.Fprintf(w, "%11s", c)
		}
		fmt.Fprintln(w)
	}
	section, shown := "", 0
	for _, x := range rows {
		if x.section == "candidate vs baseline" {
			continue
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
		line("  "+clip(x.key, keyW-2), cells)
	}
	if c := r.Change; c != nil {
		fmt.Fprintf(w, "\ncandidate vs baseline: %d users would get fewer sends (%d sends less), %d more (%d sends more), %d the same\n",
			c.Fewer, c.SendsLost, c.More, c.SendsWon, c.Same)
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
		rec := []string{x.section, x.key}
		for i, v := range x.vals {
			if x.section == "candidate vs baseline" && i == 0 {
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
