package soak

// The pacing checks, on what the output topics hold at the end. They
// read the output contract (capper-lane, capper-released-at,
// capper-decided-at, the record's own timestamp) and the budget as the
// soak wrote it, and share no code with the engine (internal/pacing):
//
//   - which intents waited: a delivery or refusal of an intent the budget
//     covers (its channel and route, not of an exempt category) names the
//     budget's lane its priority falls in, and no other outcome names a
//     lane;
//   - no second of releases above the budget: the outcomes of what its
//     lanes released, by capper-released-at, are at most rate*1.01 +
//     burst in any window of one second. Every delivery counts, a
//     duplicate too (a held intent decided again, after a redelivery, was
//     released again and took a token again), and so does every refusal
//     but a cancellation: a token pays for a release, not a delivery (the
//     workload's deliveries alone are too few to come near the bound),
//     while a cancelled intent may have passed without one (its campaign
//     stopped). A released intent deferred or paused has its outcome
//     later, of a later release: its first release is not seen, which
//     only lowers the count. Exempt sends take tokens too but never wait,
//     so they are no part of the releases;
//   - no paced delivery reaches the topic late: it was decided at or
//     after its release, and the record's timestamp in the deliveries
//     topic is at most 1 s after its capper-decided-at (the provider gets
//     what was released at about the rate it was released at). A
//     duplicate is left out (its capper-decided-at is when its id was
//     first allowed, not when it was decided), and so is a delivery
//     decided before the broker came back from a restart and written
//     after it went down (nothing could be written in between). One
//     decided before a Redis outage ended (plus redisAfterglow) and
//     written after it began is counted, not reported, when it is late
//     by more than outageLate: its own answer was lost or not
//     acknowledged by a replica, and a later attempt confirmed it (its
//     capper-decided-at stays when its send was counted); up to
//     outageLate, the attempt waited for a node that did not answer. A
//     delivery no longer waits for its batch-mates' retries or give-backs
//     (written early: docs/concepts/pacing.md).

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/kafka"
)

// Header names of the output contract, for pacing.
const (
	hLane       = "capper-lane"        // <budget>/<lane> it waited in
	hReleasedAt = "capper-released-at" // when its budget released it
	hWaited     = "capper-waited-ms"   // how long it waited, in ms
)

// budget is a budget as the soak's policies write it.
type budget struct {
	name  string
	rate  float64
	burst int
}

// maxLate is how long after its decision a paced delivery may reach the
// deliveries topic.
const maxLate = time.Second

// outageLate bounds how late a paced delivery decided in a Redis outage
// may reach its topic: the workers' Redis read timeout (1 s) times the
// client's four tries, and a second.
const outageLate = 5 * time.Second

// redisAfterglow is how long after a Redis outage ends a batch may still
// wait for it: the repair (a restart, a failover) and the retries'
// backoff.
const redisAfterglow = 30 * time.Second

// checkPacing runs the pacing checks on o for budget b; brokerDown are
// the spans the broker was down.
func checkPacing(r *report, o outputs, b budget, brokerDown, redisDown []downWindow) {
	checkLanes(r, o, b)
	checkReleases(r, o, b)
	checkWritten(r, o, brokerDown, redisDown)
	waited := map[string][]int64{}
	for _, m := range o.deliveries {
		if l := header(m, hLane); l != "" {
			ms, _ := strconv.ParseInt(header(m, hWaited), 10, 64)
			waited[l] = append(waited[l], ms)
		}
	}
	for l, ws := range waited {
		var sum int64
		for _, w := range ws {
			sum += w
		}
		r.counts["pacing: deliveries "+l] = len(ws)
		r.counts["pacing: waited ms, mean, "+l] = int(sum / int64(len(ws)))
		r.counts["pacing: waited ms, max, "+l] = int(slices.Max(ws))
	}
}

// laneOf is the lane of budget b an intent waits in, by the policy as the
// soak writes it (pushes routed through fcm, not transactional; urgent
// from priority high, 75, up), or "" when b does not hold it.
func laneOf(b budget, value []byte) (string, error) {
	var v struct {
		Channel, Route, Category string
		Priority                 json.RawMessage
	}
	if err := json.Unmarshal(value, &v); err != nil {
		return "", err
	}
	if v.Channel != "push" || v.Route != paceRoute || v.Category == "transactional" {
		return "", nil
	}
	p := 50 // absent: normal
	if len(v.Priority) > 0 {
		s := strings.Trim(string(v.Priority), `"`)
		switch s {
		case "low":
			p = 25
		case "normal":
			p = 50
		case "high":
			p = 75
		default:
			n, err := strconv.Atoi(s)
			if err != nil {
				return "", fmt.Errorf("priority %s: %v", v.Priority, err)
			}
			p = n
		}
	}
	if p >= 75 {
		return b.name + "/" + paceLanes[0], nil
	}
	return b.name + "/" + paceLanes[1], nil
}

