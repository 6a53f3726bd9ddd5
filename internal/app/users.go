package app

// `capper user show|set|snooze|forget`: a user's own limits, as Redis
// holds them, changed through the user-limits topic (the workers apply
// it), and a user erased.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/policy"
	"github.com/capper-dev/capper/internal/problems"
	"github.com/capper-dev/capper/internal/retry"
	"github.com/capper-dev/capper/internal/userlimits"
)

// userSession is what a user command works with: an engine on the
// config's Redis, deciding by the policy in force.
type userSession struct {
	cfg    *config.Config
	rdb    redis.UniversalClient
	engine *capping.Engine
	pol    *policy.Loaded
}

// openUsers opens a session; writing needs kafka.topics.user_limits.
func openUsers(ctx context.Context, cfg *config.Config, write bool, log *slog.Logger) (*userSession, error) {
	if write && cfg.Kafka.Topics.UserLimits == "" {
		return nil, configError{errors.New("kafka.topics.user_limits is not set: users' own limits are off in this config")}
	}
	pol, err := LoadPolicy(ctx, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("the policy in force: %w", err)
	}
	rdb, err := NewRedisClient(cfg)
	if err != nil {
		return nil, err
	}
	engine, err := NewEngine(ctx, cfg, pol, rdb, prometheus.NewRegistry(), log, nil)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return &userSession{cfg: cfg, rdb: rdb, engine: engine, pol: pol}, nil
}

func (s *userSession) Close() { _ = s.rdb.Close() }

// UserShown is a user's limits as Redis holds them.
type UserShown struct {
	User   uint64
	Limits capping.UserLimits
	// Policy is the policy in force; Problems what it says of the limits
	// (a tier it no longer names, ...): the script ignores those.
	Policy   string
	Problems problems.List
	rules    *capping.UserRules // the policy's user_limits (nil: none)
}

// ShowUser reads a user's limits from Redis.
func ShowUser(ctx context.Context, cfg *config.Config, uid uint64, log *slog.Logger) (*UserShown, error) {
	s, err := openUsers(ctx, cfg, false, log)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	u, err := s.engine.UserLimits(ctx, uid)
	if err != nil {
		return nil, err
	}
	return &UserShown{User: uid, Limits: u, Policy: s.pol.Version, Problems: s.pol.Rules.UserProblems(u), rules: s.pol.Rules.Users}, nil
}

// WriteText prints the limits, one a line.
func (r *UserShown) WriteText(out io.Writer) error {
	fmt.Fprintf(out, "user %d:\n", r.User)
	for _, l := range r.Limits.Describe(r.rules) {
		fmt.Fprintf(out, "  %s\n", l)
	}
	if len(r.Problems) > 0 {
		fmt.Fprintf(out, "the policy in force (%s) does not allow them all (the workers ignore what it does not name):\n", r.Policy)
		for _, p := range r.Problems {
			fmt.Fprintf(out, "  %s\n", p.Error())
		}
	}
	return nil
}

// WriteJSON prints the limits as the user-limits topic's record.
func (r *UserShown) WriteJSON(out io.Writer) error {
	return writeRecordJSON(out, userlimits.Record{UserID: r.User, Limits: r.Limits})
}

