package dispatch

// Committing a batch's offsets, after all of its outcomes are acknowledged:
// the worker's call, and the consumer's, which sends each record's offset
// to the group it came from.

import (
	"context"
	"errors"
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

// CommitMessages commits the records' offsets in the group each came from,
// for the partitions this worker still has.
func (c *Consumer) CommitMessages(ctx context.Context, msgs ...kafka.Message) error {
	in, delay := map[topicPartition]int64{}, map[topicPartition]int64{}
	// A batch is runs of one partition's records (a fetch's, in order):
	// a run's topic is looked at and its map written once.
	for i := 0; i < len(msgs); {
		m := &msgs[i]
		next := m.Offset + 1
		j := i + 1
		for ; j < len(msgs) && msgs[j].Partition == m.Partition && msgs[j].Topic == m.Topic; j++ {
			next = max(next, msgs[j].Offset+1)
		}
		i = j
		dst := in
		if c.tiers[m.Topic] || c.isLane(m.Topic) || m.Topic == c.o.Parked && m.Topic != "" {
			dst = delay
		}
		tp := topicPartition{m.Topic, m.Partition}
		dst[tp] = max(dst[tp], next)
	}
	var errs []error
	if len(in) > 0 {
		errs = append(errs, c.input.commit(ctx, in))
	}
	if dg := c.delayGroup(); len(delay) > 0 && dg != nil {
		errs = append(errs, dg.commit(ctx, delay))
	}
	return errors.Join(errs...)
}
