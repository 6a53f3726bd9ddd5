package userlimits

// Catching up at a worker's start: records written while no worker ran
// (or before its group's last commit) are applied before it decides, so
// that "applied to every decision after the write" holds from a worker's
// first decision.

import (
	"context"
	"time"

	capkafka "github.com/capper-dev/capper/internal/kafka"
)

// Applied waits until group has committed, on every partition of topic,
// at least the end offset the partition had when Applied was called:
// every record written before then is in Redis. It polls every poll, and
// returns ctx's error when ctx ends first.
func Applied(ctx context.Context, a *capkafka.Admin, group, topic string, poll time.Duration) error {
	return a.CaughtUp(ctx, group, topic, poll)
}
