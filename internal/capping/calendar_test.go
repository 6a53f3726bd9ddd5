package capping

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestCalendarDST: in America/New_York the calendar day of 2026-03-08 has
// 23 hours and that of 2026-11-01 has 25; a week or month holding them is
// an hour shorter or longer.
func TestCalendarDST(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	for _, tc := range []struct {
		at    time.Time
		c     Calendar
		start string
		hours float64
	}{
		{time.Date(2026, 3, 8, 12, 0, 0, 0, ny), Day, "2026-03-08T00:00:00-05:00", 23},
		{time.Date(2026, 3, 8, 1, 59, 59, 0, ny), Day, "2026-03-08T00:00:00-05:00", 23},
		{time.Date(2026, 3, 8, 3, 0, 0, 0, ny), Day, "2026-03-08T00:00:00-05:00", 23},
		{time.Date(2026, 11, 1, 1, 30, 0, 0, ny), Day, "2026-11-01T00:00:00-04:00", 25},
		{time.Date(2026, 11, 1, 23, 59, 0, 0, ny), Day, "2026-11-01T00:00:00-04:00", 25},
		{time.Date(2026, 11, 2, 0, 0, 0, 0, ny), Day, "2026-11-02T00:00:00-05:00", 24},
		{time.Date(2026, 3, 10, 9, 0, 0, 0, ny), Week, "2026-03-09T00:00:00-04:00", 168},
		{time.Date(2026, 3, 7, 9, 0, 0, 0, ny), Week, "2026-03-02T00:00:00-05:00", 167},
		{time.Date(2026, 11, 1, 9, 0, 0, 0, ny), Week, "2026-10-26T00:00:00-04:00", 169},
		{time.Date(2026, 3, 31, 23, 0, 0, 0, ny), Month, "2026-03-01T00:00:00-05:00", 31*24 - 1},
		{time.Date(2026, 11, 30, 23, 0, 0, 0, ny), Month, "2026-11-01T00:00:00-04:00", 30*24 + 1},
	} {
		start, end := period(tc.c, tc.at, ny, time.Monday)
		if got := start.In(ny).Format(time.RFC3339); got != tc.start || end.Sub(start).Hours() != tc.hours {
			t.Errorf("%s of %s: starts %s, %vh; want %s, %vh", tc.c, tc.at, got, end.Sub(start).Hours(), tc.start, tc.hours)
		}
	}
	// A zone whose DST change skips midnight itself (America/Santiago
	// springs from 24:00 to 01:00 on 2026-09-06): the day starts at 01:00.
	scl := mustZone(t, "America/Santiago")
	start, end := period(Day, time.Date(2026, 9, 6, 12, 0, 0, 0, scl), scl, time.Monday)
	if got := start.In(scl).Format(time.RFC3339); got != "2026-09-06T01:00:00-03:00" || end.Sub(start) != 23*time.Hour {
		t.Errorf("Santiago's skipped midnight: day starts %s, lasts %s", got, end.Sub(start))
	}
}

// TestCalendarMatchesReference compares the engine's calendar periods with
// the model's bisection search at random instants in zones from -12 to +14
// (half and quarter hours, DST in both hemispheres), for every week start.
func TestCalendarMatchesReference(t *testing.T) {
	zones := []string{"UTC", "Pacific/Kiritimati", "Etc/GMT+12", "Pacific/Apia", "Pacific/Chatham", "Asia/Kathmandu",
		"Australia/Lord_Howe", "America/St_Johns", "America/Santiago", "Europe/London", "America/New_York", "Asia/Tehran"}
	rng := rand.New(rand.NewPCG(1, 2))
	from := time.Date(2025, 12, 1, 0, 0, 0, 0, time.UTC).Unix()
	for _, z := range zones {
		loc := mustZone(t, z)
		for range 400 {
			at := time.Unix(from+rng.Int64N(400*86400), 0)
			if rng.IntN(4) == 0 { // near a local midnight
				s, _ := refPeriod(Day, at, loc, time.Monday)
				at = time.Unix(s+rng.Int64N(5)-2, 0)
			}
			c := []Calendar{Day, Week, Month}[rng.IntN(3)]
			ws := time.Weekday(rng.IntN(7))
			start, end := period(c, at, loc, ws)
			ws0, we0 := refPeriod(c, at, loc, ws)
			if start.Unix() != ws0 || end.Unix() != we0 {
				t.Fatalf("%s %s of %s (week from %s): engine [%s, %s), reference [%s, %s)", z, c, at.In(loc), ws,
					start.In(loc), end.In(loc), time.Unix(ws0, 0).In(loc), time.Unix(we0, 0).In(loc))
			}
			if at.Unix() < ws0 || at.Unix() >= we0 {
				t.Fatalf("%s: %s not inside its period", z, at)
			}
			if r := periodRetention(c); at.Unix()-ws0 >= r {
				t.Fatalf("%s %s: period started %ds before, more than the retention %ds", z, c, at.Unix()-ws0, r)
			}
		}
	}
}

