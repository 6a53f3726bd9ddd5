// Package topics owns what capper needs of its Kafka topics: every topic a
// worker config names, and the lane topics of its policy's budgets, with
// the partitions and settings each needs (Named, Topic.Configs,
// Topic.Partitions), what the brokers have and how it differs (Check), and
// creating what is missing (Create). `capper topics check|create` and the
// worker's start (which refuses a wrong topic) use it.
//
// What a topic needs:
//   - every topic: to exist, and no compaction except the control topic's
//     (the input, the tiers, the lanes and the outputs are keyed by user:
//     compaction keeps only a user's latest record);
//   - a delay tier: at least as many partitions as the input (it is
//     co-partitioned with the input: a deferred intent waits in the tier
//     partition with its user's input partition's index, see
//     dispatch/copartition.go; with fewer, several input partitions share
//     one and the reader of the input is not the reader of the tier), and
//     a retention above its delay;
//   - a lane of a budget of the policy (<kafka.topics.lanes>.<budget>.<lane>,
//     send pacing): at least as many partitions as the input (co-partitioned
//     like a tier), and a retention of 7 days or more (held intents may wait
//     long: created with 7 days; below is warned about); the same for its
//     retry topic (<lane topic>.retry: throttled sends handed back);
//   - the control topic: cleanup.policy=compact only (a state is kept for as
//     long as it is the latest of its key; with delete too, a stop older
//     than retention.ms disappears), and a min.compaction.lag.ms that leaves
//     the workers time to re-assert a state after a foreign record (7 days
//     when created; below an hour is warned about);
//   - the user-limits topic: compacted (a user's latest record is their
//     state, and a tombstone takes every earlier record of the user out of
//     the log); with delete too, a state older than retention.ms leaves the
//     topic (Redis keeps it: warned about); a delete.retention.ms of a day
//     or more (a tombstone outlives a day-long stop of every worker: 7 days
//     when created, below a day warned about).
package topics

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/pacing"
)

// Kind is what a topic is to capper.
type Kind int

const (
	// Input is kafka.topics.input.
	Input Kind = iota
	// Output is a topic capper writes or reads besides the input and the
	// tiers: deliveries, suppressed, dead letters, delivery statuses.
	Output
	// Tier is a delay tier.
	Tier
	// Control is the campaign control topic.
	Control
	// Lane is a lane topic of a budget of the policy (send pacing).
	Lane
	// Parked is kafka.topics.parked: intents waiting for a paused
	// campaign (co-partitioned with the input, like a tier).
	Parked
	// UserLimits is kafka.topics.user_limits: users' own limits, one
	// record per user (compacted).
	UserLimits
)

// The settings capper creates topics with and checks.
const (
	// ControlCompactionLag is the control topic's min.compaction.lag.ms
	// when created: a worker has this long to re-assert a state after a
	// foreign record under its key.
	ControlCompactionLag = 7 * 24 * time.Hour
	// MinControlCompactionLag: below it, check warns.
	MinControlCompactionLag = time.Hour
	// TierRetentionMargin is what a tier's retention keeps beyond its delay
	// (the longest outage planned for); below it, check warns.
	TierRetentionMargin = 24 * time.Hour
	// MinTierRetention is the least retention a tier is created with
	// (Kafka's default, 7 days).
	MinTierRetention = 7 * 24 * time.Hour
	// LaneRetention is a lane's retention when created, and the least
	// check does not warn about: held intents may wait long (a budget
	// below its traffic, workers stopped).
	LaneRetention = 7 * 24 * time.Hour
	// ParkedRetention is the parked topic's retention when created, and
	// the least check accepts without a warning: above the longest
	// control.max_pause (7 days), with a day to spare.
	ParkedRetention = 8 * 24 * time.Hour
	// UserLimitsTombstones is the user-limits topic's delete.retention.ms
	// when created: how long a tombstone stays after compaction, for the
	// workers' group to apply it.
	UserLimitsTombstones = 7 * 24 * time.Hour
	// MinUserLimitsTombstones: below it, check warns.
	MinUserLimitsTombstones = 24 * time.Hour
)

