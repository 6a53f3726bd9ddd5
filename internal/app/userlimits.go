package app

// Users' own limits in the worker (kafka.topics.user_limits): the applier,
// which writes the topic's records to Redis in the group
// <group_id>-user-limits, and the follower, which drops from this worker's
// refusal cache the users whose record changed (internal/userlimits).

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/policy"
	"github.com/capper-dev/capper/internal/userlimits"
)

// userLimits are the worker's user-limits actors.
type userLimits struct {
	applier  *userlimits.Applier
	follower *userlimits.Follower
	// applied waits until the records written before it was called are
	// in Redis (userlimits.Applied).
	applied func(context.Context) error
	// count refreshes capper_user_limits_users; lag exports the applier
	// group's lag.
	count func(context.Context) error
	lag   *dispatch.LagReporter
}

// userCountEvery is how often a worker reads the count of users with
// limits for its gauge.
const userCountEvery = 30 * time.Second

// newUserLimits builds them (nil without kafka.topics.user_limits). The
// records are checked against the policy the watcher has in force.
func newUserLimits(cfg *config.Config, engine *capping.Engine, policies *policy.Watcher, reg prometheus.Registerer, log *slog.Logger) (*userLimits, error) {
	topic := cfg.Kafka.Topics.UserLimits
	if topic == "" {
		return nil, nil
	}
	kopts, err := kafkaOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	m := userlimits.NewMetrics(reg)
	admin, err := dispatch.NewAdminClient(kopts)
	if err != nil {
		return nil, err
	}
	group := cfg.Kafka.UserLimitsGroup()
	u := &userLimits{applied: func(ctx context.Context) error {
		return userlimits.Applied(ctx, admin, group, topic, 100*time.Millisecond)
	}}
	if u.applier, err = userlimits.NewApplier(userlimits.ApplierOptions{Kafka: kopts, Topic: topic, Group: cfg.Kafka.UserLimitsGroup(),
		Store: engine, Rules: func() capping.Rules { return policies.Current().Rules },
		RetryInitial: cfg.Worker.RetryInitial.D(), RetryMax: cfg.Worker.RetryMax.D(), Metrics: m, Logger: log}); err != nil {
		return nil, err
	}
	if u.follower, err = userlimits.NewFollower(userlimits.FollowerOptions{Kafka: kopts, Topic: topic,
		Forget: engine.ForgetCachedUser, Metrics: m, Logger: log}); err != nil {
		return nil, err
	}
	users := promauto.With(reg).NewGauge(prometheus.GaugeOpts{
		Name: "capper_user_limits_users",
		Help: "About how many users hold limits of their own (every worker reports the same count, kept in Redis; a write retried after a lost answer may be missed).",
	})
	u.count = func(ctx context.Context) error {
		t := time.NewTicker(userCountEvery)
		defer t.Stop()
		for {
			if n, err := engine.UsersWithLimits(ctx); err == nil {
				users.Set(float64(n))
			} else if ctx.Err() == nil {
				log.Warn("read the count of users with limits", "error", err)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	}
	lagGauge := promauto.With(reg).NewGaugeVec(prometheus.GaugeOpts{
		Name: "capper_user_limits_lag",
		Help: "Records of the user-limits topic its applier group (<kafka.group_id>-user-limits) has not committed (applied) yet, by partition, from the brokers every kafka.lag_interval.",
	}, []string{"partition"})
	if u.lag, err = dispatch.NewLagReporter(dispatch.LagOptions{Client: admin, Group: group, Topic: topic, Interval: cfg.Kafka.LagInterval.D(),
		Gauge: lagGauge, Logger: log}); err != nil {
		return nil, err
	}
	if policies.Current().Rules.Users == nil {
		log.Warn("kafka.topics.user_limits is set, but the policy in force has no user_limits section: users' limits are refused until a policy has one (tombstones still erase)",
			"topic", topic, "policy", policies.Current().Version)
	}
	return u, nil
}

// add runs the applier and the follower as actors of g. Both stop when
// their context ends: the applier leaves its group after the record in
// flight (committed once written; one still retrying its write is left to
// the group's next member), before Run closes Redis.
func (u *userLimits) add(ctx context.Context, g *actors) {
	if u == nil {
		return
	}
	g.addLoop(ctx, "user-limits", u.applier.Run)
	g.addLoop(ctx, "user-limits-cache", u.follower.Run)
	g.addLoop(ctx, "user-limits-count", u.count)
	g.addLoop(ctx, "user-limits-lag", u.lag.Run)
}
