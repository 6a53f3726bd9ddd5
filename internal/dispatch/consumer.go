package dispatch

// The worker's Kafka input: the intents (and delivery statuses) of its
// consumer group, and the due records of the delay tiers' group, read by
// one reader per assigned partition into one queue. Commits go to the group
// a record came from.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/retry"
)

// ConsumerOptions configure NewConsumer.
type ConsumerOptions struct {
	Kafka kafka.Options // GroupID is the intents' group
	Input string        // the intents' topic
	// Status is the delivery statuses' topic, read with the intents (empty:
	// none).
	Status string
	// Tiers are the delay tiers' topics (none: no delay path), read as the
	// group DelayGroupID.
	Tiers        []string
	DelayGroupID string
	// Lanes are the lane topics of the budgets in force (SetLanes changes
	// them), read by the delay tiers' group too; LanePrefix starts every
	// lane topic. Gate releases a lane partition's records (pacing.Gate):
	// it returns how many at the head of msgs go now.
	Lanes      []string
	LanePrefix string
	Gate       func(ctx context.Context, topic string, msgs []kafka.Message, hwm int64) (int, error)
	// Parked is the parked topic (parked.go; empty: none), read by the
	// delay group too; Park says when its records may go.
	Parked string
	Park   ParkCheck
	// Hold, when set, runs at the start of each generation of either
	// group, before any record of its partitions is read (memberOptions):
	// users' limits written before the generation began are applied first.
	Hold func(ctx context.Context)
	// Now is the clock of capper-due-at (nil: time.Now); Sleep waits a
	// duration of that clock (nil: a timer). Tests speed both up.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

// Consumer reads the worker's records. It implements Reader.
type Consumer struct {
	o      ConsumerOptions
	dialer *kafka.Dialer
	admin  *kafka.Admin // partition counts
	log    *slog.Logger
	q      *queue
	now    func() time.Time
	sleep  func(ctx context.Context, d time.Duration) error
	input  *member
	tiers  map[string]bool
	cp     *coPartition
	// window is how far past the offset committed when this worker took a
	// partition over its previous owner may have decided records without
	// committing them: the two batches of its stages (Kafka.BatchSize, the
	// worker's batch size, which every worker of the group shares).
	window int64

	mu        sync.Mutex
	tierParts map[string]int // partitions per tier topic, as of the delay group's generation
	delay     *member        // the delay tiers' and lanes' group; nil without tiers and lanes
	lanes     []string
}

// NewConsumer joins the groups and starts reading.
func NewConsumer(o ConsumerOptions) (*Consumer, error) {
	if err := o.Kafka.Validate(); err != nil {
		return nil, err
	}
	switch {
	case o.Kafka.GroupID == "":
		return nil, errors.New("kafka consumer: a group id is required")
	case o.Input == "":
		return nil, errors.New("kafka consumer: an input topic is required")
	case len(o.Tiers)+len(o.Lanes) > 0 && o.DelayGroupID == "":
		return nil, errors.New("kafka consumer: delay tiers need a group id of their own (lanes too)")
	case len(o.Lanes) > 0 && (o.Gate == nil || o.LanePrefix == ""):
		return nil, errors.New("kafka consumer: lanes need a gate and their prefix")
	case o.Parked != "" && (o.Park.Paused == nil || o.Park.Freed == nil || o.DelayGroupID == ""):
		return nil, errors.New("kafka consumer: the parked topic needs its check and the delay group")
	case o.Kafka.StartOffset != "earliest" && o.Kafka.StartOffset != "latest":
		return nil, fmt.Errorf("kafka start_offset: %q is not earliest or latest", o.Kafka.StartOffset)
	}
	c := &Consumer{o: o, dialer: o.Kafka.Dialer(), log: o.Kafka.Logger, now: o.Now, sleep: o.Sleep,
		q: newQueue(4 * o.Kafka.BatchSize), window: 2 * int64(o.Kafka.BatchSize), tiers: map[string]bool{}, tierParts: map[string]int{}}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	var err error
	if c.admin, err = kafka.NewAdmin(o.Kafka); err != nil {
		return nil, err
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.sleep == nil {
		c.sleep = retry.Sleep
	}
	topics := []string{o.Input}
	if o.Status != "" {
		topics = append(topics, o.Status)
	}

	assigned := make(chan struct{})
	var once sync.Once
	c.input, err = newMember(memberOptions{Kafka: o.Kafka, GroupID: o.Kafka.GroupID, Topics: topics, Log: c.log, Hold: o.Hold,
		Read: func(ctx context.Context, p *partState, offset int64) {
			c.readPartition(ctx, p, offset, fetchConfig{maxBytes: inputFetchBytes})
		},
		Started: func() { once.Do(func() { close(assigned) }) }})
	if err != nil {
		_ = c.admin.Close()
		return nil, err
	}
	for _, t := range o.Tiers {
		c.tiers[t] = true
	}
	c.cp = &coPartition{input: o.Input, inputs: func() []int { return c.input.assigned(o.Input) }}
	if len(o.Tiers)+len(o.Lanes) == 0 && o.Parked == "" {
		return c, nil
	}
	// The delay group's assignment follows the input's (each member says
	// which input partitions it reads): joining before the input group
	// answered would say none, and a static member that restarts would set
	// off two rebalances of the delay group (its tiers and lanes handed to
	// others, then back) instead of getting them back at once.
	select {
	case <-assigned:
	case <-time.After(o.Kafka.SessionTimeout):
		c.log.Warn("kafka: the input group has not assigned partitions yet; the delay group joins all the same", "waited", o.Kafka.SessionTimeout)
	}
	if c.delay, err = c.joinDelay(o.Lanes); err != nil {
		_ = c.input.close()
		_ = c.admin.Close()
		return nil, err
	}
	c.lanes = slices.Clone(o.Lanes)
	return c, nil
}

// joinDelay joins the delay tiers' group for the tiers and lanes: a tier
// partition hands a record over when it is due, a lane partition when its
// budget releases it.
func (c *Consumer) joinDelay(lanes []string) (*member, error) {
	topics := append(slices.Clone(c.o.Tiers), lanes...)
	if c.o.Parked != "" {
		topics = append(topics, c.o.Parked)
	}
	cp := c.cp
	return newMember(memberOptions{Kafka: c.o.Kafka, GroupID: c.o.DelayGroupID, Topics: topics, Log: c.log, Hold: c.o.Hold,
		Protocols: cp.protocols(c.o.Kafka.GroupProtocol),
		Read: func(ctx context.Context, p *partState, offset int64) {
			fc := fetchConfig{maxBytes: tierFetchBytes, release: c.releaseLane}
			switch {
			case p.tp.topic == c.o.Parked:
				fc.release = c.releaseParked
			case c.tiers[p.tp.topic]:
				fc.release = c.releaseDue
			}
			c.readPartition(ctx, p, offset, fc)
		},
		Started: c.countTierPartitions,
		Watch: func(ctx context.Context) {
			// The input partitions changed: join again, so that the tiers
			// and lanes follow them.
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for !cp.stale() {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}})
}

// SetLanes makes the delay group read lanes (a new policy's budgets): it
// leaves the group and joins again with the new topics. What was handed
// out of the old membership and not committed is read again (decided as a
// duplicate where it was delivered).
func (c *Consumer) SetLanes(lanes []string) error {
	c.mu.Lock()
	old, same := c.delay, slices.Equal(c.lanes, lanes)
	c.mu.Unlock()
	if same {
		return nil
	}
	if len(lanes) > 0 && (c.o.Gate == nil || c.o.LanePrefix == "" || c.o.DelayGroupID == "") {
		return errors.New("kafka consumer: lanes need a gate, their prefix and the delay group")
	}
	if old != nil {
		if err := old.close(); err != nil {
			c.log.Warn("kafka: leaving the delay group to read new lanes", "error", err)
		}
	}
	var nm *member
	if len(c.o.Tiers)+len(lanes) > 0 || c.o.Parked != "" {
		var err error
		if nm, err = c.joinDelay(lanes); err != nil {
			return fmt.Errorf("read lanes %v: %w", lanes, err)
		}
	}
	c.mu.Lock()
	c.delay, c.lanes = nm, slices.Clone(lanes)
	c.mu.Unlock()
	return nil
}

// releaseLane lets a lane's records go as its budget releases them.
func (c *Consumer) releaseLane(ctx context.Context, p *partState, msgs []kafka.Message, hwm int64) (int, error) {
	return c.o.Gate(ctx, p.tp.topic, msgs, hwm)
}

// delayGroup is the delay tiers' and lanes' membership (nil: none).
func (c *Consumer) delayGroup() *member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.delay
}

// isLane reports whether topic is a lane topic.
func (c *Consumer) isLane(topic string) bool {
	p := c.o.LanePrefix
	return p != "" && len(topic) > len(p) && topic[:len(p)] == p && topic[len(p)] == '.'
}

// countTierPartitions learns how many partitions each tier has (a user's
// deferred intents wait in the partition of its input partition's index,
// modulo that).
func (c *Consumer) countTierPartitions() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	counts := map[string]int{}
	for t := range c.tiers {
		if ps, err := c.admin.Partitions(ctx, t); err == nil {
			counts[t] = len(ps)
		}
	}
	c.mu.Lock()
	c.tierParts = counts
	c.mu.Unlock()
}

// TierPartitions is how many partitions a tier topic has (0: not known).
func (c *Consumer) TierPartitions(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tierParts[topic]
}

// FetchMessage returns the next record.
func (c *Consumer) FetchMessage(ctx context.Context) (kafka.Message, error) {
	msgs, err := c.q.take(ctx, make([]kafka.Message, 0, 1), 1)
	if err != nil {
		return kafka.Message{}, err
	}
	return msgs[0], nil
}

// FetchBatch appends up to max records to dst, waiting for the first.
func (c *Consumer) FetchBatch(ctx context.Context, dst []kafka.Message, max int) ([]kafka.Message, error) {
	return c.q.take(ctx, dst, max)
}

// Rebalanced reports the generations of either group since the last call
// (the worker empties its refusal cache after a rebalance).
func (c *Consumer) Rebalanced() int64 {
	n := c.input.rebalanced()
	if dg := c.delayGroup(); dg != nil {
		n += dg.rebalanced()
	}
	return n
}

// Cacheable reports whether the refusal cache may answer m (an intent, or a
// due record of a user whose input partition is home): no other worker can
// have changed its user's record since this one took over. That holds when
// m is past the takeover window of its partition (a previous owner may have
// decided what lies before it without committing), and this worker reads
// both the user's input partition and the tier partitions that user's
// deferred intents wait in (a deferred intent is decided by whoever reads
// its tier partition).
func (c *Consumer) Cacheable(m *kafka.Message, home int) bool {
	if c.isLane(m.Topic) || m.Topic == c.o.Parked {
		// Released by its budget, or back from a pause: decided by Redis,
		// like a redelivery.
		return false
	}
	dg := c.delayGroup()
	g, in := c.input, true
	if c.tiers[m.Topic] {
		g, in = dg, false
	}
	p := g.owned(topicPartition{m.Topic, m.Partition})
	if p == nil || p.closed.Load() || m.Offset < p.start.Load()+c.window || p.start.Load() < 0 {
		return false
	}
	if in {
		home = m.Partition
	} else if ip := c.input.owned(topicPartition{c.o.Input, home}); home < 0 || ip == nil || ip.closed.Load() {
		return false
	}
	if dg == nil || len(c.tiers) == 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for t := range c.tiers {
		n := c.tierParts[t]
		if n == 0 {
			return false
		}
		tp := dg.owned(topicPartition{t, home % n})
		if tp == nil || tp.closed.Load() {
			return false
		}
	}
	return true
}

// Leave leaves both groups now, static or not (the worker is stuck:
// stuck.go), and stops reading.
func (c *Consumer) Leave(why string) {
	if dg := c.delayGroup(); dg != nil {
		dg.g.Leave(why)
	}
	c.input.g.Leave(why)
}

// Close leaves both groups and stops reading.
func (c *Consumer) Close() error {
	var errs []error
	if dg := c.delayGroup(); dg != nil {
		errs = append(errs, dg.close())
	}
	errs = append(errs, c.input.close())
	c.q.close()
	errs = append(errs, c.admin.Close())
	return errors.Join(errs...)
}

// homeOf is the input partition in a capper-source value
// (<topic>/<partition>/<offset>), -1 if it names none.
func homeOf(source []byte) int {
	end := len(source)
	for i := end - 1; i >= 0; i-- {
		if source[i] == '/' {
			if end != len(source) {
				p, err := strconv.Atoi(string(source[i+1 : end]))
				if err != nil || p < 0 {
					return -1
				}
				return p
			}
			end = i
		}
	}
	return -1
}
