package dispatch

// The control topic through the Kafka room: the follower's source (the
// partitions' ends, and each partition read outside any group), and the
// write of a control record with acks=all that returns its position.

import (
	"context"
	"fmt"
	"time"

	"github.com/capper-dev/capper/internal/control"
	capkafka "github.com/capper-dev/capper/internal/kafka"
)

// ControlSource reads the control topic for control.Follower.
type ControlSource struct {
	topic string
	tail  *capkafka.Tail
}

// NewControlSource checks the options.
func NewControlSource(o capkafka.Options, topic string) (*ControlSource, error) {
	t, err := capkafka.NewTail(o, topic)
	if err != nil {
		return nil, err
	}
	return &ControlSource{topic: topic, tail: t}, nil
}

// Ends is each partition's end offset now.
func (s *ControlSource) Ends(ctx context.Context) (map[int]int64, error) { return s.tail.Ends(ctx) }

// Read blocks for the next record of partition at or after offset.
func (s *ControlSource) Read(ctx context.Context, partition int, offset int64) (control.Message, error) {
	m, err := s.tail.Read(ctx, partition, offset)
	if err != nil {
		return control.Message{}, fmt.Errorf("read %s partition %d: %w", s.topic, partition, err)
	}
	return control.Message{Partition: m.Partition, Offset: m.Offset, HighWaterMark: m.HighWaterMark, Key: m.Key, Value: m.Value}, nil
}

// Close stops the readers.
func (s *ControlSource) Close() error { return s.tail.Close() }

// WriteRecord writes key and value to partition of the control topic with
// acks=all and returns its offset (the follower's re-assertions).
func (s *ControlSource) WriteRecord(ctx context.Context, partition int, key, value []byte) (int64, error) {
	pos, err := s.tail.Admin().WriteRecord(ctx, s.topic, partition, key, value, time.Now())
	if err != nil {
		return 0, fmt.Errorf("write %q: %w", key, err)
	}
	return pos.Offset, nil
}

// WriteControl writes a control record with acks=all to the partition of
// its key (murmur2, as every capper writer keys) and returns its position.
func WriteControl(ctx context.Context, o capkafka.Options, topic string, r *control.Record) (control.Position, error) {
	value, err := r.Marshal()
	if err != nil {
		return control.Position{}, err
	}
	a, err := capkafka.NewAdmin(o)
	if err != nil {
		return control.Position{}, err
	}
	defer a.Close()
	pos, err := a.WriteRecord(ctx, topic, capkafka.ByKey, []byte(r.Key()), value, r.At)
	if err != nil {
		return control.Position{}, fmt.Errorf("write the control record of %s: %w", r.Key(), err)
	}
	return control.Position{Topic: topic, Partition: pos.Partition, Offset: pos.Offset}, nil
}
