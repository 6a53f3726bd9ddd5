package dispatch

// Parking: an intent waiting for a paused campaign (or for every intent
// to be resumed) waits in the parked topic, written once, instead of
// coming back from the first delay tier every tier delay. The parked
// topic's reader hands a record over only once its pause is over (resumed,
// stopped, past control.max_pause); while the head of a partition is still
// paused, it waits. Each parked record says which control state it was
// parked by (capper-control-seq: control.Snapshot.Released, as of the start
// of its batch's decision): when the state in force has applied a resume
// or a stop since the head was parked, something behind it may be free,
// so the reader hands over every record the partition holds then. The
// worker decides each: those no longer paused go on (a resumed one is
// decided, or held by its budget), those still paused are parked again at
// the end, once. A parked intent is so written once per pause, plus once
// per resume or stop of another campaign while it waits (none for a pause,
// a rebalance or a restart).

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/capping"
)

// ParkCheck says whether a parked record is still paused, and until when
// its pause can last (control.max_pause from the pause's record); Freed
// whether the control state applied a resume or a stop since the state a
// record was parked by (its capper-control-seq).
type ParkCheck struct {
	Paused func(m *kafka.Message, now time.Time) (bool, time.Time)
	Freed  func(m *kafka.Message) bool
}

// NewParkCheck reads a parked record's campaign (capper-campaign) against
// the control state ctl, whose pauses last at most maxPause: capping's gate
// says whether it is still paused (the pause's precedence, and max_pause,
// are capping's).
func NewParkCheck(ctl Control, maxPause time.Duration) ParkCheck {
	return ParkCheck{
		Freed: func(m *kafka.Message) bool {
			return ctl.Load().ReleasedSince(parseSeq(findHeader(m.Headers, HeaderControlSeq)))
		},
		Paused: func(m *kafka.Message, now time.Time) (bool, time.Time) {
			c := &capping.Campaigns{State: ctl.Load(), MaxPause: maxPause}
			g := c.Gate(findHeader(m.Headers, HeaderCampaign), time.Time{}, now)
			if g.Reason != capping.ReasonPaused {
				return false, time.Time{}
			}
			return true, g.PausedUntil
		},
	}
}

// parkPoll is how often a waiting parked partition looks at the control
// state (a change is seen within it).
const parkPoll = 100 * time.Millisecond

// releaseParked lets a parked partition's records go as their pause
// allows (see the file's comment).
func (c *Consumer) releaseParked(ctx context.Context, p *partState, msgs []kafka.Message, hwm int64) (int, error) {
	pc := c.o.Park
	for {
		if msgs[0].Offset >= p.parkUntil && pc.Freed(&msgs[0]) {
			// A resume or a stop since the head was parked: what the
			// partition holds now is handed over once.
			p.parkUntil = hwm
		}
		n := 0
		for n < len(msgs) && msgs[n].Offset < p.parkUntil {
			n++
		}
		now := c.now()
		if n == 0 {
			for n < len(msgs) {
				if paused, _ := pc.Paused(&msgs[n], now); paused {
					break
				}
				n++
			}
		}
		if n > 0 {
			return n, nil
		}
		_, until := pc.Paused(&msgs[0], now)
		if err := c.sleep(ctx, min(until.Sub(now), parkPoll)); err != nil {
			return 0, err
		}
	}
}

// formatSeq writes control.Snapshot.Released as capper-control-seq:
// partition:offset pairs, comma-separated ("0:41").
func formatSeq(b []byte, r map[int]int64) []byte {
	for i, p := range slices.Sorted(maps.Keys(r)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(append(strconv.AppendInt(b, int64(p), 10), ':'), r[p], 10)
	}
	return b
}

// parseSeq reads capper-control-seq; what does not parse is the empty
// state (any resume since frees it: the safe side).
func parseSeq(v string) map[int]int64 {
	r := map[int]int64{}
	for pair := range strings.SplitSeq(v, ",") {
		ps, os, ok := strings.Cut(pair, ":")
		p, err1 := strconv.Atoi(ps)
		o, err2 := strconv.ParseInt(os, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return map[int]int64{}
		}
		r[p] = o
	}
	return r
}

// readParked reads a parked record into e: a delay tier's record, due now
// (its reader handed it over because its pause may be over).
func (w *Worker) readParked(m *kafka.Message, e *entry) bool {
	if !readDeferred(m, e) {
		return false
	}
	e.parked = true
	e.kind = kindDue
	return true
}

// parks reports whether a decided entry waits in the parked topic: it
// waits for a pause, and the worker has one.
func (w *Worker) parks(e *entry) bool {
	return w.parked.wr != nil && e.decision.Outcome == capping.Deferred && e.decision.Reason == capping.ReasonPaused
}
