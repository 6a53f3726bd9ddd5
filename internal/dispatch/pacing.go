package dispatch

// The worker's side of send pacing (internal/pacing): an intent a budget
// covers is not decided when it arrives but written, undecided, to its
// budget's lane topic; the lane's reader releases it at the budget's rate
// (pacing.Gate) and it is decided then, like any intent. This file holds
// the lane records' headers and what a released intent gives back.

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/pacing"
)

// Pacer is what the worker needs of pacing (*pacing.Pacer).
type Pacer interface {
	Budgets() *pacing.Set
	// Wait is how long an intent put in a budget's lane now would wait.
	Wait(budget string, lane int) time.Duration
	// Unused counts the tokens of released intents that were not
	// delivered; Charge takes tokens for exempt sends a budget covers.
	Unused(budget string, n int)
	Charge(budget string, n int)
	Held(budget, lane string, n int)
	Expired(budget, lane string)
	// Throttled reports a send of budget its provider throttled (ok
	// false: no such budget).
	Throttled(ctx context.Context, budget string, retryAfter time.Duration) (ok bool, err error)
}

// Headers of a lane record (and, for the last three, of a released
// intent's outcome).
const (
	HeaderHeldSince  = "capper-held-since"  // when it was first held
	HeaderCampaign   = "capper-campaign"    // its campaign_id (the gate lets a stopped campaign's through at once)
	HeaderSendBy     = "capper-send-by"     // its send_by (likewise, once past)
	HeaderLane       = "capper-lane"        // <budget>/<lane> it waited in
	HeaderReleasedAt = "capper-released-at" // when its budget released it (pacing.Gate)
	HeaderWaited     = "capper-waited-ms"   // released-at - held-since, in ms
)

// laneInfo is what a released lane record says.
type laneInfo struct {
	budget, lane          string
	heldSince, releasedAt time.Time
	// token: the gate released it with a budget's token (it carries
	// capper-released-at); a pass without one (a stopped or paused
	// campaign's, one past its send_by) is decided at once, when read.
	token bool
	// fields: its capper-fields (spans.go); nil when it has none.
	fields []byte
}

// laneWriters are the writers of the lane topics, made on first use (a
// new policy may add a budget).
type laneWriters struct {
	new func(topic string) (Writer, error)
	mu  sync.Mutex
	m   map[string]Writer
}

func (l *laneWriters) get(topic string) (Writer, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w, ok := l.m[topic]; ok {
		return w, nil
	}
	w, err := l.new(topic)
	if err != nil {
		return nil, err
	}
	if l.m == nil {
		l.m = map[string]Writer{}
	}
	l.m[topic] = w
	return w, nil
}

// isLane reports whether topic is a lane topic of the budgets in force
// (or of any budget: a lane of a budget the policy dropped still drains).
func (w *Worker) isLane(topic string) bool {
	return w.o.Pacer != nil && w.o.LanePrefix != "" && len(topic) > len(w.o.LanePrefix) &&
		topic[:len(w.o.LanePrefix)] == w.o.LanePrefix && topic[len(w.o.LanePrefix)] == '.'
}

