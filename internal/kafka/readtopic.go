package kafka

// Reading a topic back whole (the audit, tests and tools): every record,
// partition by partition, up to the high watermark as of the call, without
// a consumer group.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// ReadTopic returns every record of topic, partition by partition, from the
// first offset up to the high watermark as of the call. It reads without a
// consumer group, so it commits nothing.
func ReadTopic(ctx context.Context, brokers []string, topic string) ([]Message, error) {
	parts, err := lookupPartitions(ctx, brokers, topic)
	if err != nil {
		return nil, fmt.Errorf("read topic %s: partitions: %w", topic, err)
	}
	var out []Message
	for _, id := range parts {
		msgs, err := readPartition(ctx, brokers[0], topic, id)
		if err != nil {
			return nil, fmt.Errorf("read topic %s partition %d: %w", topic, id, err)
		}
		out = append(out, msgs...)
	}
	return out, nil
}

func readPartition(ctx context.Context, broker, topic string, partition int) ([]Message, error) {
	conn, err := kafkago.DialLeader(ctx, "tcp", broker, topic, partition)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	first, last, err := conn.ReadOffsets()
	if err != nil {
		return nil, err
	}
	var out []Message
	for next := first; next < last; {
		if _, err := conn.Seek(next, kafkago.SeekAbsolute); err != nil {
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

// lookupPartitions is topic's partitions, from the first broker that
// answers.
func lookupPartitions(ctx context.Context, brokers []string, topic string) ([]int, error) {
	t := &kafkago.Transport{} // its own, closed: no pool outlives the read
	defer t.CloseIdleConnections()
	var err error
	for _, b := range brokers {
		var ps []int
		if ps, err = AdminOf(&kafkago.Client{Addr: kafkago.TCP(b), Timeout: 10 * time.Second, Transport: t}).Partitions(ctx, topic); err == nil {
			return ps, nil
		}
	}
	if err == nil {
		err = errors.New("no broker given")
	}
	return nil, err
}