func writeRecordJSON(out io.Writer, r userlimits.Record) error {
	v, err := userlimits.Encode(r)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := json.Indent(&b, v, "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err = out.Write(b.Bytes())
	return err
}

// UserChange is what `capper user set|snooze` asks, applied to the
// user's limits in Redis; what it leaves out keeps its value.
type UserChange struct {
	Clear         bool    // start from no limits
	Tier          *string // set the tier ("": none)
	Channels      map[string]int
	ClearChannels bool // before Channels
	Quiet         *capping.UserQuiet
	NoQuiet       bool
	// SnoozeUntil sets a snooze (SnoozeChannels: on those; none: every
	// channel); NoSnooze ends it.
	SnoozeUntil    time.Time
	SnoozeChannels []string
	NoSnooze       bool
	// Kinds of limit (capping.UserKinds) taken from Set, after the
	// above; Unset: kinds removed, before Kinds.
	Set   capping.UserLimits
	Kinds []string
	Unset []string
}

func (c *UserChange) apply(u capping.UserLimits) (capping.UserLimits, error) {
	if c.Clear {
		u = capping.UserLimits{}
	}
	if c.Tier != nil {
		u.Tier = *c.Tier
	}
	if c.ClearChannels || len(c.Channels) > 0 {
		next := map[string]int{}
		if !c.ClearChannels {
			maps.Copy(next, u.Channels)
		}
		maps.Copy(next, c.Channels)
		u.Channels = next
		if len(next) == 0 {
			u.Channels = nil
		}
	}
	switch {
	case c.NoQuiet:
		u.Quiet = nil
	case c.Quiet != nil:
		q := *c.Quiet
		u.Quiet = &q
	}
	switch {
	case c.NoSnooze:
		u.SnoozeUntil, u.SnoozeChannels = time.Time{}, nil
	case !c.SnoozeUntil.IsZero():
		u.SnoozeUntil, u.SnoozeChannels = c.SnoozeUntil.UTC().Truncate(time.Second), slices.Clone(c.SnoozeChannels)
	}
	for _, k := range c.Unset {
		if err := capping.CopyUserKind(k, &u, capping.UserLimits{}); err != nil {
			return u, err
		}
	}
	for _, k := range c.Kinds {
		if err := capping.CopyUserKind(k, &u, c.Set); err != nil {
			return u, err
		}
	}
	return u, nil
}

// SetUserOptions configure SetUser.
type SetUserOptions struct {
	// Wait is how long to wait for Redis to show the limits (0: not at
	// all).
	Wait time.Duration
	Now  time.Time // zero: time.Now
	// ConfigPath is the config's file, named in the command that creates
	// a missing topic.
	ConfigPath string
}

// UserSet is what SetUser wrote, and whether the workers applied it.
type UserSet struct {
	User           uint64
	Before, Limits capping.UserLimits
	Position       userlimits.Position
	// Applied: Redis showed Limits AppliedIn after the write (within
	// Wait).
	Applied   bool
	AppliedIn time.Duration
	Waited    time.Duration
	// CancelledBefore: the user's intents decided before it are cancelled,
	// not deferred, under the snooze (longer than the policy's
	// user_limits.max_defer); zero when none is.
	CancelledBefore time.Time
	rules           *capping.UserRules
	maxDefer        time.Duration
}

// SetUser reads a user's limits from Redis, applies the change, checks
// the result against the policy in force (a problem refuses it, naming
// the field, before anything is written), writes the whole record to the
// user-limits topic with acks=all, and waits up to o.Wait until Redis
// shows it (the workers apply it).
func SetUser(ctx context.Context, cfg *config.Config, uid uint64, c UserChange, o SetUserOptions, log *slog.Logger) (*UserSet, error) {
	s, err := openUsers(ctx, cfg, true, log)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if err := checkUserTopic(ctx, cfg, o.ConfigPath, log); err != nil {
		return nil, err
	}
	before, err := s.engine.UserLimits(ctx, uid)
	if err != nil {
		return nil, err
	}
	next, err := c.apply(before)
	if err != nil {
		return nil, configError{fmt.Errorf("user %d: %w", uid, err)}
	}
	if ps := s.pol.Rules.UserProblems(next); len(ps) > 0 {
		return nil, configError{fmt.Errorf("user %d: the policy in force (%s) refuses these limits:\n%w", uid, s.pol.Version, ps.Err())}
	}
	kopts, err := kafkaOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	pos, err := userlimits.Write(ctx, kopts, cfg.Kafka.Topics.UserLimits, userlimits.Record{UserID: uid, Limits: next, UpdatedAt: now}, now)
	if err != nil {
		return nil, err
	}
	r := &UserSet{User: uid, Before: before, Limits: next, Position: pos, rules: s.pol.Rules.Users,
		CancelledBefore: snoozeCancels(s.pol, next, now)}
	if s.pol.Rules.Users != nil {
		r.maxDefer = s.pol.Rules.Users.MaxDefer
	}
	want := next.Encode()
	start := time.Now()
	for {
		got, err := s.engine.UserLimits(ctx, uid)
		if err != nil {
			return nil, fmt.Errorf("written to %s, but: %w", pos, err)
		}
		if got.Encode() == want {
			r.Applied, r.AppliedIn = true, time.Since(now)
			return r, nil
		}
		if r.Waited = time.Since(start); r.Waited >= o.Wait {
			return r, nil
		}
		if retry.Sleep(ctx, 20*time.Millisecond) != nil {
			return r, nil
		}
	}
}

// WriteText says what was written, and whether it is applied.
func (r *UserSet) WriteText(out io.Writer) error {
	fmt.Fprintf(out, "user %d:\n", r.User)
	for _, l := range r.Limits.Describe(r.rules) {
		fmt.Fprintf(out, "  %s\n", l)
	}
	if !r.CancelledBefore.IsZero() {
		fmt.Fprintf(out, "  %s\n", snoozeNote(r.CancelledBefore, r.maxDefer))
	}
	fmt.Fprintf(out, "was: %s\n", strings.Join(r.Before.Describe(r.rules), "; "))
	fmt.Fprintf(out, "written to %s (acknowledged by every in-sync replica)\n", r.Position)
	var err error
	if r.Applied {
		_, err = fmt.Fprintf(out, "applied in %d ms\n", r.AppliedIn.Milliseconds())
	} else {
		_, err = fmt.Fprintf(out, "not applied yet after %s: the workers apply it when they read it (are they running? "+
			"capper_user_limits_refused_total counts the records they refused); capper user show tells when\n", r.Waited.Round(time.Millisecond))
	}
	return err
}

// ForgetUserOptions configure ForgetUser.
type ForgetUserOptions struct {
	ConfigPath string // named in the command that creates a missing topic
}

// UserForgotten is what ForgetUser erased.
type UserForgotten struct {
	User      uint64
	Position  userlimits.Position // the tombstone
	Forgotten capping.Forgotten
	rules     *capping.UserRules
}

// ForgetUser erases a user: their record and limits from Redis first
// (what was there is reported), then their tombstone to the user-limits
// topic with acks=all: every worker drops the refusals it cached for the
// user when it reads it (after the erasure, so no worker caches what
// Redis held before), and the workers' applier erases the user again
// (what a record still in flight, or an intent decided meanwhile, wrote).
// When Redis fails, the tombstone is written all the same (the workers
// erase the user when Redis answers) and the error returned.
func ForgetUser(ctx context.Context, cfg *config.Config, uid uint64, o ForgetUserOptions, log *slog.Logger) (*UserForgotten, error) {
	s, err := openUsers(ctx, cfg, true, log)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if err := checkUserTopic(ctx, cfg, o.ConfigPath, log); err != nil {
		return nil, err
	}
	kopts, err := kafkaOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	f, ferr := s.engine.ForgetUser(ctx, uid)
	pos, err := userlimits.Write(ctx, kopts, cfg.Kafka.Topics.UserLimits, userlimits.Record{UserID: uid, Erase: true}, time.Now())
	switch {
	case err != nil && ferr != nil:
		return nil, fmt.Errorf("nothing erased: %w", errors.Join(ferr, err))
	case err != nil:
		return nil, fmt.Errorf("user %d erased from Redis, but the workers' caches are not told (run forget again): %w", uid, err)
	case ferr != nil:
		return nil, fmt.Errorf("the tombstone is written to %s (the workers erase the user when Redis answers them), but: %w", pos, ferr)
	}
	return &UserForgotten{User: uid, Position: pos, Forgotten: f, rules: s.pol.Rules.Users}, nil
}

// WriteText says what was removed.
func (r *UserForgotten) WriteText(out io.Writer) error {
	f := r.Forgotten
	fmt.Fprintf(out, "user %d erased from Redis:\n", r.User)
	limits := "none"
	if !f.Limits.IsZero() {
		limits = strings.Join(f.Limits.Describe(r.rules), "; ")
	}
	fmt.Fprintf(out, "  their limits: %s\n", limits)
	if f.RecordBytes > 0 {
		fmt.Fprintf(out, "  their record: %d bytes (send log and idempotency entries)\n", f.RecordBytes)
	} else {
		fmt.Fprintf(out, "  their record: none\n")
	}
	cached := "held nothing about them"
	if f.Cached {
		cached = "held refusals, dropped"
	}
	fmt.Fprintf(out, "  this command's refusal cache: %s\n", cached)
	_, err := fmt.Fprintf(out, "tombstone written to %s (acknowledged by every in-sync replica): every worker drops the refusals it cached for the user when it reads it, within seconds, and compaction removes the user's earlier records from the topic\n", r.Position)
	return err
}