// readLane reads a released lane record's headers into e (a kindDue
// entry: it is decided now), in either form (lanerecord.go). A record
// with neither capper-held nor capper-held-since was not written by
// capper: it is dead-lettered.
func (w *Worker) readLane(m *kafka.Message, e *entry, now time.Time) bool {
	var held, released, since, count, lane, throttled, fields, compact []byte
	isCompact := false
	for _, x := range m.Headers {
		switch x.Key {
		case HeaderHeld:
			compact, isCompact = x.Value, true
		case HeaderFields:
			fields = x.Value
		case HeaderHeldSince:
			held = nonNull(x.Value)
		case HeaderReleasedAt:
			released = x.Value
		case HeaderDeferredSince:
			since = x.Value
		case HeaderDeferredCount:
			count = x.Value
		case HeaderSource:
			e.tier.source = x.Value
		case HeaderLane:
			lane = x.Value
		case HeaderReason:
			e.tier.paused = string(x.Value) == capping.ReasonPaused.String()
		case HeaderHandedBack:
			e.tier.handedBack = x.Value
		case HeaderThrottledAt:
			throttled = nonNull(x.Value)
		}
	}
	li := &e.laneAt
	*li = laneInfo{releasedAt: now, fields: fields}
	var err error
	switch {
	case isCompact:
		var ok bool
		if lane, ok = readHeld(compact, li, e); !ok {
			return false
		}
	default:
		if li.heldSince, err = parseHeaderTime(held); err != nil {
			e.setUnreadable(&InvalidError{Field: "header " + HeaderHeldSince, Reason: err.Error()})
			return false
		}
		if t, err := parseHeaderTime(released); err == nil {
			li.releasedAt, li.token = t, true
		}
	}
	if len(since) > 0 {
		if e.tier.Since, err = parseHeaderTime(since); err != nil {
			e.setUnreadable(&InvalidError{Field: "header " + HeaderDeferredSince, Reason: err.Error()})
			return false
		}
		if e.tier.Count, err = strconv.Atoi(string(count)); err != nil || e.tier.Count < 1 {
			e.setUnreadable(invalid("header "+HeaderDeferredCount, "%q is not a count of 1 or more", count))
			return false
		}
	}
	if len(lane) > 0 {
		li.budget, li.lane = w.laneNames.of(lane)
	}
	if len(throttled) > 0 {
		if e.throttledAt, err = parseHeaderTime(throttled); err != nil {
			e.setUnreadable(&InvalidError{Field: "header " + HeaderThrottledAt, Reason: err.Error()})
			return false
		}
	}
	if h := e.tier.home(); h >= 0 {
		e.home = h
	}
	e.lane = li
	e.kind = kindDue
	return true
}

// hold reports whether the intent in waits for a budget (e becomes a
// kindHold entry for its lane's topic). An exempt intent a budget covers
// is decided at once and charged to the budget if it is delivered; one
// whose send-by (its own or its campaign's) comes before its lane could
// release it is decided at once with that release time (releaseAt), and
// capping cancels it (expired).
func (w *Worker) hold(e *entry, in *Intent, now time.Time) (held bool, releaseAt time.Time) {
	if w.o.Pacer == nil || e.lane != nil {
		return false, time.Time{}
	}
	set := w.o.Pacer.Budgets()
	place, ok := set.Match(in.Pacing())
	if !ok {
		return false, time.Time{}
	}
	b := &set.Budgets()[place.Budget]
	if set.Exempt(in.Category) {
		e.charge = b.Name
		return false, time.Time{}
	}
	if by := w.campaigns().Deadline(in.CampaignID, in.SendBy); !by.IsZero() {
		if at := now.Add(w.o.Pacer.Wait(b.Name, place.Lane)); at.After(by) {
			e.expiring = &laneInfo{budget: b.Name, lane: b.Lanes[place.Lane].Name}
			return false, at
		}
	}
	e.kind = kindHold
	place.Retry = e.back != nil // a throttled send handed back: ahead of its lane
	e.held = &e.heldAt
	*e.held = heldEntry{topic: w.laneTopics.of(set, place, w.o.LanePrefix), budget: b.Name, lane: b.Lanes[place.Lane].Name,
		since: now, campaign: in.CampaignID, sendBy: in.SendBy}
	return true, time.Time{}
}

// heldEntry is where a kindHold entry waits.
type heldEntry struct {
	topic, budget, lane string
	since               time.Time
	campaign            string
	sendBy              time.Time
	fields              fieldSpans // its capper-fields (n 0: none)
}

// toDeliveries reports whether an outcome goes to the deliveries topic
// (what a budget's token pays for).
func toDeliveries(o capping.Outcome) bool {
	switch o {
	case capping.Allowed, capping.Duplicate, capping.FailOpen, capping.Exempt, capping.ShadowCapped:
		return true
	}
	return false
}

