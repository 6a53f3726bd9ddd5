package dispatch

// Routing: which topic each outcome goes to.

import (
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/capping"
)

// outputs are a batch's records per output topic, in batch order.
type outputs struct {
	deliveries, suppressed, deadLetter []kafka.Message
	parked                             []kafka.Message
	delayed                            [][]kafka.Message          // per tier
	held                               map[string][]kafka.Message // per lane topic
}

// Where route sends an entry: nowhere (written already, or elsewhere), an
// output topic, or a delay tier (destTier0 + its index).
const (
	destNone = iota
	destDeliveries
	destSuppressed
	destDeadLetter
	destParked
	destTier0
)

// destinations says where each entry of b goes, and how many go to each.
func (w *Worker) destinations(b *batch) (dst []uint8, counts []int) {
	dst = make([]uint8, len(b.msgs))
	counts = make([]int, destTier0+len(w.o.Tiers))
	for i := range b.entries {
		e := &b.entries[i]
		switch {
		case e.early:
			// written before the batch was decided (writeEarly)
		case e.kind == kindStatus:
			// counted, nothing to write
		case e.kind == kindUnreadable:
			dst[i] = destDeadLetter
		case e.kind == kindHold:
			// written by route, per lane topic
		case e.kind == kindHop:
			dst[i] = uint8(destTier0 + w.delay(e, b.now, e.tier.notBefore))
		case e.kind == kindIntent, e.kind == kindDue:
			switch d := &e.decision; d.Outcome {
			case capping.Invalid:
				dst[i] = destDeadLetter
			case capping.Capped, capping.Cancelled:
				if w.suppressed.wr != nil {
					dst[i] = destSuppressed
				}
			case capping.Deferred:
				dst[i] = uint8(destTier0 + w.delay(e, d.At, d.NotBefore))
				if w.parks(e) {
					dst[i] = destParked
				}
			default:
				dst[i] = destDeliveries
			}
		}
		counts[dst[i]]++
	}
	return dst, counts
}

// route sends unreadable entries and intents the engine refused to the
// dead-letter topic, capped and cancelled intents to the suppressed topic
// (or nowhere, without one), deferred ones and hops to a delay tier, and everything
// else, shadow-capped included, to deliveries; a delivery status has no
// output. Keys and values are the input's bytes, untouched. The records
// and their headers are cut from hb's arrays (reset: stage 2's, once the
// batch before is written), or from new ones (hb nil).
func (w *Worker) route(b *batch, hb *headerBuilder) outputs {
	// Where each entry goes, first: the slices are then made to size
	// (a batch's messages are large, and growing them copies each twice).
	dst, counts := w.destinations(b)
	if hb == nil {
		hb = newHeaderBuilder(b.snap, b.policy)
	} else {
		hb.reset(b.snap, b.policy)
	}
	o := outputs{delayed: make([][]kafka.Message, len(w.o.Tiers)), held: heldOutputs(b, &hb.spent.records)}
	lists := make([]*[]kafka.Message, len(counts))
	lists[destDeliveries], lists[destSuppressed], lists[destDeadLetter], lists[destParked] = &o.deliveries, &o.suppressed, &o.deadLetter, &o.parked
	for t := range o.delayed {
		lists[destTier0+t] = &o.delayed[t]
	}
	for k, n := range counts {
		if k != destNone && n > 0 {
			*lists[k] = hb.spent.records.get(n)
		}
	}
	// A record has up to about 16 headers: a small batch (a lane's,
	// released at its budget's rate) does not need an array of 1024.
	hb.chunk = 16 * len(b.msgs)
	hb.controlSeq = b.controlSeq
	for i := range b.msgs {
		m, e := &b.msgs[i], &b.entries[i]
		if e.kind == kindHold {
			w.holdRecord(&o, hb, m, e)
			continue
		}
		if dst[i] == destNone {
			continue
		}
		key, value := m.Key, m.Value
		if e.invalid != nil && len(value) > w.o.Decoder.maxBytes {
			// An oversize intent: its dead-letter copy (value and headers)
			// could exceed what the broker accepts, so only the start of
			// the value goes along.
			value, e.truncated = value[:w.o.Decoder.maxBytes], true
		}
		var h []kafka.Header
		if e.kind == kindHop {
			h = hb.hop(m, e.dueAt)
		} else {
			h = hb.build(m, e)
		}
		l := lists[dst[i]]
		// Partition: a delay tier's (and the parked topic's) writer puts
		// the record in the partition of its user's input partition (the
		// others ignore it).
		*l = append(*l, kafka.Message{Key: nonNull(key), Value: nonNull(value), Headers: h, Partition: e.home})
	}
	return o
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// nonNull turns a nil key or value into 0 bytes. kafka-go reads a null and
// a 0-byte field alike (nil), and writes nil as null: a null value on a
// compacted topic is a tombstone, so capper never writes one.
func nonNull(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
