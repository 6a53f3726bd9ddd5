package app

// What `capper user set|snooze|forget` checks and says beside the record
// it writes: that the user-limits topic exists (before anything changes),
// and when a snooze cancels what it holds instead of deferring it.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	capkafka "github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/policy"
)

// checkUserTopic refuses a user-limits topic the brokers lack, naming its
// key and the command that creates it (configPath: the config's file).
func checkUserTopic(ctx context.Context, cfg *config.Config, configPath string, log *slog.Logger) error {
	admin, err := topicsAdmin(cfg, log)
	if err != nil {
		return err
	}
	defer admin.Close()
	err = admin.CheckTopics(ctx, map[string]string{"kafka.topics.user_limits": cfg.Kafka.Topics.UserLimits})
	if errors.Is(err, capkafka.ErrMissingTopic) {
		return configError{fmt.Errorf("%w; nothing changed: create it (%s) and run this again", err,
			topicsCommand("create", cmp.Or(configPath, "FILE"), ""))}
	}
	return err
}

// snoozeCancels is the time before which the user's intents are cancelled
// (snooze-too-long) rather than deferred under u's snooze, as of now: its
// end less the policy's user_limits.max_defer; zero when none is.
func snoozeCancels(pol *policy.Loaded, u capping.UserLimits, now time.Time) time.Time {
	if u.SnoozeUntil.IsZero() || pol.Rules.Users == nil {
		return time.Time{}
	}
	if from := u.SnoozeUntil.Add(-pol.Rules.Users.MaxDefer); from.After(now) {
		return from
	}
	return time.Time{}
}

// snoozeNote says what snoozeCancels means, for a person.
func snoozeNote(until time.Time, maxDefer time.Duration) string {
	return fmt.Sprintf("intents decided before %s are cancelled (snooze-too-long), not deferred: the snooze ends more than "+
		"the policy's user_limits.max_defer (%s) after them; later ones are deferred to its end",
		until.UTC().Format(time.RFC3339), policy.Duration(maxDefer))
}
