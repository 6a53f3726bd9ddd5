package userlimits

// The applier: every worker consumes the user-limits topic in a consumer
// group of its own (<kafka.group_id>-user-limits), so each record is
// applied once, by one worker: decoded, checked against the policy in
// force, written to Redis (a tombstone erases the user), and only then
// committed. A record that cannot be applied as it is (its key, its JSON,
// a field, the policy) is refused: nothing of it is written, it is
// counted, logged at warn without the user, and committed (skipped). A
// Redis error is retried, with a backoff, for as long as it lasts: the
// record is neither committed nor skipped.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/retry"

	"github.com/capper-dev/capper/internal/capping"
)

// Store is where users' limits live (*capping.Engine).
type Store interface {
	// SetUserLimits replaces a user's limits (zero: none).
	SetUserLimits(ctx context.Context, uid uint64, u capping.UserLimits) (capping.UserLimits, error)
	// ForgetUser erases a user: send log, limits, cached refusals.
	ForgetUser(ctx context.Context, uid uint64) (capping.Forgotten, error)
}

// ApplierOptions configure NewApplier; all are required but Logger.
type ApplierOptions struct {
	// Kafka are the worker's connection settings (brokers, TLS, SASL,
	// client id, the group's timeouts). Its GroupID is not used.
	Kafka kafka.Options
	Topic string
	// Group is the consumer group (<kafka.group_id>-user-limits).
	Group string
	Store Store
	// Rules is the policy in force when a record is applied.
	Rules func() capping.Rules
	// The retry of a failed write: RetryInitial, doubling up to RetryMax.
	RetryInitial, RetryMax time.Duration
	Metrics                *Metrics
	Logger                 *slog.Logger
}

// MaxFetchWait bounds how long the applier's and the follower's fetches
// wait for a record: the apply lag stays well under 2 s.
const MaxFetchWait = 250 * time.Millisecond

// Applier applies the user-limits topic. It is an actor: Run consumes
// until its context ends.
type Applier struct {
	o   ApplierOptions
	log *slog.Logger
}

// NewApplier checks the options (nothing is read before Run).
func NewApplier(o ApplierOptions) (*Applier, error) {
	switch {
	case o.Topic == "" || o.Group == "":
		return nil, errors.New("user-limits applier: a topic and a group are required")
	case o.Store == nil || o.Rules == nil || o.Metrics == nil:
		return nil, errors.New("user-limits applier: Store, Rules and Metrics are required")
	case o.RetryInitial <= 0 || o.RetryMax < o.RetryInitial:
		return nil, fmt.Errorf("user-limits applier: retry %s to %s", o.RetryInitial, o.RetryMax)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Applier{o: o, log: log}, nil
}

// Run applies records until ctx ends, then leaves the group (the worker's
// one membership: static and cooperative as its other groups). A record
// whose write is in flight when ctx ends is not committed: the group's
// next member applies it again (a write is idempotent).
func (a *Applier) Run(ctx context.Context) error {
	k := a.o.Kafka
	joined := make(chan struct{})
	var g *kafka.Group
	var err error
	g, err = kafka.JoinGroup(kafka.GroupOptions{Transport: k.Transport(), Dialer: k.Dialer(), Brokers: k.Brokers, GroupID: a.o.Group, Topics: []string{a.o.Topic},
		InstanceID: k.InstanceID, Protocols: kafka.Protocols(k.GroupProtocol), LeaveOnClose: k.LeaveOnClose,
		SessionTimeout: k.SessionTimeout, RebalanceTimeout: k.RebalanceTimeout, HeartbeatInterval: k.HeartbeatInterval,
		// A group without a commit starts at the beginning: every user's
		// state is applied, the latest last.
		StartOffset: kafka.FirstOffset, Log: a.log, Metrics: k.GroupMetrics,
		Read: func(ctx context.Context, c *kafka.Claim, offset int64) {
			select {
			case <-joined:
				a.read(ctx, g, c, offset)
			case <-ctx.Done():
			}
		}})
	if err != nil {
		return fmt.Errorf("user-limits applier: %w", err)
	}
	close(joined)
	<-ctx.Done()
	if err := g.Close(); err != nil {
		a.log.Warn("leave the user-limits group", "error", err)
	}
	return nil
}

// read applies one partition's records in order, each committed once it
// is written (or refused).
func (a *Applier) read(ctx context.Context, g *kafka.Group, c *kafka.Claim, offset int64) {
	k := a.o.Kafka
	kafka.PartitionReader{Dialer: k.Dialer(), Brokers: k.Brokers, Topic: c.Topic, Partition: c.Partition,
		// Small fetches, answered within MaxFetchWait: records are small
		// and rare, and a user waits for theirs.
		MaxBytes: 1 << 20, MaxWait: min(k.FetchMaxWait, MaxFetchWait), Log: a.log,
		Started: func(off int64) { c.Start.Store(off) },
		Failed:  func(error) { a.o.Metrics.errors.WithLabelValues(stageFetch).Inc() },
		Hand: func(ctx context.Context, msgs []kafka.Message, _ int64) error {
			for _, m := range msgs {
				c.Handed.Store(m.Offset + 1)
				if !a.apply(ctx, m) {
					return ctx.Err() // stopped during the write's retries
				}
				a.commit(ctx, g, c, m)
			}
			return nil
		},
	}.Read(ctx, offset)
}

// commit commits m, even when ctx ended meanwhile: the write is done.
func (a *Applier) commit(ctx context.Context, g *kafka.Group, c *kafka.Claim, m kafka.Message) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.o.Kafka.WriteTimeout)
	defer cancel()
	if err := g.Commit(cctx, map[kafka.TopicPartition]int64{c.TopicPartition: m.Offset + 1}); err != nil {
		// The next commit covers it; a new member re-applies it.
		a.o.Metrics.errors.WithLabelValues(stageCommit).Inc()
		a.log.Warn("commit a user-limits record", "topic", a.o.Topic, "partition", m.Partition, "offset", m.Offset, "error", err)
	}
}

