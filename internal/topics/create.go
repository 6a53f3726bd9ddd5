package topics

// Create: the topics the config (and its policy's budgets) names that the
// brokers lack, created with the partitions and configs capper needs;
// existing topics are never altered, a wrong one is reported.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/pacing"
)

// DefaultPartitions is the input's partitions when Create creates it.
const DefaultPartitions = 12

// CreateOptions configures Create.
type CreateOptions struct {
	Kafka *config.Kafka
	// Budgets are the policy's: their missing lane topics are created too
	// (nil: none). Budgets need Kafka.Topics.Lanes (ErrNoLanes).
	Budgets *pacing.Set
	// Partitions is the input's when it is created (0: DefaultPartitions);
	// every other topic but the control topic gets as many as the input has.
	Partitions int
	// ReplicationFactor of every topic created (-1 or 0: the brokers'
	// default.replication.factor).
	ReplicationFactor int
	// DryRun reports what would be created and creates nothing. (It does
	// not ask the brokers to validate the creations: kafka-go's client
	// waits, after a validate-only CreateTopics, for topics that never
	// appear.)
	DryRun bool
	// Fix is the command that checks the topics, named in the findings.
	Fix string
}

// Create creates every topic of the config and the budgets that the
// brokers lack, and reports each: created (or would create, with DryRun),
// or what it is (ok, warn, wrong, as Check says; never altered). A topic
// another client creates meanwhile is reported as not created (already
// exists). An error is one asking the brokers or one they gave for a
// creation (the topics named), or ErrNoLanes.
func Create(ctx context.Context, c Admin, o CreateOptions) (Report, error) {
	if err := lanesNamed(o.Kafka, o.Budgets); err != nil {
		return Report{}, err
	}
	named := Named(o.Kafka, o.Budgets)
	have, err := describe(ctx, c, named)
	if err != nil {
		return Report{}, err
	}
	// The input's partitions, or those it is created with: an existing
	// tier or lane is checked against them.
	input := have[o.Kafka.Topics.Input].partitions
	if input == 0 {
		input = o.Partitions
		if input <= 0 {
			input = DefaultPartitions
		}
	}
	var r Report
	for _, t := range named {
		r.Findings = append(r.Findings, verdict(t, have[t.Name], input, CheckOptions{Kafka: o.Kafka, Budgets: o.Budgets, Fix: o.Fix}))
	}
	rf := o.ReplicationFactor
	if rf == 0 {
		rf = -1
	}
	var req []kafka.TopicSpec
	at := map[string]int{} // topic -> finding
	for i, f := range r.Findings {
		if f.State != Missing {
			continue
		}
		req = append(req, kafka.TopicSpec{Name: f.Name, Partitions: f.Topic.Partitions(input), ReplicationFactor: rf, Configs: f.Configs()})
		at[f.Name] = i
	}
	if len(req) == 0 {
		return r, nil
	}
	if o.DryRun {
		for _, tc := range req {
			f := &r.Findings[at[tc.Name]]
			f.State, f.Partitions, f.Note = WouldCreate, tc.Partitions, describeCreate(tc)
		}
		return r, nil
	}
	errs, err := c.CreateTopics(ctx, req)
	if err != nil {
		return Report{}, err
	}
	var failed []string
	for _, tc := range req {
		f := &r.Findings[at[tc.Name]]
		if err := errs[tc.Name]; err != nil {
			f.Note = fmt.Sprintf("not created: %v", err)
			failed = append(failed, fmt.Sprintf("%s (%s): %v", tc.Name, f.Key, err))
			continue
		}
		f.State, f.Partitions, f.Note = Created, tc.Partitions, describeCreate(tc)
	}
	if len(failed) > 0 {
		return r, fmt.Errorf("create topics: %s", strings.Join(failed, "; "))
	}
	return r, nil
}

// describeCreate says what a topic is created with.
func describeCreate(tc kafka.TopicSpec) string {
	s := fmt.Sprintf("%d %s, replication factor ", tc.Partitions, plural(tc.Partitions, "partition"))
	if tc.ReplicationFactor < 0 {
		s += "the brokers' default"
	} else {
		s += fmt.Sprint(tc.ReplicationFactor)
	}
	for _, k := range slices.Sorted(maps.Keys(tc.Configs)) {
		s += fmt.Sprintf(", %s=%s", k, tc.Configs[k])
	}
	return s
}
