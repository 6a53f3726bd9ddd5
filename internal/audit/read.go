package audit

// Reading a topic back whole, for the audit.

import (
	"context"

	"github.com/capper-dev/capper/internal/kafka"
)

// ReadTopic returns every record of topic, partition by partition, from the
// first offset up to the high watermark as of the call (the Kafka room's
// ReadTopic). It reads without a consumer group, so it commits nothing.
func ReadTopic(ctx context.Context, brokers []string, topic string) ([]kafka.Message, error) {
	return kafka.ReadTopic(ctx, brokers, topic)
}