// apply applies one record, or refuses it; false: ctx ended before its
// write succeeded.
func (a *Applier) apply(ctx context.Context, m kafka.Message) bool {
	rec, err := Decode(m.Key, m.Value)
	if err == nil && !rec.Erase {
		if ps := a.o.Rules().UserProblems(rec.Limits); len(ps) > 0 {
			err = &Error{Reason: ReasonPolicy, Err: fmt.Errorf("the policy in force refuses them:\n%w", ps.Err())}
		}
	}
	if err != nil {
		a.refuse(m, rec.UserID, err)
		return true
	}
	backoff, failures := &retry.Backoff{Initial: a.o.RetryInitial, Max: a.o.RetryMax}, 0
	for {
		if rec.Erase {
			var f capping.Forgotten
			if f, err = a.o.Store.ForgetUser(ctx, rec.UserID); err == nil && f.Cached {
				a.o.Metrics.cacheDropped.Inc() // this worker's: the follower finds it gone
			}
		} else {
			_, err = a.o.Store.SetUserLimits(ctx, rec.UserID, rec.Limits)
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return false
		}
		failures++
		a.o.Metrics.errors.WithLabelValues(stageRedis).Inc()
		if failures == 1 || failures%20 == 0 {
			a.log.Warn("write a user's limits to Redis; retrying (the record waits, uncommitted)", "topic", a.o.Topic,
				"partition", m.Partition, "offset", m.Offset, "failures", failures, "error", redactUser(err, rec.UserID), "retry_in", backoff.Current())
		}
		if backoff.Wait(ctx) != nil {
			return false
		}
	}
	if failures > 0 {
		a.log.Info("user's limits written after retries", "topic", a.o.Topic, "partition", m.Partition, "offset", m.Offset, "failures", failures)
	}
	if !m.Time.IsZero() {
		a.o.Metrics.lag.Observe(max(time.Since(m.Time), 0).Seconds())
	}
	if rec.Erase {
		a.o.Metrics.erased.Inc()
		a.log.Debug("user erased", "user", rec.UserID, "partition", m.Partition, "offset", m.Offset)
	} else {
		a.o.Metrics.applied.Inc()
		a.log.Debug("user's limits applied", "user", rec.UserID, "limits", rec.Limits.Encode(), "partition", m.Partition, "offset", m.Offset)
	}
	return true
}

// refuse counts and logs a record that is skipped.
func (a *Applier) refuse(m kafka.Message, uid uint64, err error) {
	reason := ReasonOf(err)
	a.o.Metrics.refused.WithLabelValues(string(reason)).Inc()
	public := err.Error()
	var e *Error
	if errors.As(err, &e) {
		public = e.Public()
	}
	a.log.Warn("user-limits record refused and skipped: nothing of it applied", "topic", a.o.Topic,
		"partition", m.Partition, "offset", m.Offset, "reason", reason, "error", public)
	a.log.Debug("user-limits record refused", "user", uid, "key", string(m.Key), "partition", m.Partition, "offset", m.Offset, "error", err)
}

// redactUser is err's text without the user's id (the engine's errors
// name the user).
func redactUser(err error, uid uint64) string {
	return strings.ReplaceAll(err.Error(), fmt.Sprintf("user %d", uid), "user (id at debug level)")
}
