package dispatch

// Committing a batch's offsets, after all of its outcomes are acknowledged.

import (
	"context"
	"fmt"

	"github.com/capper-dev/capper/internal/kafka"
)

// commit commits the batch's offsets in one call. A failed commit is not
// retried: the outcomes are already written, so the worst case is a
// redelivery (answered duplicate by Redis), and the next batch's commit
// covers these offsets anyway. This is also why a stale commit after a
// rebalance (segmentio/kafka-go#1308) can only cause redelivery: every
// offset committed here was fully processed by this worker.
func (w *Worker) commit(ctx context.Context, msgs []kafka.Message) error {
	if err := w.o.Reader.CommitMessages(ctx, msgs...); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("commit: %w", err)
		}
		w.m.commitErrors.Inc()
		w.o.Logger.Warn("offset commit failed; the batch may be redelivered", "intents", len(msgs), "error", err)
	}
	return nil
}
