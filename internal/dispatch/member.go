package dispatch

// One consumer-group membership: the generations kafka-go's ConsumerGroup
// goes through, a reader per assigned partition in each, and the offsets
// the worker was handed and committed. A generation that ends (a
// rebalance) waits until what it handed out is committed before it lets
// the group move on, so an eager rebalance moves no decided-but-uncommitted
// record to another worker; and a commit goes only to a partition this
// member still has, in the generation the broker knows (a commit of an
// ended generation is refused by the broker, never applied late).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
)

// partState is one assigned partition in one generation.
type partState struct {
	tp  topicPartition
	gen *kafka.Generation
	// start is the offset committed when this member took the partition
	// (resolved from the log's bounds when none was); set by its reader
	// before it hands anything out.
	start atomic.Int64
	// handed: the offset after the last record handed to the worker;
	// committed: after the last this member committed (0: none).
	handed, committed atomic.Int64
	// closed: the generation ended; its queued records are dropped.
	closed atomic.Bool
	// parkUntil: the parked topic's reader hands every record below it
	// over (parked.go); only that reader uses it.
	parkUntil int64
}

// memberOptions configure a member.
type memberOptions struct {
	Kafka     KafkaOptions
	GroupID   string
	Topics    []string
	Balancers []kafka.GroupBalancer // nil: range, then round robin
	// Read reads one partition until ctx ends; it is restarted by nothing,
	// so it retries its own errors.
	Read func(ctx context.Context, p *partState, offset int64)
	// Started runs at the start of each generation, with the partitions it
	// assigned (the member's state is already updated); Watch, when set,
	// runs during it and ends it by returning (a rejoin).
	Started func(gen *kafka.Generation)
	Watch   func(ctx context.Context)
	// Hold, when set, runs once at the start of each generation that
	// assigns partitions, before any of them is read: their readers wait
	// until it returns (or the generation ends).
	Hold func(ctx context.Context)
	Log  *slog.Logger
}

// member is one group membership.
type member struct {
	o     memberOptions
	group *kafka.ConsumerGroup
	done  chan struct{}
	stop  context.CancelFunc

	// closing: the worker has stopped; a generation's end waits for no
	// commit any more.
	closing atomic.Bool

	mu         sync.Mutex
	parts      map[topicPartition]*partState
	rebalances int64 // generations since the last rebalanced call
}

func newMember(o memberOptions) (*member, error) {
	k := o.Kafka
	start := kafka.FirstOffset
	if k.StartOffset == "latest" {
		start = kafka.LastOffset
	}
	group, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                    o.GroupID,
		Brokers:               k.Brokers,
		Dialer:                k.Dialer(),
		Topics:                o.Topics,
		GroupBalancers:        o.Balancers,
		HeartbeatInterval:     k.HeartbeatInterval,
		SessionTimeout:        k.SessionTimeout,
		RebalanceTimeout:      k.RebalanceTimeout,
		JoinGroupBackoff:      time.Second,
		WatchPartitionChanges: true,
		StartOffset:           start,
		ErrorLogger:           ErrorLogger(k.Logger, "kafka group "+o.GroupID),
	})
	if err != nil {
		return nil, fmt.Errorf("consumer group %s: %w", o.GroupID, err)
	}
	ctx, stop := context.WithCancel(context.Background())
	m := &member{o: o, group: group, done: make(chan struct{}), stop: stop, parts: map[topicPartition]*partState{}}
	go m.run(ctx)
	return m, nil
}

// run follows the group's generations.
func (m *member) run(ctx context.Context) {
	defer close(m.done)
	for {
		gen, err := m.group.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return
			}
			m.o.Log.Warn("kafka group: joining failed; retrying", "group", m.o.GroupID, "error", err)
			if Sleep(ctx, time.Second) != nil {
				return
			}
			continue
		}
		m.begin(gen)
	}
}

