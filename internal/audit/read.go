package audit

// Reading a topic back whole, for the audit.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/capper-dev/capper/internal/kafkautil"
	"github.com/segmentio/kafka-go"
)

// ReadTopic returns every record of topic, partition by partition, from the
// first offset up to the high watermark as of the call. It reads without a
// consumer group, so it commits nothing.
func ReadTopic(ctx context.Context, brokers []string, topic string) ([]kafka.Message, error) {
	parts, err := kafkautil.LookupPartitions(ctx, kafka.DefaultDialer, brokers[:1], topic)
	if err != nil {
		return nil, fmt.Errorf("read topic %s: partitions: %w", topic, err)
	}
	var out []kafka.Message
	for _, id := range parts {
		msgs, err := readPartition(ctx, brokers[0], topic, id)
		if err != nil {
			return nil, fmt.Errorf("read topic %s partition %d: %w", topic, id, err)
		}
		out = append(out, msgs...)
	}
	return out, nil
}

func readPartition(ctx context.Context, broker, topic string, partition int) ([]kafka.Message, error) {
	conn, err := kafka.DialLeader(ctx, "tcp", broker, topic, partition)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	first, last, err := conn.ReadOffsets()
	if err != nil {
		return nil, err
	}
	var out []kafka.Message
	for next := first; next < last; {
		if _, err := conn.Seek(next, kafka.SeekAbsolute); err != nil {
			return nil, err
		}
		if dl, ok := ctx.Deadline(); ok {
			_ = conn.SetReadDeadline(dl)
		} else {
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		}
		b := conn.ReadBatch(1, 16<<20)
		for next < last {
			m, err := b.ReadMessage()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					_ = b.Close()
					return nil, err
				}
				break
			}
			m.Topic = topic
			out = append(out, m)
			next = m.Offset + 1
		}
		if err := b.Close(); err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
