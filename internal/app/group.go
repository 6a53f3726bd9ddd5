package app

// capper group leave: static workers removed from their consumer groups on
// their behalf (they were scaled down: a static worker that stops does not
// leave, so that its restart gets its partitions back).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/capper-dev/capper/internal/config"
	capkafka "github.com/capper-dev/capper/internal/kafka"
)

// GroupLeft is what became of one instance id in one group.
type GroupLeft struct {
	Group, Instance string
	Removed         bool   // it was a member, and is no more
	Error           string // why it could not be removed ("": none)
}

// LeaveGroups removes the static members with instance ids from every
// consumer group the config's workers join (the intents', the delay
// tiers' and lanes', the users' limits applier's).
func LeaveGroups(ctx context.Context, cfg *config.Config, instances []string, log *slog.Logger) ([]GroupLeft, error) {
	kopts, err := kafkaOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	groups := []string{cfg.Kafka.GroupID}
	if len(cfg.Kafka.DelayTiers) > 0 || cfg.Kafka.Topics.Lanes != "" || cfg.Kafka.Topics.Parked != "" {
		groups = append(groups, cfg.Kafka.DelayGroup())
	}
	if cfg.Kafka.Topics.UserLimits != "" {
		groups = append(groups, cfg.Kafka.UserLimitsGroup())
	}
	var out []GroupLeft
	for _, g := range groups {
		t := kopts.Transport()
		res, err := capkafka.RemoveMembers(ctx, t, cfg.Kafka.Brokers, g, instances)
		t.CloseIdleConnections()
		if err != nil {
			return out, fmt.Errorf("kafka.brokers %v: %w", cfg.Kafka.Brokers, err)
		}
		for _, id := range slices.Sorted(slices.Values(instances)) {
			l := GroupLeft{Group: g, Instance: id}
			switch err := res[id]; {
			case err == nil:
				l.Removed = true
			case !errors.Is(err, capkafka.ErrNotMember):
				l.Error = err.Error()
			}
			out = append(out, l)
		}
	}
	return out, nil
}