// passedFree reports whether d is what a pass without a token is decided:
// cancelled (stopped, past its send-by) or deferred for a pause.
func passedFree(d *capping.Decision) bool {
	return d.Outcome == capping.Cancelled || d.Outcome == capping.Deferred && d.Reason == capping.ReasonPaused
}

// settlePacing counts the token of a released intent that was not
// delivered (it is not given back: see pacing.Pacer.Unused), and charges an
// exempt send a budget covers.
func (w *Worker) settlePacing(e *entry) {
	if d := &e.decision; d.Outcome == capping.Cancelled && d.Reason == capping.ReasonExpired {
		switch {
		case e.lane != nil && e.lane.budget != "":
			w.o.Pacer.Expired(e.lane.budget, e.lane.lane)
		case e.expiring != nil:
			w.o.Pacer.Expired(e.expiring.budget, e.expiring.lane)
		}
	}
	switch {
	case e.lane != nil && e.lane.token && e.lane.budget != "" && !toDeliveries(e.decision.Outcome):
		w.o.Pacer.Unused(e.lane.budget, 1)
	case e.lane != nil && !e.lane.token && !passedFree(&e.decision):
		// It passed its gate without a token (paused or stopped as the
		// gate saw it) and was decided as released all the same (resumed
		// in between): it says when it was released, and a delivery is
		// charged like an exempt send.
		e.lane.token = true
		if e.lane.budget != "" && toDeliveries(e.decision.Outcome) {
			w.o.Pacer.Charge(e.lane.budget, 1)
		}
	case e.charge != "" && toDeliveries(e.decision.Outcome):
		w.o.Pacer.Charge(e.charge, 1)
	}
}

// holdRecord adds a kindHold entry's lane record to o: the input's key and
// value, in the partition of its user's input partition.
func (w *Worker) holdRecord(o *outputs, hb *headerBuilder, m *kafka.Message, e *entry) {
	var h []kafka.Header
	if w.o.CompactLanes {
		h = hb.compactHeaders(m, e)
	} else {
		h = hb.heldHeaders(m, e)
	}
	o.held[e.held.topic] = append(o.held[e.held.topic], kafka.Message{Key: nonNull(m.Key), Value: nonNull(m.Value),
		Headers: h, Partition: e.home})
}

// heldOutputs makes o.held's slices to size, from records: a batch's held
// entries per lane topic (nil: none).
func heldOutputs(b *batch, records *pool[kafka.Message]) map[string][]kafka.Message {
	var n map[string]int
	for i := range b.entries {
		if e := &b.entries[i]; e.kind == kindHold {
			if n == nil {
				n = map[string]int{}
			}
			n[e.held.topic]++
		}
	}
	if n == nil {
		return nil
	}
	held := make(map[string][]kafka.Message, len(n))
	for t, k := range n {
		held[t] = records.get(k)
	}
	return held
}

// heldHeaders are a lane record's headers: the input's own (not capper-*),
// when it was held and where, what the gate reads (campaign, send_by) and
// the empty capper-released-at it fills in, a deferral it carries from the
// delay tiers, and its input record.
func (hb *headerBuilder) heldHeaders(m *kafka.Message, e *entry) []kafka.Header {
	he := e.held
	n := len(m.Headers) + 8 // held-since, lane, campaign, released-at, fields, source, a hand-back's two
	if !he.sendBy.IsZero() {
		n++
	}
	if e.tier.Deferral.Count > 0 {
		n += 3
	}
	if hb.policy != "" {
		n++
	}
	h := ownHeaders(hb.cut(n), m)
	h = append(h,
		kafka.Header{Key: HeaderHeldSince, Value: hb.time(he.since)},
		kafka.Header{Key: HeaderLane, Value: hb.lane(he.budget, he.lane)},
		kafka.Header{Key: HeaderCampaign, Value: hb.name(he.campaign)},
		// Empty: the gate that releases it stamps its release time here,
		// in place, rather than copying its headers to add one.
		kafka.Header{Key: HeaderReleasedAt, Value: []byte{}})
	if !he.sendBy.IsZero() {
		h = append(h, kafka.Header{Key: HeaderSendBy, Value: hb.time(he.sendBy)})
	}
	if s := &he.fields; s.n > 0 {
		h = append(h, kafka.Header{Key: HeaderFields, Value: hb.bytes(func(b []byte) []byte { return append(b, s.b[:s.n]...) })})
	}
	h = hb.carriedHeaders(h, e)
	if hb.policy != "" {
		h = append(h, kafka.Header{Key: HeaderPolicy, Value: hb.name(hb.policy)})
	}
	h = hb.handBackHeaders(h, e)
	return append(h, kafka.Header{Key: HeaderSource, Value: hb.source(m, e)})
}

