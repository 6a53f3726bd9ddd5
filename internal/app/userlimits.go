package app

// Users' own limits in the worker (kafka.topics.user_limits): the applier,
// which writes the topic's records to Redis in the group
// <group_id>-user-limits, the follower, which drops from this worker's
// refusal cache the users whose record changed (internal/userlimits), and
// the gate that holds the worker's partitions until the records written
// before it got them are applied.

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/dispatch"
	capkafka "github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/policy"
	"github.com/capper-dev/capper/internal/retry"
	"github.com/capper-dev/capper/internal/userlimits"
)

// userLimits are the worker's user-limits actors.
type userLimits struct {
	applier  *userlimits.Applier
	follower *userlimits.Follower
	// count refreshes capper_user_limits_users; lag exports the applier
	// group's lag.
	count func(context.Context) error
	lag   *dispatch.LagReporter
}

// userCountEvery is how often a worker reads the count of users with
// limits for its gauge (an estimate: a scrape's pace is enough).
const userCountEvery = 30 * time.Second

// userLimitsCatchUp bounds a generation's wait for users' limits: a topic
// reset to its beginning may take longer to apply than a worker should
// wait; it then decides meanwhile, and says so.
const userLimitsCatchUp = time.Minute

// usersGate holds each generation of the worker's groups (a start, a
// rejoin, any rebalance) until the users' limits written before it began
// are in Redis (userlimits.Applied), for at most userLimitsCatchUp: no
// partition is decided by what Redis held before a record written while
// it was elsewhere, or while the applier group rebalanced with it.
type usersGate struct {
	applied func(context.Context) error
	log     *slog.Logger
	waiting atomic.Int32 // generations waiting now
}

// newUsersGate builds the gate (nil without kafka.topics.user_limits);
// it asks admin for the applier group's progress.
func newUsersGate(cfg *config.Config, admin *capkafka.Admin, log *slog.Logger) *usersGate {
	topic := cfg.Kafka.Topics.UserLimits
	if topic == "" {
		return nil
	}
	group := cfg.Kafka.UserLimitsGroup()
	return &usersGate{log: log, applied: func(ctx context.Context) error {
		return userlimits.Applied(ctx, admin, group, topic, 100*time.Millisecond)
	}}
}

// holdFunc is the gate's dispatch.ConsumerOptions.Hold (nil: no gate).
func (g *usersGate) holdFunc() func(context.Context) {
	if g == nil {
		return nil
	}
	return g.hold
}

// hold waits until the records written before it was called are applied,
// the bound passes (logged), or ctx ends (the generation did). A failed
// look at the offsets is tried again until the bound.
func (g *usersGate) hold(ctx context.Context) {
	g.waiting.Add(1)
	defer g.waiting.Add(-1)
	start := time.Now()
	wait, cancel := context.WithTimeout(ctx, userLimitsCatchUp)
	defer cancel()
	for {
		err := g.applied(wait)
		switch {
		case err == nil:
			g.log.Debug("partitions read once the users' limits written before were applied", "waited", time.Since(start))
			return
		case ctx.Err() != nil:
			return
		case wait.Err() != nil:
			g.log.Warn("users' limits written before this worker got its partitions are not all applied yet; deciding meanwhile",
				"waited", userLimitsCatchUp, "error", err)
			return
		}
		_ = retry.Sleep(wait, 500*time.Millisecond)
	}
}

// ready fails while a generation waits (a /readyz check).
func (g *usersGate) ready() error {
	if g == nil || g.waiting.Load() == 0 {
		return nil
	}
	return errors.New("users' limits: records written before this worker got its partitions are not applied yet")
}

// newUserLimits builds them (nil without kafka.topics.user_limits). The
// records are checked against the policy the watcher has in force.
func newUserLimits(cfg *config.Config, admin *capkafka.Admin, engine *capping.Engine, policies *policy.Watcher, groups *capkafka.GroupMetrics, reg prometheus.Registerer, log *slog.Logger) (*userLimits, error) {
	topic := cfg.Kafka.Topics.UserLimits
	if topic == "" {
		return nil, nil
	}
	kopts, err := kafkaOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	m := userlimits.NewMetrics(reg)
	kopts.GroupMetrics = groups
	group := cfg.Kafka.UserLimitsGroup()
	u := &userLimits{}
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
		Help: "About how many users hold limits of their own (every worker reports the same count, kept in Redis and read every 30 s; a write retried after a lost answer may be missed).",
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
	if u.lag, err = dispatch.NewLagReporter(dispatch.LagOptions{Admin: admin, Group: group, Topic: topic, Interval: cfg.Kafka.LagInterval.D(),
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
