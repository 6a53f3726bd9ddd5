package capping

// Calendar periods in a time zone: local midnight to local midnight, so a
// day is 23 or 25 hours across a DST change; weeks start on a configured
// weekday; months on the first.

import (
	"time"
	// The zone database is compiled in: a container image without
	// /usr/share/zoneinfo must decide calendar limits the same way.
	_ "time/tzdata"
)

// period returns the calendar period of kind c (Day, Week or Month) that
// holds t in loc: [start, end).
func period(c Calendar, t time.Time, loc *time.Location, weekStart time.Weekday) (start, end time.Time) {
	lt := t.In(loc)
	y, m, d := lt.Date()
	switch c {
	case Week:
		back := (int(lt.Weekday()) - int(weekStart) + 7) % 7
		start = midnight(y, m, d-back, loc)
		end = midnight(y, m, d-back+7, loc)
	case Month:
		start = midnight(y, m, 1, loc)
		end = midnight(y, m+1, 1, loc)
	default:
		start = midnight(y, m, d, loc)
		end = midnight(y, m, d+1, loc)
	}
	return start, end
}

// periods remembers the periods a batch computed: a batch's requests share
// a few time zones and one decision time, and time.Date with a zone is slow
// enough to matter per intent. Not safe for concurrent use; nil computes.
type periods struct {
	list []knownPeriod
}

type knownPeriod struct {
	c          Calendar // None: a span of one UTC offset (zoneOffset)
	loc        *time.Location
	start, end time.Time
	offset     int // s east of UTC, for None
}

// of is period(c, t, loc, weekStart), from memory when t falls in a period
// computed before.
func (p *periods) of(c Calendar, t time.Time, loc *time.Location, weekStart time.Weekday) (start, end time.Time) {
	if p == nil {
		return period(c, t, loc, weekStart)
	}
	for i := range p.list {
		k := &p.list[i]
		if k.c == c && k.loc == loc && !t.Before(k.start) && t.Before(k.end) {
			return k.start, k.end
		}
	}
	start, end = period(c, t, loc, weekStart)
	if len(p.list) < 64 { // a batch's zones, times its calendars
		p.list = append(p.list, knownPeriod{c: c, loc: loc, start: start, end: end})
	}
	return start, end
}

// zoneOffset is t's UTC offset (s) in loc, from memory when t falls in a
// span of one offset computed before (the zone's bounds; zero: unbounded).
func (p *periods) zoneOffset(t time.Time, loc *time.Location) int {
	if p != nil {
		for i := range p.list {
			k := &p.list[i]
			if k.c == None && k.loc == loc && (k.start.IsZero() || !t.Before(k.start)) && (k.end.IsZero() || t.Before(k.end)) {
				return k.offset
			}
		}
	}
	lt := t.In(loc)
	_, off := lt.Zone()
	if p != nil && len(p.list) < 64 {
		start, end := lt.ZoneBounds()
		p.list = append(p.list, knownPeriod{c: None, loc: loc, start: start, end: end, offset: off})
	}
	return off
}

// midnight is the first instant of a local date (normalized: day 0 is the
// last of the previous month). Where a DST change skips midnight, the day
// starts at the first local time that exists.
func midnight(y int, m time.Month, d int, loc *time.Location) time.Time {
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	want := time.Date(y, m, d, 12, 0, 0, 0, loc) // noon exists on every day
	wy, wm, wd := want.Date()
	for {
		ty, tm, td := t.Date()
		if ty == wy && tm == wm && td == wd {
			break
		}
		// time.Date put a skipped midnight in the previous day: walk to
		// the first instant of the date, a minute at a time (at most the
		// size of the gap).
		t = t.Add(time.Minute).Truncate(time.Minute)
	}
	return t
}

// periodRetention is how far back (s) the period holding now can start, in
// any time zone: the longest such period, one hour for a DST change, and
// the second a send's time is rounded down by.
func periodRetention(c Calendar) int64 {
	switch c {
	case Day:
		return 25*3600 + 1
	case Week:
		return 7*24*3600 + 3600 + 1
	default:
		return 31*24*3600 + 3600 + 1
	}
}
