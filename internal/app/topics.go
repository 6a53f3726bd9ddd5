package app

// capper topics check|create (the config's topics and the lane topics of
// its policy's budgets), and the check of the topics' partitions and
// settings at the worker's start (internal/topics owns what each needs).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/capper-dev/capper/internal/config"
	capkafka "github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/topics"
)

// TopicsOptions configures CheckTopics and CreateTopics.
type TopicsOptions struct {
	// ConfigPath is the config's file, named in the fixes.
	ConfigPath string
	// PolicyFile is a policy document (or worker config) whose budgets'
	// lane topics are covered instead of those of the policy in force
	// (e.g. one about to be published); named in the fixes.
	PolicyFile string
	// Create's (see topics.CreateOptions).
	Partitions        int
	ReplicationFactor int
	DryRun            bool
}

// CheckTopics reports every topic cfg names, and the lane topics of the
// policy's budgets: ok, missing or wrong (and the fix). Wrong and missing
// topics are in the report, not the error (see topics.Report.Err).
func CheckTopics(ctx context.Context, cfg *config.Config, o TopicsOptions, log *slog.Logger) (topics.Report, error) {
	set, err := topicsBudgets(ctx, cfg, o.PolicyFile, log)
	if err != nil {
		return topics.Report{}, err
	}
	admin, err := topicsAdmin(cfg, log)
	if err != nil {
		return topics.Report{}, err
	}
	defer admin.Close()
	return topics.Check(ctx, admin, topics.CheckOptions{Kafka: &cfg.Kafka, Budgets: set,
		Fix: topicsCommand("create", o.ConfigPath, o.PolicyFile)})
}

// CreateTopics creates every topic cfg names, and the lane topics of the
// policy's budgets, that the brokers lack (with DryRun, none), and
// reports every topic.
func CreateTopics(ctx context.Context, cfg *config.Config, o TopicsOptions, log *slog.Logger) (topics.Report, error) {
	set, err := topicsBudgets(ctx, cfg, o.PolicyFile, log)
	if err != nil {
		return topics.Report{}, err
	}
	admin, err := topicsAdmin(cfg, log)
	if err != nil {
		return topics.Report{}, err
	}
	defer admin.Close()
	return topics.Create(ctx, admin, topics.CreateOptions{Kafka: &cfg.Kafka, Budgets: set, Partitions: o.Partitions,
		ReplicationFactor: o.ReplicationFactor, DryRun: o.DryRun, Fix: topicsCommand("check", o.ConfigPath, o.PolicyFile)})
}

// topicsCommand is `capper topics VERB` for config (and policy, when
// given), named in a fix.
func topicsCommand(verb, config, policy string) string {
	s := "capper topics " + verb + " --config " + config
	if policy != "" {
		s += " --policy " + policy
	}
	return s
}

// topicsBudgets are the budgets whose lane topics the topics commands
// cover: policy's (a file), else the policy in force's. Without
// kafka.topics.lanes, a policy in force that cannot be read is only
// warned about (the config's topics are checked all the same: a config
// without pacing needs no policy for them); with it, it is an error. A
// policy with budgets needs kafka.topics.lanes.
func topicsBudgets(ctx context.Context, cfg *config.Config, policy string, log *slog.Logger) (*pacing.Set, error) {
	p, err := readBudgets(ctx, cfg, policy, log)
	switch {
	case err != nil && policy == "" && cfg.Kafka.Topics.Lanes == "":
		log.Warn("the policy in force was not read: the lane topics of its budgets (if any) are not covered", "error", err)
		return nil, nil
	case err != nil:
		return nil, err
	}
	if err := p.needLanes(cfg); err != nil {
		return nil, err
	}
	return p.budgets, nil
}

func topicsAdmin(cfg *config.Config, log *slog.Logger) (*capkafka.Admin, error) {
	kopts, err := kafkaOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	return capkafka.NewAdmin(kopts)
}

// checkTopicSettings refuses to start on a topic that exists but is wrong
// (a delay tier with fewer partitions than the input, a control topic that
// is not compacted, ...: topics.Check), naming each and its fix; a warning
// is logged. The missing topics were refused before (checkTopics).
func checkTopicSettings(ctx context.Context, admin topics.Admin, k *config.Kafka, lanes *pacing.Set, log *slog.Logger) error {
	r, err := topics.Check(ctx, admin, topics.CheckOptions{Kafka: k, Budgets: lanes, Fix: "capper topics create --config FILE --policy FILE"})
	if err != nil {
		return fmt.Errorf("kafka topics: %w", err)
	}
	for _, f := range r.Findings {
		for _, w := range f.Warnings {
			log.Warn("kafka topic setting", "key", f.Key, "topic", f.Name, "warning", w)
		}
	}
	wrong := r.Wrong()
	if len(wrong) == 0 {
		return nil
	}
	errs := make([]error, len(wrong))
	for i, f := range wrong {
		errs[i] = fmt.Errorf("%s topic %s: %s", f.Key, f.Name, strings.Join(f.Problems, "; "))
	}
	return configError{fmt.Errorf("kafka topics (capper topics check --config FILE lists them all): %w", errors.Join(errs...))}
}
