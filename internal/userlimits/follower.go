package userlimits

// The follower: a worker's refusal cache remembers refusals per user; a
// user whose limits changed, or who was erased, must not be answered from
// what it remembered before. Only one worker applies a record (the
// applier's group), so every worker also follows the topic itself,
// outside any group: a reader per partition, from the end the partition
// had when the follower started (a worker's cache starts empty), and
// drops the cached refusals of each record's user. It drops them again
// Again later: the record may be read here before some worker's applier
// wrote it to Redis, and a decision in between could cache what Redis
// held before.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/retry"
)

// FollowerOptions configure NewFollower; all are required but Again and
// Logger.
type FollowerOptions struct {
	Kafka kafka.Options
	Topic string
	// Forget drops what the refusal cache holds about a user and says
	// whether it held anything (Engine.ForgetCachedUser).
	Forget func(uid uint64) bool
	// Again is how long after a record its user's refusals are dropped a
	// second time (default DefaultAgain).
	Again   time.Duration
	Metrics *Metrics
	Logger  *slog.Logger
}

// DefaultAgain is FollowerOptions.Again's default: well past the apply
// lag of a healthy group.
const DefaultAgain = 3 * time.Second

// Follower follows the topic for the refusal cache. It is an actor: Run
// reads until its context ends.
type Follower struct {
	o   FollowerOptions
	log *slog.Logger

	mu      sync.Mutex
	pending []again // in the order they are due
}

type again struct {
	uid uint64
	at  time.Time
}

// NewFollower checks the options.
func NewFollower(o FollowerOptions) (*Follower, error) {
	if o.Topic == "" || o.Forget == nil || o.Metrics == nil {
		return nil, errors.New("user-limits follower: Topic, Forget and Metrics are required")
	}
	if o.Again <= 0 {
		o.Again = DefaultAgain
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Follower{o: o, log: log}, nil
}

// Run reads every partition from its end at start until ctx ends. The
// ends are asked until the brokers answer; partitions added later are
// not followed until the worker restarts.
func (f *Follower) Run(ctx context.Context) error {
	ends, err := f.ends(ctx)
	if err != nil {
		return nil // stopped before the brokers answered
	}
	var wg sync.WaitGroup
	for p, end := range ends {
		wg.Go(func() { f.follow(ctx, p, end) })
	}
	wg.Go(func() { f.dropAgain(ctx) })
	wg.Wait()
	return nil
}

// ends are the partitions' end offsets, asked until the brokers answer
// (error: ctx ended).
func (f *Follower) ends(ctx context.Context) (map[int]int64, error) {
	a, err := kafka.NewAdmin(f.o.Kafka)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	backoff := &retry.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	for {
		_, ends, err := a.LogOffsets(ctx, f.o.Topic)
		if err == nil {
			return ends, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		f.o.Metrics.errors.WithLabelValues(stageFollow).Inc()
		f.log.Warn("the user-limits topic's ends; retrying", "topic", f.o.Topic, "error", err, "retry_in", backoff.Current())
		if backoff.Wait(ctx) != nil {
			return nil, ctx.Err()
		}
	}
}

// follow reads one partition from offset until ctx ends (the Kafka room's
// partition reader, which retries the brokers' errors itself).
func (f *Follower) follow(ctx context.Context, partition int, offset int64) {
	k := f.o.Kafka
	kafka.PartitionReader{Dialer: k.Dialer(), Brokers: k.Brokers, Topic: f.o.Topic, Partition: partition,
		MaxBytes: 1 << 20, MaxWait: min(k.FetchMaxWait, MaxFetchWait), Log: f.log,
		Failed: func(error) { f.o.Metrics.errors.WithLabelValues(stageFollow).Inc() },
		Hand: func(_ context.Context, msgs []kafka.Message, _ int64) error {
			for _, m := range msgs {
				uid, err := ParseKey(m.Key)
				if err != nil {
					continue // the applier refuses it
				}
				f.drop(uid)
				f.mu.Lock()
				f.pending = append(f.pending, again{uid: uid, at: time.Now().Add(f.o.Again)})
				f.mu.Unlock()
			}
			return nil
		}}.Read(ctx, offset)
}

// drop drops a user's cached refusals, counting a user it held.
func (f *Follower) drop(uid uint64) {
	if f.o.Forget(uid) {
		f.o.Metrics.cacheDropped.Inc()
		f.log.Debug("cached refusals dropped: the user's limits changed or they were erased", "user", uid)
	}
}

// dropAgain drops the users whose second drop is due, until ctx ends.
func (f *Follower) dropAgain(ctx context.Context) {
	tick := time.NewTicker(min(f.o.Again/4, 250*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			f.mu.Lock()
			n := 0
			for n < len(f.pending) && !f.pending[n].at.After(now) {
				n++
			}
			due := f.pending[:n:n]
			f.pending = f.pending[n:]
			if len(f.pending) == 0 {
				f.pending = nil // let the backing array go
			}
			f.mu.Unlock()
			for _, a := range due {
				f.drop(a.uid)
			}
		}
	}
}
