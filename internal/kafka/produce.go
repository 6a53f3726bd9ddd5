package kafka

// One-record writes: acks=all, to the partition of the record's key as
// every capper writer and the Java client choose it (murmur2), or to a
// given partition; a nil value is a tombstone. The control topic's records
// and the users' limits records are written this way, one at a time, each
// answered with its offset.

import (
	"context"
	"fmt"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// Position is where a record was written.
type Position struct {
	Topic     string
	Partition int
	Offset    int64
}

func (p Position) String() string { return fmt.Sprintf("%s/%d/%d", p.Topic, p.Partition, p.Offset) }

// ByKey asks WriteRecord for the partition of the record's key.
const ByKey = -1

// WriteRecord writes one record (value nil: a tombstone), timestamped at,
// to partition of topic (ByKey: its key's), with acks=all, and returns
// where it is.
func (a *Admin) WriteRecord(ctx context.Context, topic string, partition int, key, value []byte, at time.Time) (Position, error) {
	if partition == ByKey {
		parts, err := a.Partitions(ctx, topic)
		if err != nil {
			return Position{}, err
		}
		if len(parts) == 0 {
			return Position{}, fmt.Errorf("%s: %w on the brokers", topic, ErrMissingTopic)
		}
		partition = (&kafkago.Murmur2Balancer{}).Balance(kafkago.Message{Key: key}, parts...)
	}
	rec := kafkago.Record{Key: kafkago.NewBytes(key), Time: at}
	if value != nil {
		rec.Value = kafkago.NewBytes(value)
	}
	resp, err := a.c.Produce(ctx, &kafkago.ProduceRequest{Topic: topic, Partition: partition, RequiredAcks: kafkago.RequireAll,
		Records: kafkago.NewRecordReader(rec)})
	if err == nil {
		err = resp.Error
	}
	if err != nil {
		return Position{}, fmt.Errorf("write to %s partition %d: %w", topic, partition, err)
	}
	return Position{Topic: topic, Partition: partition, Offset: resp.BaseOffset}, nil
}
