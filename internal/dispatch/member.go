package dispatch

// The worker's consumer-group memberships, on the Kafka room's one
// membership (internal/kafka): a reader per owned partition, the offsets
// the worker was handed and committed, and the commits. A partition that
// moves (a rebalance) is given up only once what was handed out of it is
// committed, so no decided-but-uncommitted record moves to another worker;
// with the cooperative protocol the partitions that stay are read
// throughout; a commit goes only to a partition this member still owns, in
// the generation the coordinator knows.

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/capper-dev/capper/internal/kafka"
)

// partState is one owned partition as the worker's readers see it: the
// membership's claim (kafka.Claim).
type partState struct {
	tp topicPartition
	// start is the offset committed when this member took the partition
	// (resolved from the log's bounds when none was); set by its reader
	// before it hands anything out.
	start *atomic.Int64
	// handed: the offset after the last record handed to the worker;
	// committed: after the last this member committed (0: none).
	handed, committed *atomic.Int64
	// closed: the claim ended; its queued records are dropped.
	closed *atomic.Bool
	// parkUntil: the parked topic's reader hands every record below it
	// over (parked.go); only that reader uses it.
	parkUntil int64
}

// memberOptions configure a member.
type memberOptions struct {
	Kafka   kafka.Options
	GroupID string
	Topics  []string
	// Protocols are what the member offers (nil: kafka.Protocols of
	// Kafka.GroupProtocol).
	Protocols []kafka.Protocol
	// Read reads one partition until ctx ends; it retries its own errors.
	Read func(ctx context.Context, p *partState, offset int64)
	// Started runs after each change of what the member owns; Watch,
	// when set, runs during a generation and ends it by returning (a
	// rejoin); Hold runs when partitions are assigned, before any of them
	// is read.
	Started func()
	Watch   func(ctx context.Context)
	Hold    func(ctx context.Context)
	Log     *slog.Logger
}

// member is one group membership.
type member struct {
	g *kafka.Group

	mu    sync.Mutex
	parts map[topicPartition]*partState
}

func newMember(o memberOptions) (*member, error) {
	k := o.Kafka
	protocols := o.Protocols
	if protocols == nil {
		protocols = kafka.Protocols(k.GroupProtocol)
	}
	start := kafka.FirstOffset
	if k.StartOffset == "latest" {
		start = kafka.LastOffset
	}
	m := &member{parts: map[topicPartition]*partState{}}
	var changed func([]kafka.TopicPartition)
	if o.Started != nil {
		changed = func([]kafka.TopicPartition) { o.Started() }
	}
	g, err := kafka.JoinGroup(kafka.GroupOptions{Transport: k.Transport(), Dialer: k.Dialer(), Brokers: k.Brokers, GroupID: o.GroupID, Topics: o.Topics,
		InstanceID: k.InstanceID, Protocols: protocols, LeaveOnClose: k.LeaveOnClose,
		SessionTimeout: k.SessionTimeout, RebalanceTimeout: k.RebalanceTimeout, HeartbeatInterval: k.HeartbeatInterval,
		StartOffset: start, Changed: changed, Watch: o.Watch, Hold: o.Hold, Log: o.Log, Metrics: k.GroupMetrics,
		Read: func(ctx context.Context, c *kafka.Claim, offset int64) {
			p := &partState{tp: topicPartition{c.Topic, c.Partition}, start: &c.Start, handed: &c.Handed, committed: &c.Committed, closed: &c.Closed}
			m.mu.Lock()
			m.parts[p.tp] = p
			m.mu.Unlock()
			defer func() {
				m.mu.Lock()
				if m.parts[p.tp] == p {
					delete(m.parts, p.tp)
				}
				m.mu.Unlock()
			}()
			o.Read(ctx, p, offset)
		}})
	if err != nil {
		return nil, err
	}
	m.g = g
	return m, nil
}

// owned is the state of a partition this member reads now (nil: none).
func (m *member) owned(tp topicPartition) *partState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.parts[tp]
}

// assigned lists the partitions of topic this member owns now.
func (m *member) assigned(topic string) []int { return m.g.Assigned(topic) }

// commit commits offsets (the next offset to read, per partition) of
// partitions this member owns, each past what it committed before; those
// it no longer owns are left to their new owner (an error names them).
func (m *member) commit(ctx context.Context, offsets map[topicPartition]int64) error {
	out := make(map[kafka.TopicPartition]int64, len(offsets))
	for tp, off := range offsets {
		out[kafka.TopicPartition{Topic: tp.topic, Partition: tp.partition}] = off
	}
	return m.g.Commit(ctx, out)
}

// rebalanced reports the generations begun since the last call.
func (m *member) rebalanced() int64 { return m.g.Rebalanced() }

// close ends the membership: every reader stops, and what they handed out
// has been committed by then (the worker stops first).
func (m *member) close() error { return m.g.Close() }
