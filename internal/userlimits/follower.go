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
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/kafkautil"
)

// FollowerOptions configure NewFollower; all are required but Again and
// Logger.
type FollowerOptions struct {
	Kafka dispatch.KafkaOptions
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
	c, err := dispatch.NewAdminClient(f.o.Kafka)
	if err != nil {
		return nil, err
	}
	wait := 100 * time.Millisecond
	for {
		ends, err := partitionEnds(ctx, c, f.o.Topic)
		if err == nil {
			return ends, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		f.o.Metrics.errors.WithLabelValues(stageFollow).Inc()
		f.log.Warn("the user-limits topic's ends; retrying", "topic", f.o.Topic, "error", err, "retry_in", wait)
		if dispatch.Sleep(ctx, wait) != nil {
			return nil, ctx.Err()
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// partitionEnds is each partition's end offset now.
func partitionEnds(ctx context.Context, c *kafka.Client, topic string) (map[int]int64, error) {
	_, ends, err := partitionOffsets(ctx, c, topic)
	return ends, err
}

// partitionOffsets are each partition's first and end offsets now.
func partitionOffsets(ctx context.Context, c *kafka.Client, topic string) (first, end map[int]int64, err error) {
	parts, err := kafkautil.Partitions(ctx, c, topic)
	if err != nil {
		return nil, nil, err
	}
	if len(parts) == 0 {
		return nil, nil, fmt.Errorf("%s: %w on the brokers", topic, dispatch.ErrMissingTopic)
	}
	reqs := make([]kafka.OffsetRequest, 0, 2*len(parts))
	for _, p := range parts {
		reqs = append(reqs, kafka.FirstOffsetOf(p), kafka.LastOffsetOf(p))
	}
	offs, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: reqs}})
	if err != nil {
		return nil, nil, fmt.Errorf("offsets of %s: %w", topic, err)
	}
	first, end = map[int]int64{}, map[int]int64{}
	for _, po := range offs.Topics[topic] {
		if po.Error != nil {
			return nil, nil, fmt.Errorf("offsets of %s partition %d: %w", topic, po.Partition, po.Error)
		}
		first[po.Partition], end[po.Partition] = po.FirstOffset, po.LastOffset
	}
	return first, end, nil
}

// follow reads one partition from offset until ctx ends.
func (f *Follower) follow(ctx context.Context, partition int, offset int64) {
	k := f.o.Kafka
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: k.Brokers, Topic: f.o.Topic, Partition: partition, Dialer: k.Dialer(),
		MinBytes: 1, MaxBytes: 1 << 20, MaxWait: min(k.FetchMaxWait, MaxFetchWait), QueueCapacity: 64,
		ReadBackoffMin: 50 * time.Millisecond, ReadBackoffMax: time.Second, ReadLagInterval: -1,
		ErrorLogger: kafka.LoggerFunc(func(msg string, args ...any) {
			if ctx.Err() == nil { // a reader closed while it dials logs its cancellation
				f.log.Warn(fmt.Sprintf(msg, args...), "component", "user-limits follower")
			}
		}),
	})
	defer r.Close()
	if err := r.SetOffset(offset); err != nil {
		f.log.Error("follow the user-limits topic", "topic", f.o.Topic, "partition", partition, "error", err)
		return
	}
	for {
		m, err := r.FetchMessage(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			f.o.Metrics.errors.WithLabelValues(stageFollow).Inc()
			f.log.Warn("read the user-limits topic for the refusal cache; retrying", "topic", f.o.Topic, "partition", partition, "error", err)
			if dispatch.Sleep(ctx, time.Second) != nil {
				return
			}
			continue
		}
		uid, err := ParseKey(m.Key)
		if err != nil {
			continue // the applier refuses it
		}
		f.drop(uid)
		f.mu.Lock()
		f.pending = append(f.pending, again{uid: uid, at: time.Now().Add(f.o.Again)})
		f.mu.Unlock()
	}
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
