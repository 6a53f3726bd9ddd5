package dispatch

// The delay path's side of the worker: which tier a deferred intent waits
// in, the capper-* headers that carry its deferral from hop to hop, and
// reading them back when a tier hands the record over.

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/capping"
)

// Tier is a delay tier: a topic whose records wait up to Delay.
type Tier struct {
	Delay time.Duration
	Output
}

// Headers of the delay path.
const (
	HeaderReason        = "capper-reason"         // deferred, cancelled, or capped after waiting: why (capping/verdicts.go, the reason table)
	HeaderNotBefore     = "capper-not-before"     // deferred: decided again at or after this time
	HeaderDeferredCount = "capper-deferred-count" // times deferred (hops between tiers do not count)
	HeaderDeferredSince = "capper-deferred-since" // when it was first deferred: max_defer counts from here
	HeaderDueAt         = "capper-due-at"         // when its tier hands it over (internal to the delay path)
)

// tierFor is the tier for an intent due in d: the longest whose delay is
// not above d (so that a tier's records are due in the order they were
// written), the shortest for less. A record passes from tier to tier until
// it is due.
func (w *Worker) tierFor(d time.Duration) int {
	t := 0
	for i, tier := range w.o.Tiers {
		if tier.Delay <= d {
			t = i
		}
	}
	return t
}

// delay places a deferred or hopping entry in the tier for its wait from
// at to notBefore, and notes when that tier hands it over (e.dueAt).
func (w *Worker) delay(e *entry, at, notBefore time.Time) int {
	t := w.tierFor(notBefore.Sub(at))
	e.dueAt = minTime(at.Add(w.o.Tiers[t].Delay), notBefore)
	return t
}

// tierHeaders is what a delay tier's record says about its deferral.
type tierHeaders struct {
	notBefore time.Time
	capping.Deferral
	source []byte // capper-source: the intent's input record
	// handedBack: capper-handed-back, the input of the throttled delivery
	// a status handed back (handback.go): its user's home partition.
	handedBack []byte
	// paused: it waits for a paused campaign (capper-reason: paused).
	paused bool
}

// tierReason reports whether reason is a capper-reason of a deferred
// intent (capping's reasons of Deferred: one place names them).
func tierReason(reason string) bool {
	return slices.ContainsFunc(capping.Reasons(capping.Deferred), func(r capping.Reason) bool { return r.String() == reason })
}

// readTier reads a delay tier's record into e, and reports whether it is
// due (kindDue: its value is decoded and decided again). Otherwise it hops
// (kindHop) or is unreadable.
func (w *Worker) readTier(m *kafka.Message, e *entry, now time.Time) bool {
	if !readDeferred(m, e) {
		return false
	}
	if e.tier.notBefore.After(now) || w.misplaced(m, e.home) {
		// Not due yet (its tier was shorter than its wait): on to the
		// next tier, undecided. Its value was checked when it was first
		// deferred. One in another partition than its user's (an earlier
		// version wrote it) moves there first.
		e.kind = kindHop
		return false
	}
	e.kind = kindDue
	return true
}

// readDeferred reads a deferred intent's record (a tier's, the parked
// topic's) into e: its headers, and its user's input partition.
func readDeferred(m *kafka.Message, e *entry) bool {
	var bad *InvalidError
	if e.tier, bad = readTierHeaders(m.Headers); bad != nil {
		e.setUnreadable(bad)
		return false
	}
	if h := e.tier.home(); h >= 0 {
		e.home = h
	}
	return true
}

// home is the user's input partition a tier or lane record names (-1:
// none): its input's, or the throttled delivery's input's of a send
// handed back (its source is the status record).
func (t *tierHeaders) home() int {
	if t.handedBack != nil {
		return homeOf(t.handedBack)
	}
	return homeOf(t.source)
}