// begin starts a generation: its partitions' state, then their readers.
func (m *member) begin(gen *kafka.Generation) {
	var ps []*partState
	m.mu.Lock()
	m.rebalances++
	clear(m.parts)
	for topic, parts := range gen.Assignments {
		for _, a := range parts {
			p := &partState{tp: topicPartition{topic, a.ID}, gen: gen}
			p.start.Store(-1)
			m.parts[p.tp] = p
			ps = append(ps, p)
		}
	}
	m.mu.Unlock()
	if m.o.Started != nil {
		m.o.Started(gen)
	}
	offsets := map[topicPartition]int64{}
	for topic, parts := range gen.Assignments {
		for _, a := range parts {
			offsets[topicPartition{topic, a.ID}] = a.Offset
		}
	}
	held := m.held()
	for _, p := range ps {
		gen.Start(func(ctx context.Context) {
			if held(ctx) {
				m.o.Read(ctx, p, offsets[p.tp])
			}
			m.drain(p)
		})
	}
	if m.o.Watch != nil {
		gen.Start(m.o.Watch)
	}
}

// held is what a generation's readers call before they read: the first
// runs Hold, the others wait for it; false: the generation ended first.
func (m *member) held() func(ctx context.Context) bool {
	var once sync.Once
	return func(ctx context.Context) bool {
		if m.o.Hold != nil {
			once.Do(func() { m.o.Hold(ctx) })
		}
		return ctx.Err() == nil
	}
}

// drain ends a partition's part in its generation: nothing more is handed
// out, and what was is committed first (or the worker had half the
// rebalance timeout for it: then its commit is refused and the next owner
// reads those records again, answered as duplicates where allowed).
func (m *member) drain(p *partState) {
	p.closed.Store(true)
	deadline := time.Now().Add(m.o.Kafka.RebalanceTimeout / 2)
	for p.committed.Load() < p.handed.Load() && time.Now().Before(deadline) && !m.closing.Load() {
		time.Sleep(5 * time.Millisecond)
	}
	m.mu.Lock()
	if m.parts[p.tp] == p {
		delete(m.parts, p.tp)
	}
	m.mu.Unlock()
}

// owned is the state of a partition this member has now (nil: none).
func (m *member) owned(tp topicPartition) *partState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.parts[tp]
}

// assigned lists the partitions of topic this member has now.
func (m *member) assigned(topic string) []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int
	for tp := range m.parts {
		if tp.topic == topic {
			out = append(out, tp.partition)
		}
	}
	return out
}

// commit commits offsets (the next offset to read, per partition) of
// partitions this member has, each past what it committed before; those
// it no longer has are left to their new owner (an error names them).
func (m *member) commit(offsets map[topicPartition]int64) error {
	byGen := map[*kafka.Generation]map[string]map[int]int64{}
	var done []func()
	var lost []string
	m.mu.Lock()
	for tp, off := range offsets {
		p := m.parts[tp]
		if p == nil {
			lost = append(lost, fmt.Sprintf("%s/%d", tp.topic, tp.partition))
			continue
		}
		if off <= p.committed.Load() {
			continue
		}
		g := byGen[p.gen]
		if g == nil {
			g = map[string]map[int]int64{}
			byGen[p.gen] = g
		}
		if g[tp.topic] == nil {
			g[tp.topic] = map[int]int64{}
		}
		g[tp.topic][tp.partition] = off
		done = append(done, func() { p.committed.Store(max(p.committed.Load(), off)) })
	}
	m.mu.Unlock()
	var errs []error
	for gen, o := range byGen {
		if err := gen.CommitOffsets(o); err != nil {
			errs = append(errs, fmt.Errorf("commit to group %s: %w", m.o.GroupID, err))
			done = nil
		}
	}
	for _, f := range done {
		f()
	}
	if len(lost) > 0 {
		errs = append(errs, fmt.Errorf("partitions %v of group %s moved to another worker: their new owner reads them again", lost, m.o.GroupID))
	}
	return errors.Join(errs...)
}

// rebalanced reports the generations begun since the last call.
func (m *member) rebalanced() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.rebalances
	m.rebalances = 0
	return n
}

// close leaves the group: every generation's readers stop, and what they
// handed out has been committed by then (the worker stops first).
func (m *member) close() error {
	m.closing.Store(true)
	err := m.group.Close()
	m.stop()
	<-m.done
	return err
}
