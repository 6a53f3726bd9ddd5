package dispatch

// The header contract: every capper-* header of an output record is built
// here, from its entry's outcome (docs/reference/event-contract.md).

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/control"
)

// Header names of the output contract.
const (
	HeaderDecision   = "capper-decision"       // see decisionValue
	HeaderSegment    = "capper-segment"        // the user's segment
	HeaderSnapshot   = "capper-snapshot"       // the segment snapshot's version
	HeaderLimit      = "capper-limit"          // capped: the limit that capped
	HeaderRetryAfter = "capper-retry-after-ms" // capped: ms until a slot frees, -1 never
	HeaderError      = "capper-error"          // dead-lettered: the field and the reason
	HeaderDecidedAt  = "capper-decided-at"     // RFC 3339, ms: the time the intent counts at
	HeaderDuplicate  = "capper-duplicate"      // "true": this id was allowed before (a redelivery)
	HeaderUnchecked  = "capper-unchecked"      // "true": failed open, Redis did not decide
	HeaderSource     = "capper-source"         // <topic>/<partition>/<offset> of the input record
	HeaderTruncated  = "capper-truncated"      // "true": dead-lettered with its value cut down (docs/reference/event-contract.md)
	HeaderOverride   = "capper-override"       // the intent asked to bypass the caps: see overrideValue
	HeaderPolicy     = "capper-policy"         // the version of the cap policy that decided
	HeaderHeldFor    = "capper-held-for"       // capped or deferred by a plan's booking: its campaign
	HeaderControl    = "capper-control"        // <topic>/<partition>/<offset> of the control record that decided (a stop, a pause, the campaign's send-by)
	HeaderControlSeq = "capper-control-seq"    // paused: the control state it was paused by (parked.go)
)

// capperPrefix starts every header capper owns; an input's own capper-*
// headers are dropped, so an upstream producer cannot forge a decision.
const capperPrefix = "capper-"

// Values of capper-decision.
const (
	DecisionAllowed      = "allowed"
	DecisionExempt       = "exempt"
	DecisionShadowCapped = "shadow-capped"
	DecisionCapped       = "capped"
	DecisionDeferred     = "deferred"  // waits in a delay tier (capper-reason says why)
	DecisionCancelled    = "cancelled" // campaign control: never delivered, not counted
)

// TimeLayout is the format of capper-decided-at and every other time in
// the headers (the Kafka room's).
const TimeLayout = kafka.TimeLayout

// decisionValue is the capper-decision of an outcome: a duplicate and a
// failed-open intent are delivered as allowed (with their own marker).
var decisionValue = map[capping.Outcome][]byte{
	capping.Allowed:      []byte(DecisionAllowed),
	capping.Duplicate:    []byte(DecisionAllowed),
	capping.FailOpen:     []byte(DecisionAllowed),
	capping.Exempt:       []byte(DecisionExempt),
	capping.ShadowCapped: []byte(DecisionShadowCapped),
	capping.Capped:       []byte(DecisionCapped),
	capping.Deferred:     []byte(DecisionDeferred),
	capping.Cancelled:    []byte(DecisionCancelled),
}

// overrideValue is the capper-override of an honoured override (in
// capping's words); OverrideRefused says "refused": the intent asked for one
// its campaign and category may not have, and was decided normally.
var overrideValue = map[capping.Override][]byte{
	capping.Bypass:          []byte(capping.Bypass.String()),
	capping.BypassUncounted: []byte(capping.BypassUncounted.String()),
}

// OverrideRefused is the capper-override of a refused override.
const OverrideRefused = "refused"

var (
	vTrue    = []byte("true")
	vRefused = []byte(OverrideRefused)
)

// headerBuilder makes the output headers of one batch. Values shared by many
// records (segment names, the snapshot version, decision times) are turned
// into bytes once, and the per-record bytes (capper-source, retry-after)
// come from one arena, so a record costs one allocation for its headers.
type headerBuilder struct {
	version    []byte
	controlSeq map[int]int64        // the control state's Released at the start of the batch's decision
	policy     string               // for records the engine did not decide
	names      map[string][]byte    // segment and limit names
	lanes      map[[2]string][]byte // <budget>/<lane>, by budget and lane
	times      map[int64][]byte     // formatted times, by Unix millisecond
	arena      []byte
	backing    []kafka.Header // the records' header slices are cut from it
	chunk      int            // ... each array this large (0: 1024)
	scratch    []kafka.Header
	spent      spent // the arrays cut from, for the next batch (arena.go)
}

