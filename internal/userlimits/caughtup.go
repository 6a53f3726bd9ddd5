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

	"github.com/capper-dev/capper/internal/kafkautil"
)

// Applied waits until group has committed, on every partition of topic,
// at least the end offset the partition had when Applied was called:
// every record written before then is in Redis. It polls every poll, and
// returns ctx's error when ctx ends first.
func Applied(ctx context.Context, c *kafka.Client, group, topic string, poll time.Duration) error {
	parts, err := kafkautil.Partitions(ctx, c, topic)
	if err != nil {
		return err
	}
	reqs := make([]kafka.OffsetRequest, 0, 2*len(parts))
	for _, p := range parts {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	offs, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	ends := map[int]int64{}
	for _, po := range offs.Topics[topic] {
		if po.Error != nil {
			return fmt.Errorf("end offset of %s/%d: %w", topic, po.Partition, po.Error)
		}
		if po.LastOffset > po.FirstOffset { // nothing kept: nothing to apply
			ends[po.Partition] = po.LastOffset
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
