package pacing

// The gate of a lane topic's partition: its reader hands a fetch's records
// to the worker only as its budget releases them.

import (
	"context"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
)

// Gate releases lane records. Free reports a record that passes without
// a token (it will not be delivered, whatever its decision: a stopped
// campaign's, one past its send_by), so that what waits behind it is not
// held up by it.
type Gate struct {
	Pacer  *Pacer
	Prefix string // the lane topics' prefix
	Free   func(m *kafka.Message, now time.Time) bool
	// Stamp, when set, marks the records of one pass that took a token
	// (or drain the lane of a budget the policy dropped) with their
	// release time; those that pass without a token (Free) are not given
	// to it. Records must not share header arrays: the reader gives each
	// its own, and the stamp may be written in place.
	Stamp func(msgs []kafka.Message, at time.Time)
	// Held, when set, is when a record was held (zero: unreadable), for
	// capper_pacing_oldest_wait_seconds. The gate knows no record form:
	// the lanes' owner (dispatch) reads and stamps its own.
	Held func(m *kafka.Message) time.Time
}

// Pass waits until the records at the head of msgs (of one lane topic's
// partition, in order; hwm the partition's high watermark at their fetch)
// may go and returns how many go now (at least one).
// Those that took a token are stamped (Stamp) with their release time (the
// budget's rate holds over these), and so are those of the lane of a budget
// the policy dropped (released unpaced); those that pass without a token
// because they cannot go now (Free) are not.
func (g *Gate) Pass(ctx context.Context, topic string, msgs []kafka.Message, hwm int64) (n int, err error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	now := g.Pacer.o.Now()
	free := func(m *kafka.Message) bool { return g.Free != nil && g.Free(m, now) }
	for n < len(msgs) && free(&msgs[n]) {
		n++
	}
	tokens := false
	if n == 0 {
		set := g.Pacer.Budgets()
		place, ok := set.Of(g.Prefix, topic)
		if !ok {
			// A lane of a budget the policy no longer has: it drains
			// unpaced (stamped: released, though by no budget).
			n, tokens = len(msgs), true
		} else {
			k := 1
			for k < len(msgs) && !free(&msgs[k]) {
				k++
			}
			b := set.Budgets()[place.Budget]
			// The head waits while Release does, and only then: a lane
			// this worker no longer reads, or an empty one, has no series.
			head := headKey{b.Name, b.Lanes[place.Lane].Name, msgs[0].Partition, place.Retry}
			g.Pacer.m.oldest.set(head, g.held(&msgs[0]))
			n, now, err = g.Pacer.release(ctx, b.Name, place, k, k < len(msgs) || msgs[len(msgs)-1].Offset+1 < hwm)
			g.Pacer.m.oldest.set(head, time.Time{})
			if err != nil {
				return 0, err
			}
			tokens = true
		}
	}
	if !tokens {
		return n, nil // passes without a token carry no release time
	}
	if g.Stamp != nil {
		g.Stamp(msgs[:n], now)
	}
	return n, nil
}

// held is when m was held (zero: unreadable, or no Held).
func (g *Gate) held(m *kafka.Message) time.Time {
	if g.Held == nil {
		return time.Time{}
	}
	return g.Held(m)
}
