package dispatch

// Writing a batch's outcomes, with retries until Kafka acknowledged each.

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/segmentio/kafka-go"
)

func (w *Worker) writeAll(ctx context.Context, o outputs) error {
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, t := range []struct {
		name string
		wr   Writer
		msgs []kafka.Message
	}{
		{"deliveries", w.o.Deliveries, o.deliveries},
		{"suppressed", w.o.Suppressed, o.suppressed},
		{"dead_letter", w.o.DeadLetter, o.deadLetter},
	} {
		if len(t.msgs) == 0 || t.wr == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.write(ctx, t.name, t.wr, t.msgs)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// write retries until every record is acknowledged. After a partial failure
// only the failed records are sent again; the others are already in the log
// (a retry of a record whose ack was lost duplicates it, with the same id).
func (w *Worker) write(ctx context.Context, topic string, wr Writer, msgs []kafka.Message) error {
	backoff := w.o.RetryInitial
	for attempt := 1; ; attempt++ {
		err := wr.WriteMessages(ctx, msgs...)
		if err == nil {
			return nil
		}
		w.m.writeErrors.WithLabelValues(topic).Inc()
		if ctx.Err() != nil {
			return fmt.Errorf("write %d records to %s: %s", len(msgs), topic, summarize(err))
		}
		var werrs kafka.WriteErrors
		if errors.As(err, &werrs) && len(werrs) == len(msgs) {
			failed := msgs[:0:0]
			for j, e := range werrs {
				if e != nil {
					failed = append(failed, msgs[j])
				}
			}
			msgs = failed
		}
		if attempt == 1 || attempt%10 == 0 {
			w.o.Logger.Warn("kafka write failed; retrying", "topic", topic, "records", len(msgs),
				"attempt", attempt, "error", summarize(err))
		}
		if len(msgs) == 0 {
			return nil
		}
		if serr := sleep(ctx, backoff); serr != nil {
			return fmt.Errorf("write %d records to %s: %w (last error: %s)", len(msgs), topic, serr, summarize(err))
		}
		backoff = min(2*backoff, w.o.RetryMax)
	}
}

// summarize shortens kafka.WriteErrors, whose text lists every record's
// error (thousands of lines for one failed batch), to a count and the first.
func summarize(err error) string {
	var werrs kafka.WriteErrors
	if !errors.As(err, &werrs) {
		return err.Error()
	}
	for _, e := range werrs {
		if e != nil {
			return fmt.Sprintf("%d of %d records failed, first: %v", werrs.Count(), len(werrs), e)
		}
	}
	return err.Error()
}