func newHeaderBuilder(version, policy string) *headerBuilder {
	return &headerBuilder{version: []byte(version), policy: policy, names: map[string][]byte{},
		spent: spent{arenas: pool[byte]{keep: true}}}
}

// build returns the output headers of an entry that is not a hop: the
// input's own headers except capper-* ones (capper owns that namespace, so
// an upstream producer cannot forge a decision), then the outcome's, then
// capper-source. An input header's empty value stays empty: kafka-go reads
// it as nil, and would write nil as a null value.
func (hb *headerBuilder) build(m *kafka.Message, e *entry) []kafka.Header {
	add := hb.scratch[:0]
	d := &e.decision
	if e.invalid != nil { // dead-lettered: why, and nothing of a decision
		add = append(add, kafka.Header{Key: HeaderError, Value: []byte(e.invalid.Error())})
		if e.truncated {
			add = append(add, kafka.Header{Key: HeaderTruncated, Value: vTrue})
		}
	} else {
		add = append(add,
			kafka.Header{Key: HeaderDecision, Value: decisionValue[d.Outcome]},
			kafka.Header{Key: HeaderSegment, Value: hb.name(e.segment)},
			kafka.Header{Key: HeaderSnapshot, Value: hb.version},
			kafka.Header{Key: HeaderDecidedAt, Value: hb.time(d.At)})
		switch d.Outcome {
		case capping.Duplicate:
			add = append(add, kafka.Header{Key: HeaderDuplicate, Value: vTrue})
		case capping.FailOpen:
			add = append(add, kafka.Header{Key: HeaderUnchecked, Value: vTrue})
		case capping.Capped, capping.ShadowCapped:
			add = append(add,
				kafka.Header{Key: HeaderLimit, Value: hb.name(d.Limit)},
				kafka.Header{Key: HeaderRetryAfter, Value: hb.bytes(func(b []byte) []byte {
					if d.RetryAfter.Never {
						return append(b, "-1"...)
					}
					return strconv.AppendInt(b, d.RetryAfter.In.Milliseconds(), 10)
				})})
		}
		add = hb.delayPath(add, e)
		if d.Outcome == capping.Deferred && d.Reason == capping.ReasonPaused {
			// The parked topic's reader asks whether its campaign is
			// still paused, and whether the state changed since.
			add = append(add, kafka.Header{Key: HeaderCampaign, Value: hb.name(e.campaign)},
				kafka.Header{Key: HeaderControlSeq, Value: hb.bytes(func(b []byte) []byte { return formatSeq(b, hb.controlSeq) })})
		}
		if e.lane != nil {
			add = hb.releasedHeaders(add, e.lane)
		}
		if d.Control != nil {
			add = append(add, kafka.Header{Key: HeaderControl, Value: hb.position(d.Control)})
		}
		if d.HeldFor != "" {
			add = append(add, kafka.Header{Key: HeaderHeldFor, Value: hb.name(d.HeldFor)})
		}
		switch {
		case d.Override != capping.NoOverride:
			add = append(add, kafka.Header{Key: HeaderOverride, Value: overrideValue[d.Override]})
		case d.OverrideRefused:
			add = append(add, kafka.Header{Key: HeaderOverride, Value: vRefused})
		}
	}
	if p := cmp.Or(d.Policy, hb.policy); p != "" {
		add = append(add, kafka.Header{Key: HeaderPolicy, Value: hb.name(p)})
	}
	hb.scratch = add

	n := len(add) + 2
	for _, x := range m.Headers {
		if !strings.HasPrefix(x.Key, capperPrefix) {
			n++
		}
	}
	h := hb.cut(n)
	for _, x := range m.Headers {
		if !strings.HasPrefix(x.Key, capperPrefix) {
			h = append(h, kafka.Header{Key: x.Key, Value: nonNull(x.Value)})
		}
	}
	h = append(h, add...)
	if e.tier.handedBack != nil {
		h = append(h, kafka.Header{Key: HeaderHandedBack, Value: e.tier.handedBack})
	}
	return append(h, kafka.Header{Key: HeaderSource, Value: hb.source(m, e)})
}

// source is an entry's capper-source: the intent's own input record,
// whichever tier or lane it came through.
func (hb *headerBuilder) source(m *kafka.Message, e *entry) []byte {
	if e.tier.source != nil {
		return e.tier.source
	}
	return hb.bytes(func(b []byte) []byte { return appendPosition(b, m) })
}

