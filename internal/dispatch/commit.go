package dispatch

// Committing a batch's offsets, after all of its outcomes are acknowledged.

import (
	"context"
	"fmt"

	"github.com/capper-dev/capper/internal/kafka"
)

// commit commits the batch's offsets in one call. A failed commit is not
// retried here: the outcomes are already written, so the worst case is a
// redelivery (answered duplicate by Redis), and the Kafka room commits
// those offsets again with the next commit, before a partition is given
// up, and when the group closes. Every offset committed here was fully
// processed by this worker, so a commit can only cause redelivery.
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