// TestCalendarLimitsOnRedis decides calendar limits on a real Redis across
// a DST change, at the far ends of the zones (+14, -12), with a week that
// starts on Sunday, and for a user whose time zone changes.
func TestCalendarLimitsOnRedis(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	ctx := context.Background()
	ny := mustZone(t, "America/New_York")
	rules := Rules{
		Default: Policy{Limits: []Limit{
			{Name: "day", Calendar: Day, Max: 1, Where: Where{Channels: []string{"push"}}},
			{Name: "week", Calendar: Week, Max: 2, Where: Where{Channels: []string{"email"}}},
			{Name: "month", Calendar: Month, Max: 1, Where: Where{Channels: []string{"sms"}}},
		}},
		TimeZone:  ny,
		WeekStart: time.Sunday,
	}
	e := newEngine(t, r.Client(), Options{Rules: rules})
	n := 0
	decide := func(uid uint64, channel string, at time.Time, tz *time.Location) Decision {
		t.Helper()
		n++
		d, err := e.Decide(ctx, []Request{{UserID: uid, IntentID: "i" + time.Duration(n).String(), Channel: channel,
			Category: "marketing", At: at, TimeZone: tz}})
		if err != nil || d[0].Err != nil {
			t.Fatalf("Decide: %v %v", err, d[0].Err)
		}
		return d[0]
	}
	capped := func(d Decision, limit string, retry time.Duration) {
		t.Helper()
		if d.Outcome != Capped || d.Limit != limit || d.RetryAfter != (RetryAfter{In: retry}) {
			t.Fatalf("got %s %q retry %+v, want capped by %s, retry %s", d.Outcome, d.Limit, d.RetryAfter, limit, retry)
		}
	}
	allowed := func(d Decision) {
		t.Helper()
		if d.Outcome != Allowed {
			t.Fatalf("got %s %q, want allowed", d.Outcome, d.Limit)
		}
	}

	// 2026-03-08 in New York (the rules' zone: the request names none) has
	// 23 hours: a push at 00:30 is capped again at 01:30, until midnight,
	// 21.5 hours later.
	allowed(decide(1, "push", time.Date(2026, 3, 8, 0, 30, 0, 0, ny), nil))
	capped(decide(1, "push", time.Date(2026, 3, 8, 1, 30, 0, 0, ny), nil), "day", 21*time.Hour+30*time.Minute)
	allowed(decide(1, "push", time.Date(2026, 3, 9, 0, 0, 0, 0, ny), nil))
	// 2026-11-01 has 25 hours.
	allowed(decide(2, "push", time.Date(2026, 11, 1, 0, 0, 0, 0, ny), nil))
	capped(decide(2, "push", time.Date(2026, 11, 1, 0, 0, 1, 0, ny), nil), "day", 25*time.Hour-time.Second)
	capped(decide(2, "push", time.Date(2026, 11, 1, 23, 59, 59, 0, ny), nil), "day", time.Second)
	allowed(decide(2, "push", time.Date(2026, 11, 2, 0, 0, 0, 0, ny), nil))

	// +14 and -12: the same instant is in different local days.
	kiri, m12 := mustZone(t, "Pacific/Kiritimati"), mustZone(t, "Etc/GMT+12")
	at := time.Date(2026, 6, 1, 10, 30, 0, 0, time.UTC) // 2026-06-02 00:30 in Kiritimati, 2026-05-31 22:30 at -12
	allowed(decide(3, "push", at, kiri))
	capped(decide(3, "push", at.Add(time.Hour), kiri), "day", 22*time.Hour+30*time.Minute)
	allowed(decide(4, "push", at, m12))
	capped(decide(4, "push", at.Add(time.Minute), m12), "day", time.Hour+29*time.Minute)
	allowed(decide(4, "push", at.Add(90*time.Minute), m12))

	// A user who moves from Kiritimati to -12 keeps their send (stored in
	// absolute time); only the boundaries move: the send at 10:30 UTC falls
	// in the -12 day of 2026-05-31, which ends at 12:00 UTC.
	allowed(decide(5, "push", at, kiri))
	capped(decide(5, "push", at.Add(time.Hour), m12), "day", 30*time.Minute)
	allowed(decide(5, "push", at.Add(90*time.Minute), m12))

	// Weeks start on Sunday here: two emails on Saturday 2026-06-06 (New
	// York), capped until Sunday midnight.
	sat := time.Date(2026, 6, 6, 10, 0, 0, 0, ny)
	allowed(decide(6, "email", sat, nil))
	allowed(decide(6, "email", sat.Add(time.Hour), nil))
	capped(decide(6, "email", sat.Add(2*time.Hour), nil), "week", 12*time.Hour)
	allowed(decide(6, "email", sat.Add(14*time.Hour), nil))

	// Months: one sms in May, the next on June 1st.
	allowed(decide(7, "sms", time.Date(2026, 5, 1, 0, 0, 0, 0, ny), nil))
	capped(decide(7, "sms", time.Date(2026, 5, 31, 23, 0, 0, 0, ny), nil), "month", time.Hour)
	allowed(decide(7, "sms", time.Date(2026, 6, 1, 0, 0, 0, 0, ny), nil))
}
