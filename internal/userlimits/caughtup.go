package userlimits

// Catching up at a worker's start: records written while no worker ran
// (or before its group's last commit) are applied before it decides, so
// that "applied to every decision after the write" holds from a worker's
// first decision.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// Applied waits until group has committed, on every partition of topic,
// at least the end offset the partition had when Applied was called:
// every record written before then is in Redis. It polls every poll, and
// returns ctx's error when ctx ends first.
func Applied(ctx context.Context, c *kafka.Client, group, topic string, poll time.Duration) error {
	first, last, err := partitionOffsets(ctx, c, topic)
	if err != nil {
		return err
	}
	parts := make([]int, 0, len(last))
	ends := map[int]int64{}
	for p, end := range last {
		parts = append(parts, p)
		if end > first[p] { // nothing kept: nothing to apply
			ends[p] = end
		}
	}
	for {
		committed, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
		switch {
		case err != nil:
			return fmt.Errorf("committed offsets of group %s: %w", group, err)
		case committed.Error != nil && !errors.Is(committed.Error, kafka.GroupIdNotFound):
			return fmt.Errorf("committed offsets of group %s: %w", group, committed.Error)
		}
		done := 0
		for _, p := range committed.Topics[topic] {
			if end, ok := ends[p.Partition]; ok && p.Error == nil && p.CommittedOffset >= end {
				done++
			}
		}
		if done >= len(ends) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}
