package kafka

// The consumer protocol's bytes: what a member says in its join (its
// subscription) and what the leader gives it (its assignment), as Kafka's
// clients write them (version 1: the partitions a member owns, for the
// cooperative protocol). The encoding is canonical (topics and partitions
// sorted): a static member that joins again with the same subscription
// sends the same bytes, and the coordinator then keeps the group as it is.

import (
	"fmt"
	"slices"

	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/consumer"
)

const subscriptionVersion = 1

// subscription is one member's join metadata.
type subscription struct {
	topics   []string
	userData []byte
	owned    []TopicPartition
}

// encodeSubscription writes version 1 for a cooperative protocol, version
// 0 (no owned partitions) for an eager one: kafka-go's ConsumerGroup, the
// workers of earlier versions, cannot read version 1 when it leads.
func encodeSubscription(s subscription, cooperative bool) ([]byte, error) {
	topics := slices.Sorted(slices.Values(s.topics))
	version := int16(0)
	if cooperative {
		version = subscriptionVersion
	}
	userData := s.userData
	if userData == nil {
		userData = []byte{}
	}
	b, err := protocol.Marshal(version, consumer.Subscription{
		Version: version, Topics: topics, UserData: userData, OwnedPartitions: groupByTopic(s.owned)})
	if err != nil {
		return nil, fmt.Errorf("encode a subscription: %w", err)
	}
	return b, nil
}

func decodeSubscription(b []byte) (subscription, error) {
	var c consumer.Subscription
	if err := unmarshalVersioned(b, &c); err != nil {
		return subscription{}, fmt.Errorf("decode a subscription: %w", err)
	}
	return subscription{topics: c.Topics, userData: c.UserData, owned: flatten(c.OwnedPartitions)}, nil
}

// encodeAssignment writes version 0 (what every client reads; version 1
// adds nothing).
func encodeAssignment(tps []TopicPartition) ([]byte, error) {
	b, err := protocol.Marshal(0, consumer.Assignment{Version: 0, AssignedPartitions: groupByTopic(tps), UserData: []byte{}})
	if err != nil {
		return nil, fmt.Errorf("encode an assignment: %w", err)
	}
	return b, nil
}

func decodeAssignment(b []byte) ([]TopicPartition, error) {
	if len(b) == 0 { // a member the leader gave nothing
		return nil, nil
	}
	var a consumer.Assignment
	if err := unmarshalVersioned(b, &a); err != nil {
		return nil, fmt.Errorf("decode an assignment: %w", err)
	}
	return flatten(a.AssignedPartitions), nil
}

// unmarshalVersioned reads b at the version its first two bytes name, at
// most the one known, else at version 0: kafka-go's ConsumerGroup (workers
// of earlier versions) writes version 1 without version 1's fields.
func unmarshalVersioned(b []byte, v any) error {
	if len(b) < 2 {
		return fmt.Errorf("%d bytes", len(b))
	}
	version := min(int16(b[0])<<8|int16(b[1]), subscriptionVersion)
	err := protocol.Unmarshal(b, version, v)
	if err != nil && version > 0 {
		err = protocol.Unmarshal(b, 0, v)
	}
	return err
}

func groupByTopic(tps []TopicPartition) []consumer.TopicPartition {
	sorted := slices.Clone(tps)
	slices.SortFunc(sorted, comparePartitions)
	out := []consumer.TopicPartition{}
	for _, tp := range sorted {
		if n := len(out); n == 0 || out[n-1].Topic != tp.Topic {
			out = append(out, consumer.TopicPartition{Topic: tp.Topic})
		}
		last := &out[len(out)-1]
		last.Partitions = append(last.Partitions, int32(tp.Partition))
	}
	return out
}

func flatten(ctps []consumer.TopicPartition) []TopicPartition {
	var out []TopicPartition
	for _, t := range ctps {
		for _, p := range t.Partitions {
			out = append(out, TopicPartition{t.Topic, int(p)})
		}
	}
	return out
}