// carriedHeaders adds to a lane record's headers the deferral it carries
// from the delay tiers.
func (hb *headerBuilder) carriedHeaders(h []kafka.Header, e *entry) []kafka.Header {
	if f := e.tier.Deferral; f.Count > 0 {
		h = append(h,
			kafka.Header{Key: HeaderDeferredCount, Value: hb.bytes(func(b []byte) []byte { return strconv.AppendInt(b, int64(f.Count), 10) })},
			kafka.Header{Key: HeaderDeferredSince, Value: hb.time(f.Since)})
		if e.tier.paused {
			// It waited for a pause: decided paused again, it is the
			// same wait (its count stays).
			h = append(h, kafka.Header{Key: HeaderReason, Value: hb.name(capping.ReasonPaused.String())})
		}
	}
	return h
}

// ownHeaders appends the input's own headers (not capper-*) to h.
func ownHeaders(h []kafka.Header, m *kafka.Message) []kafka.Header {
	for _, x := range m.Headers {
		if len(x.Key) < len(capperPrefix) || x.Key[:len(capperPrefix)] != capperPrefix {
			h = append(h, kafka.Header{Key: x.Key, Value: nonNull(x.Value)})
		}
	}
	return h
}

// releasedHeaders are what a released intent's outcome says of its wait:
// capper-released-at only when a token released it (the records a budget's
// rate holds over).
func (hb *headerBuilder) releasedHeaders(add []kafka.Header, li *laneInfo) []kafka.Header {
	if li.token {
		add = append(add, kafka.Header{Key: HeaderReleasedAt, Value: hb.time(li.releasedAt)})
	}
	if li.budget != "" {
		add = append(add, kafka.Header{Key: HeaderLane, Value: hb.lane(li.budget, li.lane)})
	}
	return append(add, kafka.Header{Key: HeaderWaited, Value: hb.bytes(func(b []byte) []byte {
		return strconv.AppendInt(b, max(0, li.releasedAt.Sub(li.heldSince).Milliseconds()), 10)
	})})
}

// LaneFree reports whether a lane record may pass its budget's gate
// without a token: capping's gate (campaign control and send-by) says it
// will not go now whatever else is decided (its campaign stopped or
// paused, every intent paused, its send-by or its campaign's passed), so a
// stop or a pause reaches what waits behind it at once. Capping still
// decides it (a paused one waits in the delay tiers or the parked topic,
// and is held again when it comes due).
func (w *Worker) LaneFree(m *kafka.Message, now time.Time) bool {
	var campaign string
	var sendBy time.Time
	for _, x := range m.Headers {
		switch x.Key {
		case HeaderSendBy:
			if t, err := parseHeaderTime(nonNull(x.Value)); err == nil {
				sendBy = t
			}
		case HeaderCampaign:
			campaign = string(x.Value)
		case HeaderHeld:
			if r, err := parseHeld(x.Value); err == nil {
				campaign, sendBy = string(r.campaign), r.sendBy
			}
		}
	}
	return !w.campaigns().Gate(campaign, sendBy, now).Go
}
