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
	// Header names the header the gate stamps each released record with
	// (the time of its release); HeldHeader the one that says when it was
	// held (for capper_pacing_oldest_wait_seconds).
	Header, HeldHeader string
	// Stamp, when set, stamps a record whose form carries its release
	// time in place (a compact lane record) and reports whether it did;
	// Held, when set, is when such a record was held (zero: not one).
	Stamp func(m *kafka.Message, at time.Time) bool
	Held  func(m *kafka.Message) time.Time
}

// Pass waits until the records at the head of msgs (of one lane topic's
// partition, in order; hwm the partition's high watermark at their fetch)
// may go and returns how many go now (at least one).
// Those that took a token are stamped with Header (their release time: the
// budget's rate holds over these), and so are those of the lane of a budget
// the policy dropped (released unpaced); those that pass without a token
// because they cannot go now (Free) are not. A record with an empty Header
// is stamped in place (records must not share header arrays: kafka-go's
// reader gives each its own), one without has its headers copied.
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
	var stamp []byte
	// A compact lane record (Stamp), and one held with an empty Header
	// (capper's lane records, since it was added), is stamped in place.
	// The others' headers are copied (a record's own may be shared, so
	// they are not appended to), cut from one array.
	var backing []kafka.Header
	for i := range msgs[:n] {
		m := &msgs[i]
		if g.Stamp != nil && g.Stamp(m, now) {
			continue
		}
		if stamp == nil {
			stamp = []byte(now.UTC().Format(kafka.TimeLayout))
		}
		if stampInPlace(m, g.Header, stamp) {
			continue
		}
		if backing == nil {
			size := 0
			for j := i; j < n; j++ {
				size += len(msgs[j].Headers) + 1
			}
			backing = make([]kafka.Header, 0, size)
		}
		from := len(backing)
		backing = append(append(backing, m.Headers...), kafka.Header{Key: g.Header, Value: stamp})
		m.Headers = backing[from:len(backing):len(backing)]
	}
	return n, nil
}

// stampInPlace sets the value of m's empty header key (its placeholder)
// to stamp, and reports whether m had one.
func stampInPlace(m *kafka.Message, key string, stamp []byte) bool {
	for i := range m.Headers {
		if h := &m.Headers[i]; h.Key == key && len(h.Value) == 0 {
			h.Value = stamp
			return true
		}
	}
	return false
}

// held is when m was held (zero: unreadable, or no HeldHeader).
func (g *Gate) held(m *kafka.Message) time.Time {
	if g.Held != nil {
		if t := g.Held(m); !t.IsZero() {
			return t
		}
	}
	for _, h := range m.Headers {
		if h.Key == g.HeldHeader && g.HeldHeader != "" {
			t, err := time.Parse(kafka.TimeLayout, string(h.Value))
			if err == nil {
				return t
			}
		}
	}
	return time.Time{}
}
