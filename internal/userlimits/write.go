package userlimits

// Writing a user's record (capper user set|snooze|forget): acks=all, to
// the partition of its key as every capper writer and the Java client
// choose it (murmur2).

import (
	"context"
	"fmt"
	"time"

	capkafka "github.com/capper-dev/capper/internal/kafka"
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
func Write(ctx context.Context, o capkafka.Options, topic string, r Record, at time.Time) (Position, error) {
	value, err := Encode(r)
	if err != nil {
		return Position{}, err
	}
	a, err := capkafka.NewAdmin(o)
	if err != nil {
		return Position{}, err
	}
	defer a.Close()
	pos, err := a.WriteRecord(ctx, topic, capkafka.ByKey, Key(r.UserID), value, at)
	if err != nil {
		what := "the record"
		if r.Erase {
			what = "the tombstone"
		}
		return Position{}, fmt.Errorf("write %s of user %d: %w", what, r.UserID, err)
	}
	return Position{Topic: topic, Partition: pos.Partition, Offset: pos.Offset, Time: at}, nil
}