// checkLanes: every outcome of an intent b covers names the lane its
// priority falls in; no other outcome names a lane.
func checkLanes(r *report, o outputs, b budget) {
	for _, x := range [][]kafka.Message{o.deliveries, o.suppressed} {
		for _, m := range x {
			want, err := laneOf(b, m.Value)
			if err != nil {
				r.add("lanes", "%s: read the intent: %v", header(m, hSource), err)
				continue
			}
			if got := header(m, hLane); got != want {
				r.add("lanes", "%s (%s %s, campaign %s): %s %q, want %q: %s", header(m, hSource), m.Topic, header(m, hDecision),
					campaignOf(m), hLane, got, want, m.Value)
			}
		}
	}
}

// release is one delivery a budget released, for the releases check.
type release struct {
	at   time.Time
	desc string
}

// checkReleases: the outcomes of what b's lanes released (deliveries and
// refusals, cancellations aside) are at most rate*1.01 + burst in any
// window of one second (from a release to a second after it, that second
// excluded). A window above it is reported with every outcome in it; the
// next window looked at starts past it.
func checkReleases(r *report, o outputs, b budget) {
	var rs []release
	for _, m := range slices.Concat(o.deliveries, o.suppressed) {
		lane := header(m, hLane)
		if !strings.HasPrefix(lane, b.name+"/") || header(m, hDecision) == "cancelled" {
			continue
		}
		at, err := time.Parse(timeLayout, header(m, hReleasedAt))
		if err != nil {
			r.add("releases", "%s (lane %s): %s %q: %v", header(m, hSource), lane, hReleasedAt, header(m, hReleasedAt), err)
			continue
		}
		rs = append(rs, release{at, fmt.Sprintf("%s %s %s released-at %s decided-at %s%s", header(m, hSource), lane,
			header(m, hDecision), header(m, hReleasedAt), header(m, hDecidedAt), dupNote(m))})
	}
	slices.SortStableFunc(rs, func(a, b release) int { return a.at.Compare(b.at) })
	limit := b.rate*1.01 + float64(b.burst)
	ts := make([]time.Time, len(rs))
	for i, x := range rs {
		ts[i] = x.at
	}
	most, from := audit.BusiestSecond(ts)
	if float64(most) > limit {
		var in []string
		last := from
		for _, x := range rs {
			if !x.at.Before(from) && x.at.Before(from.Add(time.Second)) {
				in, last = append(in, x.desc), x.at
			}
		}
		r.add("releases", "budget %s released %d intents (by their outcomes) from %s to %s, within a second: more than rate*1.01 + burst = %.2f:\n      %s",
			b.name, most, from.Format(timeLayout), last.Format(timeLayout), limit, strings.Join(in, "\n      "))
	}
	r.counts["pacing: outcomes released by "+b.name+" (cancellations aside)"] = len(rs)
	r.counts["pacing: most released in a second"] = most
	r.counts["pacing: most a second may release (rate*1.01 + burst)"] = int(math.Floor(limit))
}

func dupNote(m kafka.Message) string {
	if header(m, hDuplicate) == "true" {
		return " duplicate"
	}
	return ""
}

// checkWritten: a delivery that waited in a lane was decided at or after
// its release, and reaches the deliveries topic (the record's timestamp)
// at most maxLate after its capper-decided-at; a duplicate is left out,
// and a delivery decided
// before the broker came back from a restart and written after it went
// down is counted, not reported.
func checkWritten(r *report, o outputs, brokerDown, redisDown []downWindow) {
	for _, m := range o.deliveries {
		lane := header(m, hLane)
		if lane == "" {
			continue
		}
		if header(m, hDuplicate) == "true" {
			r.counts["pacing: duplicates delivered (their decided-at is their id's first)"]++
			continue
		}
		at, err := time.Parse(timeLayout, header(m, hDecidedAt))
		if err != nil || m.Time.IsZero() {
			r.add("written", "%s (lane %s): %s %q (%v), record timestamp %s", header(m, hSource), lane, hDecidedAt,
				header(m, hDecidedAt), err, m.Time)
			continue
		}
		if rel, err := time.Parse(timeLayout, header(m, hReleasedAt)); err != nil || at.Before(rel) {
			r.add("written", "%s (lane %s) decided at %s, before its release at %q (%v)", header(m, hSource), lane,
				header(m, hDecidedAt), header(m, hReleasedAt), err)
		}
		late := m.Time.Sub(at)
		if late <= maxLate {
			continue
		}
		if slices.ContainsFunc(brokerDown, func(w downWindow) bool { return at.Before(w.to) && m.Time.After(w.from) }) {
			r.counts["pacing: deliveries written late across a broker restart"]++
			continue
		}
		if slices.ContainsFunc(redisDown, func(w downWindow) bool {
			return at.Before(w.to.Add(redisAfterglow)) && m.Time.After(w.from)
		}) {
			if late <= outageLate {
				// Its attempt waited for a node that did not answer.
				r.counts["pacing: deliveries written late (at most 5 s), decided in a Redis outage"]++
			} else {
				// Confirmed by a later attempt: its own answer was lost.
				r.counts["pacing: deliveries written late, their own answer lost in a Redis outage"]++
			}
			continue
		}
		r.add("written", "%s (lane %s) decided at %s, written at %s: %s after its decision (released at %s, %s, %s/%d/%d)",
			header(m, hSource), lane, header(m, hDecidedAt), m.Time.UTC().Format(timeLayout), late.Round(time.Millisecond),
			header(m, hReleasedAt), header(m, hDecision), m.Topic, m.Partition, m.Offset)
	}
}
