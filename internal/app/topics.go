package app

// capper topics check|create, and the check of the topics' partitions and
// settings at the worker's start (internal/topics owns what each needs).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/topics"
)

// TopicsOptions configures CheckTopics and CreateTopics.
type TopicsOptions struct {
	// ConfigPath is the config's file, named in the fixes.
	ConfigPath string
	// Create's (see topics.CreateOptions).
	Partitions        int
	ReplicationFactor int
	DryRun            bool
}

// CheckTopics reports every topic cfg names: ok, missing or wrong (and the
// fix). Wrong and missing topics are in the report, not the error (see
// topics.Report.Err).
func CheckTopics(ctx context.Context, cfg *config.Config, o TopicsOptions, log *slog.Logger) (topics.Report, error) {
	admin, err := topicsAdmin(cfg, log)
	if err != nil {
		return topics.Report{}, err
	}
	return topics.Check(ctx, admin, topics.CheckOptions{Kafka: &cfg.Kafka, Fix: "capper topics create --config " + o.ConfigPath})
}

// CreateTopics creates every topic cfg names that the brokers lack (with
// DryRun, only asks the brokers to validate the creations), and reports
// every topic.
func CreateTopics(ctx context.Context, cfg *config.Config, o TopicsOptions, log *slog.Logger) (topics.Report, error) {
	admin, err := topicsAdmin(cfg, log)
	if err != nil {
		return topics.Report{}, err
	}
	return topics.Create(ctx, admin, topics.CreateOptions{Kafka: &cfg.Kafka, Partitions: o.Partitions,
		ReplicationFactor: o.ReplicationFactor, DryRun: o.DryRun, Fix: "capper topics check --config " + o.ConfigPath})
}

func topicsAdmin(cfg *config.Config, log *slog.Logger) (topics.Admin, error) {
	kopts, err := kafkaOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	c, err := dispatch.NewAdminClient(kopts)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// checkTopicSettings refuses to start on a topic that exists but is wrong
// (a delay tier with fewer partitions than the input, a control topic that
// is not compacted, ...: topics.Check), naming each and its fix; a warning
// is logged. The missing topics were refused before (checkTopics).
func checkTopicSettings(ctx context.Context, admin topics.Admin, k *config.Kafka, log *slog.Logger) error {
	r, err := topics.Check(ctx, admin, topics.CheckOptions{Kafka: k, Fix: "capper topics create --config FILE"})
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
