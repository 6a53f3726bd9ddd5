package dispatch

// Routing: which topic each outcome goes to.

import (
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/capping"
)

// outputs are a batch's records per output topic, in batch order.
type outputs struct {
	deliveries, suppressed, deadLetter []kafka.Message
	delayed                            [][]kafka.Message // per tier
}

// route sends invalid records to the dead-letter topic, capped intents to
// the suppressed topic (or nowhere, without one), deferred ones to a delay
// tier, and everything else, shadow-capped included, to deliveries; a
// delivery status has no output. Keys and values are the input's bytes,
// untouched.
func (w *Worker) route(b *batch) outputs {
	o := outputs{delayed: make([][]kafka.Message, len(w.o.Tiers))}
	hb := newHeaderBuilder(b.snap, b.policy)
	for i := range b.msgs {
		m, rec := &b.msgs[i], &b.records[i]
		if rec.status && rec.invalid == nil {
			continue // a delivery status: counted, nothing to write
		}
		var dst *[]kafka.Message
		switch rec.decision.Outcome {
		case capping.Invalid:
			dst = &o.deadLetter
		case capping.Capped:
			if w.suppressed.wr == nil {
				continue
			}
			dst = &o.suppressed
		case capping.Deferred:
			d := &rec.decision
			t := w.tierFor(d.NotBefore.Sub(d.At))
			rec.dueAt = minTime(d.At.Add(w.o.Tiers[t].Delay), d.NotBefore)
			dst = &o.delayed[t]
		default:
			dst = &o.deliveries
		}
		key, value := m.Key, m.Value
		if rec.decision.Outcome == capping.Invalid && len(value) > w.o.Decoder.maxBytes {
			// An oversize intent: its dead-letter copy (value and headers)
			// could exceed what the broker accepts, so only the start of
			// the value goes along.
			value, rec.truncated = value[:w.o.Decoder.maxBytes], true
		}
		*dst = append(*dst, kafka.Message{Key: nonNull(key), Value: nonNull(value), Headers: hb.build(m, rec)})
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