// appendPosition appends m's <topic>/<partition>/<offset> to b.
func appendPosition(b []byte, m *kafka.Message) []byte {
	b = append(append(b, m.Topic...), '/')
	b = strconv.AppendInt(b, int64(m.Partition), 10)
	return strconv.AppendInt(append(b, '/'), m.Offset, 10)
}

// delayPath adds the delay path's headers: to a deferred entry what its
// next tier and its next decision need, to a decided one that came through
// the tiers how long it was held. Its deferral (e.next) was advanced when
// it was decided; here it is only written.
func (hb *headerBuilder) delayPath(add []kafka.Header, e *entry) []kafka.Header {
	d := &e.decision
	if d.Reason != capping.NoReason {
		add = append(add, kafka.Header{Key: HeaderReason, Value: hb.name(d.Reason.String())})
	}
	if d.Outcome == capping.Deferred {
		add = append(add,
			kafka.Header{Key: HeaderNotBefore, Value: hb.time(d.NotBefore)},
			kafka.Header{Key: HeaderDueAt, Value: hb.time(e.dueAt)})
		if d.Reason == capping.ReasonCap && d.Limit != "" {
			add = append(add, kafka.Header{Key: HeaderLimit, Value: hb.name(d.Limit)})
		}
	}
	if f := e.next; f.Count > 0 {
		add = append(add,
			kafka.Header{Key: HeaderDeferredCount, Value: hb.bytes(func(b []byte) []byte { return strconv.AppendInt(b, int64(f.Count), 10) })},
			kafka.Header{Key: HeaderDeferredSince, Value: hb.time(f.Since)})
	}
	return add
}

// hop returns the headers of a record that hops to the next tier: its own
// (capper wrote them when it deferred the intent, and a hop decides
// nothing, so they stay as they are) with capper-due-at set for the next
// tier. A hop is most of the delay path's traffic: the slice, which only
// this batch holds, is changed in place rather than rebuilt.
func (hb *headerBuilder) hop(m *kafka.Message, dueAt time.Time) []kafka.Header {
	v := hb.time(dueAt)
	set := false
	for i := range m.Headers {
		x := &m.Headers[i]
		if x.Key == HeaderDueAt {
			x.Value, set = v, true
		}
		x.Value = nonNull(x.Value) // an empty value read back stays empty
	}
	if set {
		return m.Headers
	}
	return append(m.Headers, kafka.Header{Key: HeaderDueAt, Value: v})
}

// time formats t like capper-decided-at. The times of a batch's deferred
// intents repeat (a blast's sends share their seconds), so each is
// formatted once per batch.
func (hb *headerBuilder) time(t time.Time) []byte {
	k := t.UnixMilli() // TimeLayout's precision
	if b, ok := hb.times[k]; ok {
		return b
	}
	if hb.times == nil {
		hb.times = map[int64][]byte{}
	}
	b := hb.bytes(func(b []byte) []byte { return t.UTC().AppendFormat(b, TimeLayout) })
	hb.times[k] = b
	return b
}

// position is a control record's <topic>/<partition>/<offset>.
func (hb *headerBuilder) position(c *control.Position) []byte {
	return hb.bytes(func(b []byte) []byte {
		b = append(append(b, c.Topic...), '/')
		b = append(strconv.AppendInt(b, int64(c.Partition), 10), '/')
		return strconv.AppendInt(b, c.Offset, 10)
	})
}

func (hb *headerBuilder) name(s string) []byte {
	b, ok := hb.names[s]
	if !ok {
		b = []byte(s)
		hb.names[s] = b
	}
	return b
}

// lane is a lane's capper-lane value, <budget>/<lane> (made once per
// batch, not once per record).
func (hb *headerBuilder) lane(budget, lane string) []byte {
	k := [2]string{budget, lane}
	b, ok := hb.lanes[k]
	if !ok {
		if hb.lanes == nil {
			hb.lanes = map[[2]string][]byte{}
		}
		b = hb.bytes(func(b []byte) []byte { return append(append(append(b, budget...), '/'), lane...) })
		hb.lanes[k] = b
	}
	return b
}

// setHeader sets a header in h, replacing one with the same key; h may be
// shared, so a replacement is made on a copy.
func setHeader(h []kafka.Header, key string, v []byte) []kafka.Header {
	for i := range h {
		if h[i].Key == key {
			h = slices.Clone(h)
			h[i].Value = v
			return h
		}
	}
	return append(h[:len(h):len(h)], kafka.Header{Key: key, Value: v})
}

// findHeader returns the value of key in h, or "".
func findHeader(h []kafka.Header, key string) string {
	for _, x := range h {
		if x.Key == key {
			return string(x.Value)
		}
	}
	return ""
}
