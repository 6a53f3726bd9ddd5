package testenv

// An in-process Kafka-protocol broker reached over TCP.

import (
	"context"
	"runtime"
	"strings"
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

// ControlTopic is the campaign control topic the docs and the tests name.
// StartKafka creates it as `capper topics create` does (TopicConfigs): a
// worker refuses a control topic that is not compacted.
const ControlTopic = "capper-control"

// TopicConfigs are the configs a test creates topic with: ControlTopic's
// (compacted, min.compaction.lag.ms 7 days), nil for any other. They are
// what internal/topics creates the control topic with (its tests check
// that they agree); testenv cannot import it, since the packages below it
// (capping) test with testenv.
func TopicConfigs(topic string) map[string]string {
	if topic != ControlTopic {
		return nil
	}
	return map[string]string{"cleanup.policy": "compact", "min.compaction.lag.ms": "604800000"}
}

// StartKafka starts a one-broker cluster with the given topics, each with
// partitions partitions (ControlTopic with its TopicConfigs); it stops at
// test end. Extra kfake options (e.g. fault injection through
// Cluster.Control) may be passed in opts.
func StartKafka(t testing.TB, partitions int32, topics []string, opts ...kfake.Opt) *Kafka {
	t.Helper()
	var seeded, configured []string
	for _, topic := range topics {
		if TopicConfigs(topic) != nil {
			configured = append(configured, topic)
		} else {
			seeded = append(seeded, topic)
		}
	}
	all := append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(partitions, seeded...)}, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(func() {
		c.Close()
		// A test's own clients (Produce, Committed, a test's writer) use
		// kafka-go's DefaultTransport, which keeps a connection pool per
		// broker address, each asking its broker for metadata until
		// closed: close them with the broker, before another server gets
		// its port and is read as a Kafka broker.
		if dt, ok := kafka.DefaultTransport.(*kafka.Transport); ok {
			dt.CloseIdleConnections()
		}
	})
	for _, topic := range configured {
		if err := c.CreateTopic(topic, partitions, TopicConfigs(topic)); err != nil {
			t.Fatalf("create topic %s: %v", topic, err)
		}
	}
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

// KafkaPools counts the kafka-go connection pools running in this process:
// each keeps a goroutine that asks its brokers for metadata until its
// transport closes it (a test that a client closes what it opened).
func KafkaPools() int {
	buf := make([]byte, 16<<20)
	n := runtime.Stack(buf, true)
	return strings.Count(string(buf[:n]), "kafka-go.(*connPool).discover(")
}
