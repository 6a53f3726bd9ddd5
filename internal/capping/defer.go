package capping

// Deferral: a capped intent whose limit says on_cap: defer waits for the
// slot instead of being dropped, and an intent inside its segment's quiet
// hours waits for their end. The engine only answers Deferred with a
// not-before time; the worker carries the intent there (the delay tiers).

import (
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/capper-dev/capper/internal/problems"
)

// OnCap is what becomes of an intent a limit caps.
type OnCap uint8

// What a limit does with an intent it caps.
const (
	Suppress OnCap = iota // capped: to the suppressed topic
	Defer                 // deferred until the slot frees, for at most MaxDefer
)

var onCapNames = [...]string{Suppress: "suppress", Defer: "defer"}

func (o OnCap) String() string {
	if int(o) < len(onCapNames) {
		return onCapNames[o]
	}
	return fmt.Sprintf("on_cap(%d)", o)
}

// ParseOnCap reads "suppress" or "defer".
func ParseOnCap(s string) (OnCap, error) {
	if i := slices.Index(onCapNames[:], s); i >= 0 {
		return OnCap(i), nil
	}
	return 0, fmt.Errorf("%q is not one of suppress, defer", s)
}

// MaxMaxDefer bounds max_defer: a deferred intent waits in Kafka, whose
// retention must outlast the wait.
const MaxMaxDefer = 7 * 24 * time.Hour

// QuietHours hold a segment's intents back between From and To (minutes
// after local midnight; To before From spans midnight) in the user's time
// zone. Held intents are deferred to the end, plus a jitter of up to
// Jitter (per intent, from its id), so that a night's blast does not land
// in one second. Channels (empty: all) limits them to some channels;
// exempt categories ignore them unless IncludeExempt.
type QuietHours struct {
	From, To      int // minutes after midnight, 0-1439
	Channels      []string
	Jitter        time.Duration
	IncludeExempt bool
}

func (q *QuietHours) problems(ps *problems.List, at problems.Path, channels map[string]bool) {
	for _, f := range []struct {
		name string
		v    int
	}{{"from", q.From}, {"to", q.To}} {
		if f.v < 0 || f.v >= 24*60 {
			ps.Add(at.Key(f.name), "%d minutes is not a time of day", f.v)
		}
	}
	if q.From == q.To {
		ps.Add(at, "from and to are the same time: quiet hours would never end")
	}
	for i, c := range q.Channels {
		if !channels[c] {
			ps.Add(at.Key("channels").Index(i), "%q is not one of the channels", c)
		}
	}
	if length := time.Duration((q.To-q.From+24*60)%(24*60)) * time.Minute; q.Jitter < 0 || q.Jitter > 24*time.Hour-length {
		ps.Add(at.Key("jitter"), "%s must be from 0 to the hours outside quiet hours (%s)", q.Jitter, 24*time.Hour-length)
	}
}

func (l Limit) deferProblems(ps *problems.List, at problems.Path) {
	switch {
	case l.OnCap > Defer:
		ps.Add(at.Key("on_cap"), "%s is not one of suppress, defer", l.OnCap)
	case l.OnCap == Defer && (l.MaxDefer < time.Minute || l.MaxDefer > MaxMaxDefer):
		ps.Add(at.Key("max_defer"), "%s out of range [%s, %s]: a deferred intent waits at most this long", l.MaxDefer, time.Minute, MaxMaxDefer)
	case l.OnCap == Suppress && l.MaxDefer != 0:
		ps.Add(at.Key("max_defer"), "is set but on_cap is suppress: nothing waits")
	}
}

// Defers reports whether the rules may defer an intent (a limit with
// on_cap: defer, or quiet hours): the worker needs its delay tiers then.
func (r Rules) Defers() bool {
	for _, p := range r.allPolicies() {
		if p.QuietHours != nil {
			return true
		}
		for _, l := range p.Limits {
			if l.OnCap == Defer {
				return true
			}
		}
	}
	return false
}

// quiet returns the decision for an intent inside its policy's quiet
// hours (nil outside them).
func (ps *policySet) quiet(r *Request, exempt bool) *Decision {
	q := ps.pols[ps.policyIndex(r.Segment)].quiet
	if q == nil || exempt && !q.IncludeExempt || len(q.Channels) > 0 && !slices.Contains(q.Channels, r.Channel) {
		return nil
	}
	end, in := q.end(r.At.In(ps.location(r)))
	if !in {
		return nil
	}
	var jitter time.Duration
	if s := int64(q.Jitter / time.Second); s > 0 {
		h := fnv.New64a()
		_, _ = h.Write([]byte(r.IntentID))
		jitter = time.Duration(h.Sum64()%uint64(s)) * time.Second
	}
	return &Decision{Outcome: Deferred, At: r.At, NotBefore: end.Add(jitter), Reason: ReasonQuietHours}
}

// end reports whether t (in the user's zone) is inside the quiet hours,
// and when they end: the first local To after t.
func (q *QuietHours) end(t time.Time) (time.Time, bool) {
	m := t.Hour()*60 + t.Minute()
	in := m >= q.From && m < q.To
	if q.To < q.From {
		in = m >= q.From || m < q.To
	}
	if !in {
		return time.Time{}, false
	}
	y, mo, d := t.Date()
	end := time.Date(y, mo, d, q.To/60, q.To%60, 0, 0, t.Location())
	if !end.After(t) {
		end = time.Date(y, mo, d+1, q.To/60, q.To%60, 0, 0, t.Location())
	}
	return end, true
}

// deferral turns a capped decision into Deferred when the limit that
// capped says on_cap: defer and its slot frees within max_defer of the
// intent's first deferral; a deferred intent whose slot frees later is
// capped with ReasonDeferExpired.
func (ps *policySet) deferral(r *Request, d *Decision) {
	if d.Err != nil || d.Outcome != Capped || d.RetryAfter.Never {
		return
	}
	l := ps.limitNamed(ps.policyIndex(r.Segment), d.Limit)
	if l == nil || l.OnCap != Defer {
		return
	}
	since := r.DeferredSince
	if since.IsZero() {
		since = r.At
	}
	nb := r.At.Add(d.RetryAfter.In)
	if nb.Sub(since) > l.MaxDefer {
		if !r.DeferredSince.IsZero() {
			d.Reason = ReasonDeferExpired
		}
		return
	}
	d.Outcome, d.NotBefore, d.Reason = Deferred, nb, ReasonCap
}

// Deferral is where a deferred intent stands: how many times it was
// deferred, and since when (zero: never). The worker carries it in the
// delay tiers' headers and a replay in its queue; both advance it with Next
// so that max_defer counts from the same time (Request.DeferredSince).
type Deferral struct {
	Count int
	Since time.Time
}

// Next is the deferral after decision d of the intent: a Deferred decision
// counts one more, and the first one starts Since at its time (a wait for
// a paused campaign too: max_defer bounds the whole wait); any other leaves
// it as it was.
func (f Deferral) Next(d *Decision) Deferral {
	if d.Outcome != Deferred {
		return f
	}
	f.Count++
	if f.Since.IsZero() {
		f.Since = d.At
	}
	return f
}
