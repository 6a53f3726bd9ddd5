package dispatch

// The delay path's side of the worker: which tier a deferred intent waits
// in, the capper-* headers that carry its deferral from hop to hop, and
// reading them back when a tier hands the record over.

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/capping"
)

// Tier is a delay tier: a topic whose records wait up to Delay.
type Tier struct {
	Delay time.Duration
	Output
}

// Headers of the delay path.
const (
	HeaderReason        = "capper-reason"         // deferred: cap or quiet-hours; capped: defer-expired
	HeaderNotBefore     = "capper-not-before"     // deferred: decided again at or after this time
	HeaderDeferredCount = "capper-deferred-count" // times deferred (hops between tiers do not count)
	HeaderDeferredSince = "capper-deferred-since" // when it was first deferred: max_defer counts from here
	HeaderDueAt         = "capper-due-at"         // when its tier hands it over (internal to the delay path)
)

// DecisionDeferred is the capper-decision of a record on its way through
// the delay tiers.
const DecisionDeferred = "deferred"

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

// deferral is what a delay tier's record says about its deferral.
type deferral struct {
	notBefore, since time.Time
	count            int
	reason           capping.Reason
	limit, segment   string
	source           []byte // capper-source: the intent's input record
}

var reasons = map[string]capping.Reason{
	capping.ReasonCap.String():   capping.ReasonCap,
	capping.ReasonQuiet.String(): capping.ReasonQuiet,
}

// readDeferral reads a delay tier's record's headers (capper wrote them; a
// record that lacks them was not written by capper and is dead-lettered).
func readDeferral(h []kafka.Header) (deferral, *InvalidError) {
	var d deferral
	var err error
	bad := func(name string, e error) *InvalidError {
		return &InvalidError{Field: "header " + name, Reason: e.Error()}
	}
	if d.notBefore, err = headerTime(h, HeaderNotBefore); err != nil {
		return d, bad(HeaderNotBefore, err)
	}
	if d.since, err = headerTime(h, HeaderDeferredSince); err != nil {
		return d, bad(HeaderDeferredSince, err)
	}
	if d.count, err = strconv.Atoi(findHeader(h, HeaderDeferredCount)); err != nil || d.count < 1 {
		return d, bad(HeaderDeferredCount, fmt.Errorf("%q is not a count of 1 or more", findHeader(h, HeaderDeferredCount)))
	}
	var ok bool
	if d.reason, ok = reasons[findHeader(h, HeaderReason)]; !ok {
		return d, bad(HeaderReason, fmt.Errorf("%q is not cap or quiet-hours", findHeader(h, HeaderReason)))
	}
	d.limit, d.segment = findHeader(h, HeaderLimit), findHeader(h, HeaderSegment)
	for _, x := range h {
		if x.Key == HeaderSource {
			d.source = x.Value
		}
	}
	return d, nil
}

// dueAt is when a delay tier hands its record over.
func dueAt(h []kafka.Header) (time.Time, error) { return headerTime(h, HeaderDueAt) }

func headerTime(h []kafka.Header, key string) (time.Time, error) {
	v := findHeader(h, key)
	if v == "" {
		return time.Time{}, errors.New("missing: not a record capper deferred")
	}
	t, err := time.Parse(TimeLayout, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a time like %s", v, TimeLayout)
	}
	return t, nil
}
