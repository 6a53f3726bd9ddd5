// Package kafkautil holds the Kafka look-ups that several packages share:
// today, the partitions of a topic. It imports nothing of capper's, so that
// any package (dispatch, audit, replay) can use it.
package kafkautil

import (
	"context"
	"fmt"

	"github.com/segmentio/kafka-go"
)

// MetadataClient is what Partitions asks (*kafka.Client has it).
type MetadataClient interface {
	Metadata(context.Context, *kafka.MetadataRequest) (*kafka.MetadataResponse, error)
}

// Partitions returns the IDs of topic's partitions, in the brokers' order,
// from the cluster's metadata; none (and no error) when the response does
// not name the topic. An error is "metadata of <topic>: ...", the topic's
// own error (unknown topic, not authorized) included.
func Partitions(ctx context.Context, c MetadataClient, topic string) ([]int, error) {
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	var ids []int
	for _, t := range md.Topics {
		if t.Name != topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("metadata of %s: %w", topic, t.Error)
		}
		for _, p := range t.Partitions {
			ids = append(ids, p.ID)
		}
	}
	return ids, nil
}

// LookupPartitions returns the IDs of topic's partitions, in the brokers'
// order, asking the brokers one after the other through d (a connection
// each, as a reader dials) until one answers; the error is the last
// broker's, unwrapped. None (and no error): the broker knows no such topic.
func LookupPartitions(ctx context.Context, d *kafka.Dialer, brokers []string, topic string) ([]int, error) {
	err := fmt.Errorf("look up the partitions of %s: no brokers", topic)
	for _, b := range brokers {
		var ps []kafka.Partition
		if ps, err = d.LookupPartitions(ctx, "tcp", b, topic); err == nil {
			ids := make([]int, len(ps))
			for i, p := range ps {
				ids[i] = p.ID
			}
			return ids, nil
		}
	}
	return nil, err
}
