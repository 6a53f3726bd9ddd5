package kafka

// Topics as the brokers have them (partitions, configs), and their
// creation.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	kafkago "github.com/segmentio/kafka-go"
)

// TopicState is a topic as the brokers have it: its partitions, and its
// configs (ConfigsErr: they could not be read, e.g. no DescribeConfigs
// permission).
type TopicState struct {
	Partitions int
	Configs    map[string]string
	ConfigsErr error
}

// DescribeTopics reads names' partitions and configs; a topic the brokers
// do not have is left out.
func (a *Admin) DescribeTopics(ctx context.Context, names []string) (map[string]TopicState, error) {
	md, err := a.c.Metadata(ctx, &kafkago.MetadataRequest{Topics: names})
	if err != nil {
		return nil, fmt.Errorf("read the metadata of topics %s from the brokers: %w", strings.Join(names, ", "), err)
	}
	have := map[string]TopicState{}
	var res []kafkago.DescribeConfigRequestResource
	for _, t := range md.Topics {
		switch {
		case errors.Is(t.Error, kafkago.UnknownTopicOrPartition):
			continue
		case t.Error != nil:
			return nil, fmt.Errorf("read the metadata of topic %s: %w", t.Name, t.Error)
		}
		have[t.Name] = TopicState{Partitions: len(t.Partitions), Configs: map[string]string{}}
		res = append(res, kafkago.DescribeConfigRequestResource{ResourceType: kafkago.ResourceTypeTopic, ResourceName: t.Name})
	}
	if len(res) == 0 {
		return have, nil
	}
	dc, err := a.c.DescribeConfigs(ctx, &kafkago.DescribeConfigsRequest{Resources: res})
	if err != nil {
		return nil, fmt.Errorf("read the configs of topics %s from the brokers: %w", strings.Join(names, ", "), err)
	}
	for _, r := range dc.Resources {
		st, ok := have[r.ResourceName]
		if !ok {
			continue
		}
		if r.Error != nil {
			st.ConfigsErr = r.Error
			have[r.ResourceName] = st
			continue
		}
		for _, e := range r.ConfigEntries {
			st.Configs[e.ConfigName] = e.ConfigValue
		}
	}
	return have, nil
}

// TopicSpec is a topic to create (ReplicationFactor -1: the brokers'
// default).
type TopicSpec struct {
	Name                          string
	Partitions, ReplicationFactor int
	Configs                       map[string]string
}

// CreateTopics creates specs; the error of each that was not created
// (nil: created), and the request's.
func (a *Admin) CreateTopics(ctx context.Context, specs []TopicSpec) (map[string]error, error) {
	req := make([]kafkago.TopicConfig, 0, len(specs))
	names := make([]string, 0, len(specs))
	for _, s := range specs {
		tc := kafkago.TopicConfig{Topic: s.Name, NumPartitions: s.Partitions, ReplicationFactor: s.ReplicationFactor}
		for _, k := range slices.Sorted(maps.Keys(s.Configs)) {
			tc.ConfigEntries = append(tc.ConfigEntries, kafkago.ConfigEntry{ConfigName: k, ConfigValue: s.Configs[k]})
		}
		req, names = append(req, tc), append(names, s.Name)
	}
	resp, err := a.c.CreateTopics(ctx, &kafkago.CreateTopicsRequest{Topics: req})
	if err != nil {
		return nil, fmt.Errorf("create topics %s: %w", strings.Join(names, ", "), err)
	}
	out := map[string]error{}
	for _, s := range specs {
		out[s.Name] = resp.Errors[s.Name]
	}
	return out, nil
}