// Topic is one topic the config (or its policy's budgets) names.
type Topic struct {
	// Key is the config key that names it, e.g. kafka.delay_tiers[1].topic;
	// a lane's is its budget and lane: budget "push-fcm" lane "urgent".
	Key   string
	Name  string
	Kind  Kind
	Delay time.Duration // a tier's delay
}

// ErrNoLanes is wrapped by Check and Create for budgets without
// kafka.topics.lanes: their lane topics have no names.
var ErrNoLanes = errors.New("the policy has budgets (send pacing), but kafka.topics.lanes is not set: set it (the prefix of the lane topics, e.g. capper-lanes), or remove the budgets")

// Named lists every topic k names, in the order of the config: the input,
// deliveries, suppressed, dead letters, delivery statuses, the delay tiers,
// the control topic; then the lane topics of budgets (the policy's; nil:
// none), budget by budget, each lane in order followed by its retry topic
// (pacing.RetryTopic). Without
// kafka.topics.lanes, budgets have no lane topic (Check and Create refuse
// that: ErrNoLanes). A name given twice is listed once (config validation
// refuses most of those).
func Named(k *config.Kafka, budgets *pacing.Set) []Topic {
	t := k.Topics
	all := []Topic{
		{Key: "kafka.topics.input", Name: t.Input, Kind: Input},
		{Key: "kafka.topics.deliveries", Name: t.Deliveries, Kind: Output},
		{Key: "kafka.topics.suppressed", Name: t.Suppressed, Kind: Output},
		{Key: "kafka.topics.dead_letter", Name: t.DeadLetter, Kind: Output},
		{Key: "kafka.topics.delivery_status", Name: t.DeliveryStatus, Kind: Output},
	}
	for i, d := range k.DelayTiers {
		all = append(all, Topic{Key: fmt.Sprintf("kafka.delay_tiers[%d].topic", i), Name: d.Topic, Kind: Tier, Delay: d.Delay.D()})
	}
	all = append(all, Topic{Key: "kafka.topics.control", Name: t.Control, Kind: Control},
		Topic{Key: "kafka.topics.parked", Name: t.Parked, Kind: Parked},
		Topic{Key: "kafka.topics.user_limits", Name: t.UserLimits, Kind: UserLimits})
	if t.Lanes != "" {
		for _, b := range budgets.Budgets() {
			for _, l := range b.Lanes {
				all = append(all, Topic{Key: fmt.Sprintf("budget %q lane %q", b.Name, l.Name), Name: pacing.Topic(t.Lanes, b.Name, l.Name), Kind: Lane},
					Topic{Key: fmt.Sprintf("budget %q lane %q retry", b.Name, l.Name), Name: pacing.RetryTopic(t.Lanes, b.Name, l.Name), Kind: Lane})
			}
		}
	}
	seen := map[string]bool{}
	out := all[:0]
	for _, tp := range all {
		if tp.Name == "" || seen[tp.Name] {
			continue
		}
		seen[tp.Name] = true
		out = append(out, tp)
	}
	return out
}

// Configs are the topic configs capper creates t with (nil: the brokers'
// defaults).
func (t Topic) Configs() map[string]string {
	switch t.Kind {
	case Control:
		return map[string]string{"cleanup.policy": "compact", "min.compaction.lag.ms": ms(ControlCompactionLag)}
	case Tier:
		return map[string]string{"retention.ms": ms(max(MinTierRetention, t.Delay+TierRetentionMargin))}
	case Lane:
		return map[string]string{"retention.ms": ms(LaneRetention)}
	case Parked:
		return map[string]string{"retention.ms": ms(ParkedRetention)}
	case UserLimits:
		return map[string]string{"cleanup.policy": "compact", "delete.retention.ms": ms(UserLimitsTombstones)}
	}
	return nil
}

// Partitions is how many partitions capper creates t with, the input having
// input.
func (t Topic) Partitions(input int) int {
	if t.Kind == Control {
		return 1 // every worker reads it whole; one partition keeps it in one order
	}
	return input
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// Admin is what this package asks the brokers (*kafka.Admin, the Kafka
// room's).
type Admin interface {
	DescribeTopics(ctx context.Context, names []string) (map[string]kafka.TopicState, error)
	CreateTopics(ctx context.Context, specs []kafka.TopicSpec) (map[string]error, error)
}