// readTierHeaders reads a delay tier's record's headers (capper wrote
// them; a record that lacks them was not written by capper and is
// dead-lettered). It runs for every record of every hop, so it reads the
// headers in one pass and parses views of their bytes.
func readTierHeaders(h []kafka.Header) (tierHeaders, *InvalidError) {
	var d tierHeaders
	var notBefore, since, count, reason []byte
	first := func(dst *[]byte, v []byte) {
		if *dst == nil {
			*dst = nonNull(v)
		}
	}
	for _, x := range h {
		switch x.Key {
		case HeaderNotBefore:
			first(&notBefore, x.Value)
		case HeaderDeferredSince:
			first(&since, x.Value)
		case HeaderDeferredCount:
			first(&count, x.Value)
		case HeaderReason:
			first(&reason, x.Value)
		case HeaderSource:
			d.source = x.Value
		case HeaderHandedBack:
			d.handedBack = x.Value
		}
	}
	bad := func(name string, e error) *InvalidError {
		return &InvalidError{Field: "header " + name, Reason: e.Error()}
	}
	var err error
	if d.notBefore, err = parseHeaderTime(notBefore); err != nil {
		return d, bad(HeaderNotBefore, err)
	}
	d.paused = string(reason) == capping.ReasonPaused.String()
	if d.Since, err = parseHeaderTime(since); err != nil {
		return d, bad(HeaderDeferredSince, err)
	}
	if d.Count, err = strconv.Atoi(view(count)); err != nil || d.Count < 1 {
		return d, bad(HeaderDeferredCount, fmt.Errorf("%q is not a count of 1 or more", count))
	}
	// Only checked: the next decision gives the reason anew, but a record
	// without one was not written by capper.
	if !tierReason(string(reason)) {
		return d, bad(HeaderReason, fmt.Errorf("%q is not a reason of a deferred intent (%s)", reason, capping.Reasons(capping.Deferred)))
	}
	return d, nil
}

// dueAt is when a delay tier hands its record over.
func dueAt(h []kafka.Header) (time.Time, error) { return headerTime(h, HeaderDueAt) }

func headerTime(h []kafka.Header, key string) (time.Time, error) {
	for _, x := range h {
		if x.Key == key {
			return parseHeaderTime(nonNull(x.Value))
		}
	}
	return parseHeaderTime(nil)
}

// parseHeaderTime reads a time capper wrote (nil: the header is missing).
func parseHeaderTime(v []byte) (time.Time, error) {
	if len(v) == 0 {
		return time.Time{}, errors.New("missing: not a record capper deferred")
	}
	if t, ok := parseUTCMillis(v); ok {
		return t, nil
	}
	// A view: Parse keeps no part of its input.
	t, err := time.Parse(TimeLayout, view(v))
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a time like %s", v, TimeLayout)
	}
	return t, nil
}

// parseUTCMillis reads the form capper writes, 2006-01-02T15:04:05.000Z,
// without time.Parse's generality: every record of every hop carries
// several. Anything else (ok false) is left to time.Parse.
func parseUTCMillis(v []byte) (t time.Time, ok bool) {
	if len(v) != 24 || v[4] != '-' || v[7] != '-' || v[10] != 'T' || v[13] != ':' || v[16] != ':' || v[19] != '.' || v[23] != 'Z' {
		return time.Time{}, false
	}
	num := func(b []byte) int {
		n := 0
		for _, c := range b {
			if c < '0' || c > '9' {
				return -1
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	year, month, day, hour, minute, sec, ms := num(v[0:4]), num(v[5:7]), num(v[8:10]), num(v[11:13]), num(v[14:16]), num(v[17:19]), num(v[20:23])
	if year < 0 || month < 1 || month > 12 || day < 1 || hour < 0 || hour > 23 || minute < 0 || minute > 59 || sec < 0 || sec > 59 || ms < 0 {
		return time.Time{}, false
	}
	t = time.Date(year, time.Month(month), day, hour, minute, sec, ms*int(time.Millisecond), time.UTC)
	if t.Day() != day { // February 30th and the like: time.Parse says why
		return time.Time{}, false
	}
	return t, true
}
