package testenv

// An in-process Kafka-protocol broker reached over TCP.

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Kafka is an in-process Kafka-protocol broker (kfake) that clients reach over
// TCP on 127.0.0.1, exactly as they would reach a real broker.
type Kafka struct {
	Cluster *kfake.Cluster
	Addrs   []string
}

// StartKafka starts a one-broker cluster with the given topics, each with
// partitions partitions; it stops at test end. Extra kfake options (e.g.
// fault injection through Cluster.Control) may be passed in opts.
func StartKafka(t testing.TB, partitions int32, topics []string, opts ...kfake.Opt) *Kafka {
	t.Helper()
	all := append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...)}, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return &Kafka{Cluster: c, Addrs: c.ListenAddrs()}
}

// Produce writes msgs to topic with acks=all, keyed as given (Murmur2
// partitioning, as the Java client and capper's writers do).
func (k *Kafka) Produce(t testing.TB, topic string, msgs []kafka.Message) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(k.Addrs...), Topic: topic, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, BatchSize: 500, Balancer: &kafka.Murmur2Balancer{}}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("produce %d records to %s: %v", len(msgs), topic, err)
	}
}

// Committed returns the consumer group's committed offset per partition of
// topic (-1: none).
func (k *Kafka) Committed(t testing.TB, group, topic string, partitions int) map[int]int64 {
	t.Helper()
	c := &kafka.Client{Addr: kafka.TCP(k.Addrs...), Timeout: 10 * time.Second}
	parts := make([]int, partitions)
	for i := range parts {
		parts[i] = i
	}
	resp, err := c.OffsetFetch(context.Background(), &kafka.OffsetFetchRequest{
		GroupID: group, Topics: map[string][]int{topic: parts},
	})
	if err != nil {
		t.Fatalf("offset fetch for group %s: %v", group, err)
	}
	out := map[int]int64{}
	for _, p := range resp.Topics[topic] {
		out[p.Partition] = p.CommittedOffset
	}
	return out
}
