package testenv

import (
	"testing"

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
