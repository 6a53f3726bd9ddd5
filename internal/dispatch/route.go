package dispatch

// Routing: which topic each outcome goes to.

import (
	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/capping"
)

// outputs are a batch's records per output topic, in batch order.
type outputs struct {
	deliveries, suppressed, deadLetter []kafka.Message
}

// route sends invalid intents to the dead-letter topic, capped ones to the
// suppressed topic (or nowhere, without one) and everything else, shadow-
// capped included, to deliveries. Keys and values are the input's bytes,
// untouched.
func (w *Worker) route(b *batch) outputs {
	var o outputs
	hb := newHeaderBuilder(b.snap)
	for i := range b.msgs {
		m, rec := &b.msgs[i], &b.records[i]
		var dst *[]kafka.Message
		switch rec.decision.Outcome {
		case capping.Invalid:
			dst = &o.deadLetter
		case capping.Capped:
			if w.o.Suppressed == nil {
				continue
			}
			dst = &o.suppressed
		default:
			dst = &o.deliveries
		}
		*dst = append(*dst, kafka.Message{Key: m.Key, Value: m.Value, Headers: hb.build(m, rec)})
	}
	return o
}
