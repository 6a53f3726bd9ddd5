package dispatch

// The delay tiers' reader: deferred intents wait in a few topics (1m, 10m,
// 1h, 6h, ...), each written in order of due time, and this reader hands
// the worker a record only once it is due. Every partition has its own
// reader that stops at its head until the head is due (a timer, no
// polling); nothing else of the worker waits meanwhile.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// DelayOptions configure NewDelayReader.
type DelayOptions struct {
	Kafka KafkaOptions
	// GroupID is the consumer group of the tiers (apart from the intents'
	// group: the two are assigned and paused independently).
	GroupID string
	Topics  []string // the tiers' topics
	// Now is the clock of capper-due-at (nil: time.Now); Sleep waits a
	// duration of that clock (nil: a timer). Tests speed both up.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

// DelayReader reads the tiers' due records as one consumer-group member.
// It implements Reader; Close stops it.
type DelayReader struct {
	o      DelayOptions
	group  *kafka.ConsumerGroup
	out    chan kafka.Message
	cancel context.CancelFunc
	done   chan struct{}
	log    *slog.Logger

	mu         sync.Mutex
	gen        *kafka.Generation // the generation the records handed out belong to
	rebalances int64             // generations since the last Stats
}

// NewDelayReader joins the tiers' group and starts reading.
func NewDelayReader(o DelayOptions) (*DelayReader, error) {
	if err := o.Kafka.validate(); err != nil {
		return nil, err
	}
	if o.GroupID == "" || len(o.Topics) == 0 {
		return nil, errors.New("delay reader: GroupID and Topics are required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = sleep
	}
	log := o.Kafka.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := kafka.FirstOffset
	if o.Kafka.StartOffset == "latest" {
		start = kafka.LastOffset
	}
	group, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                    o.GroupID,
		Brokers:               o.Kafka.Brokers,
		Dialer:                o.Kafka.dialer(),
		Topics:                o.Topics,
		HeartbeatInterval:     o.Kafka.HeartbeatInterval,
		SessionTimeout:        o.Kafka.SessionTimeout,
		RebalanceTimeout:      o.Kafka.RebalanceTimeout,
		JoinGroupBackoff:      time.Second,
		WatchPartitionChanges: true,
		StartOffset:           start,
		ErrorLogger:           errorLogger(o.Kafka.Logger, "kafka delay group"),
	})
	if err != nil {
		return nil, fmt.Errorf("delay tiers group %s: %w", o.GroupID, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &DelayReader{o: o, group: group, out: make(chan kafka.Message), cancel: cancel, done: make(chan struct{}), log: log}
	go d.run(ctx)
	return d, nil
}

// run follows the group's generations: each starts one reader per
// assigned partition, and ends (a rebalance) when the group says so.
func (d *DelayReader) run(ctx context.Context) {
	defer close(d.done)
	for {
		gen, err := d.group.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return
			}
			d.log.Warn("delay tiers: joining the group failed; retrying", "error", err)
			if sleep(ctx, time.Second) != nil {
				return
			}
			continue
		}
		d.mu.Lock()
		d.gen, d.rebalances = gen, d.rebalances+1
		d.mu.Unlock()
		for topic, parts := range gen.Assignments {
			for _, p := range parts {
				gen.Start(func(ctx context.Context) { d.partition(ctx, gen, topic, p) })
			}
		}
	}
}

// partition hands on one partition's records, each once it is due.
func (d *DelayReader) partition(ctx context.Context, gen *kafka.Generation, topic string, p kafka.PartitionAssignment) {
	k := d.o.Kafka
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: k.Brokers, Topic: topic, Partition: p.ID, Dialer: k.dialer(),
		// A small queue: a tier holds hours of intents, and a paused
		// partition must not read them all into memory.
		QueueCapacity: 64, MaxWait: k.FetchMaxWait, ReadBatchTimeout: max(k.FetchMaxWait, time.Second),
		ErrorLogger: errorLogger(k.Logger, "kafka delay reader "+topic),
	})
	defer func() { _ = r.Close() }()
	if err := r.SetOffset(p.Offset); err != nil {
		d.log.Warn("delay tiers: cannot start a partition", "topic", topic, "partition", p.ID, "error", err)
		return
	}
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return // the generation ended
			}
			// kafka-go retries broker errors itself; should one get here,
			// the partition is read again after a pause, not dropped.
			d.log.Warn("delay tiers: fetch failed; retrying", "topic", topic, "partition", p.ID, "error", err)
			if sleep(ctx, time.Second) != nil {
				return
			}
			continue
		}
		// A record without a readable due time is due at once: the worker
		// dead-letters it, naming the header.
		if due, err := dueAt(m.Headers); err == nil {
			if wait := due.Sub(d.o.Now()); wait > 0 {
				if d.o.Sleep(ctx, wait) != nil {
					return
				}
			}
		}
		select {
		case d.out <- m:
		case <-ctx.Done():
			return
		}
	}
}

// FetchMessage returns the next due record of the partitions this member
// has.
func (d *DelayReader) FetchMessage(ctx context.Context) (kafka.Message, error) {
	select {
	case m := <-d.out:
		return m, nil
	case <-ctx.Done():
		return kafka.Message{}, ctx.Err()
	case <-d.done:
		return kafka.Message{}, errors.New("delay reader closed")
	}
}

// CommitMessages commits the records' offsets in the current generation.
// After a rebalance the commit may be refused: the records are then read
// again by the partition's new owner (redelivery, never loss).
func (d *DelayReader) CommitMessages(_ context.Context, msgs ...kafka.Message) error {
	offsets := map[string]map[int]int64{}
	for _, m := range msgs {
		if offsets[m.Topic] == nil {
			offsets[m.Topic] = map[int]int64{}
		}
		offsets[m.Topic][m.Partition] = max(offsets[m.Topic][m.Partition], m.Offset+1)
	}
	d.mu.Lock()
	gen := d.gen
	d.mu.Unlock()
	if gen == nil {
		return errors.New("delay tiers: commit before joining the group")
	}
	if err := gen.CommitOffsets(offsets); err != nil {
		return fmt.Errorf("commit delay tiers: %w", err)
	}
	return nil
}

// Stats reports the generations since the last call (the worker forgets
// its takeover bookkeeping on a rebalance).
func (d *DelayReader) Stats() kafka.ReaderStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.rebalances
	d.rebalances = 0
	return kafka.ReaderStats{Rebalances: n}
}

// Close leaves the group and stops every partition's reader.
func (d *DelayReader) Close() error {
	err := d.group.Close()
	d.cancel()
	<-d.done
	return err
}
