package userlimits

// Writing a user's record (capper user set|snooze|forget): acks=all, to
// the partition of its key as every capper writer and the Java client
// choose it (murmur2).

import (
	"context"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/kafkautil"
)

// Position is where a record was written.
type Position struct {
	Topic     string
	Partition int
	Offset    int64
	Time      time.Time // the record's timestamp
}

func (p Position) String() string { return fmt.Sprintf("%s/%d/%d", p.Topic, p.Partition, p.Offset) }

// Write writes r (a tombstone when r.Erase) to topic with acks=all,
// timestamped at.
func Write(ctx context.Context, o dispatch.KafkaOptions, topic string, r Record, at time.Time) (Position, error) {
	value, err := Encode(r)
	if err != nil {
		return Position{}, err
	}
	c, err := dispatch.NewAdminClient(o)
	if err != nil {
		return Position{}, err
	}
	parts, err := kafkautil.Partitions(ctx, c, topic)
	if err != nil {
		return Position{}, err
	}
	if len(parts) == 0 {
		return Position{}, fmt.Errorf("%s: %w on the brokers", topic, dispatch.ErrMissingTopic)
	}
	key := Key(r.UserID)
	p := (&kafka.Murmur2Balancer{}).Balance(kafka.Message{Key: key}, parts...)
	rec := kafka.Record{Key: kafka.NewBytes(key), Time: at}
	if value != nil {
		rec.Value = kafka.NewBytes(value)
	}
	resp, err := c.Produce(ctx, &kafka.ProduceRequest{Topic: topic, Partition: p, RequiredAcks: kafka.RequireAll,
		Records: kafka.NewRecordReader(rec)})
	if err == nil {
		err = resp.Error
	}
	if err != nil {
		what := "the record"
		if r.Erase {
			what = "the tombstone"
		}
		return Position{}, fmt.Errorf("write %s of user %d to %s: %w", what, r.UserID, topic, err)
	}
	return Position{Topic: topic, Partition: p, Offset: resp.BaseOffset, Time: at}, nil
}
