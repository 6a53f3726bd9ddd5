package kafka

// A consumer-group membership on kafka-go's protocol client: the one every
// group of capper uses (the intents', the delay tiers' and lanes', the
// users' limits applier's). It speaks Kafka's group protocol itself
// (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit) so that it
// can do what kafka-go's ConsumerGroup cannot:
//
//   - static membership (KIP-345): with an instance id, a member that
//     restarts within the session timeout gets its partitions back with
//     no rebalance, and one that stops does not leave the group;
//   - cooperative rebalancing (KIP-429): on a membership change only the
//     partitions that move are revoked, after what was handed out of them
//     is committed, and assigned in the next round; the others are read
//     and decided throughout. The eager protocol (every member gives up
//     everything at every change) is what a group falls back to while a
//     member of an earlier version is in it.
//
// A member runs one reader (GroupOptions.Read) per partition it owns, and
// commits through Commit, which commits only partitions it still owns, in
// the generation the coordinator knows.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// Group protocols (GroupOptions.Protocol).
const (
	ProtocolCooperative = "cooperative"
	ProtocolEager       = "eager"
)

// Protocol is one way the group can assign, in a member's order of
// preference: the coordinator picks the first every member offers.
type Protocol struct {
	Name        string
	Assignor    Assignor
	Cooperative bool
}

// Protocols are the protocols a member offers for mode (ProtocolCooperative
// or ProtocolEager): the cooperative sticky assignor, then range, which
// members of earlier versions (kafka-go's ConsumerGroup) also offer, so a
// group in a rolling upgrade agrees on range until every member offers the
// cooperative one.
func Protocols(mode string) []Protocol {
	eager := Protocol{Name: "range", Assignor: RangeAssignor{}}
	if mode == ProtocolEager {
		return []Protocol{eager}
	}
	return []Protocol{{Name: "cooperative-sticky", Assignor: StickyAssignor{}, Cooperative: true}, eager}
}

// GroupOptions configure JoinGroup. Transport, Brokers, GroupID, Topics,
// Protocols, Read and the three durations are required.
type GroupOptions struct {
	Transport kafkago.RoundTripper // TLS, SASL and the client id: Options.Transport; the group's own (Close closes it)
	// Dialer, when set (Options.Dialer), connects the member to its
	// coordinator for its offset commits (coordconn.go); nil: they go
	// through Transport.
	Dialer  *kafkago.Dialer
	Brokers []string
	GroupID string
	Topics  []string
	// InstanceID makes the member static ("": dynamic). Two running
	// processes must never share one: the coordinator fences the older.
	InstanceID string
	Protocols  []Protocol
	// LeaveOnClose: a static member leaves the group when it is closed (it
	// is being scaled down); a dynamic one always does.
	LeaveOnClose                                        bool
	SessionTimeout, RebalanceTimeout, HeartbeatInterval time.Duration
	// StartOffset is where a partition with no committed offset is read
	// from: kafka-go's FirstOffset or LastOffset.
	StartOffset int64
	// Read reads one owned partition from offset (a committed offset, or
	// StartOffset) until ctx ends (the partition was revoked or lost, or
	// the group closes); it retries its own errors.
	Read func(ctx context.Context, c *Claim, offset int64)
	// Changed runs after each change of what the member owns (nil: none).
	Changed func(owned []TopicPartition)
	// Watch, when set, runs while the member is in a generation and makes
	// it join again when it returns (e.g. the user data changed).
	Watch func(ctx context.Context)
	// Hold, when set, runs when partitions are assigned, before any of
	// them is read: their readers wait until it returns (or they are
	// revoked). Partitions the member keeps are not held.
	Hold    func(ctx context.Context)
	Log     *slog.Logger
	Metrics *GroupMetrics // nil: none
}

func (o *GroupOptions) validate() error {
	var errs []error
	if o.Transport == nil || len(o.Brokers) == 0 || o.GroupID == "" || len(o.Topics) == 0 || len(o.Protocols) == 0 || o.Read == nil {
		errs = append(errs, errors.New("a transport, brokers, a group id, topics, protocols and a reader are required"))
	}
	if o.SessionTimeout <= 0 || o.RebalanceTimeout <= 0 || o.HeartbeatInterval <= 0 || o.HeartbeatInterval >= o.SessionTimeout {
		errs = append(errs, fmt.Errorf("heartbeat interval %s must be above 0 and below the session timeout %s; rebalance timeout %s above 0",
			o.HeartbeatInterval, o.SessionTimeout, o.RebalanceTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kafka group %s: %w", o.GroupID, err)
	}
	return nil
}

// Group is one membership.
type Group struct {
	o         GroupOptions
	bootstrap net.Addr
	log       *slog.Logger
	m         *groupMetrics
	stop      context.CancelFunc
	done      chan struct{}
	rejoin    chan struct{} // a local change asks for a new generation
	closing   chan struct{} // closed by Close: drains wait for nothing
	// commitMu: one commit request at a time, each built from the offsets
	// asked when it is sent, so that the coordinator never receives a
	// partition's offsets out of order (a commit carries other partitions'
	// offsets that an earlier one failed to, or that are in flight).
	commitMu sync.Mutex
	cc       *coordConn // the commits' connection (commitMu; nil: none open)

	mu         sync.Mutex
	topics     []string
	memberID   string
	generation int32
	protocol   Protocol
	claims     map[TopicPartition]*Claim
	rebalances int64 // generations begun since the last Rebalanced call
	leave      bool  // Leave was asked: leave even a static membership
	coord      net.Addr
	// leaderParts: as leader, the partitions of leaderTopics it assigned
	// (nil: not the leader); a change makes it join again.
	leaderParts  map[string][]int
	leaderTopics []string
}

// JoinGroup starts a membership; it joins in the background (Assigned is
// empty until the first generation).
func JoinGroup(o GroupOptions) (*Group, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	ctx, stop := context.WithCancel(context.Background())
	g := &Group{o: o, bootstrap: kafkago.TCP(o.Brokers...), log: o.Log.With("group", o.GroupID), m: o.Metrics.forGroup(o.GroupID),
		stop: stop, done: make(chan struct{}), rejoin: make(chan struct{}, 1), closing: make(chan struct{}),
		topics: slices.Clone(o.Topics), claims: map[TopicPartition]*Claim{}}
	go g.run(ctx)
	return g, nil
}

// Owned is the claim of a partition this member owns now (nil: none).
func (g *Group) Owned(tp TopicPartition) *Claim {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.claims[tp]
}

// Assigned lists the partitions of topic this member owns now.
func (g *Group) Assigned(topic string) []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []int
	for tp := range g.claims {
		if tp.Topic == topic {
			out = append(out, tp.Partition)
		}
	}
	slices.Sort(out)
	return out
}

// Rebalanced reports the generations begun since the last call.
func (g *Group) Rebalanced() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.rebalances
	g.rebalances = 0
	return n
}

// SetTopics changes what the member reads: it joins again with them.
func (g *Group) SetTopics(topics []string) {
	g.mu.Lock()
	same := slices.Equal(slices.Sorted(slices.Values(topics)), slices.Sorted(slices.Values(g.topics)))
	g.topics = slices.Clone(topics)
	g.mu.Unlock()
	if !same {
		g.askRejoin()
	}
}

func (g *Group) askRejoin() {
	select {
	case g.rejoin <- struct{}{}:
	default:
	}
}

// Close ends the membership: every reader stops (what they handed out
// has been committed by then: the worker stops first), and the member
// leaves the group unless it is static and LeaveOnClose is not set.
func (g *Group) Close() error {
	select {
	case <-g.closing:
	default:
		close(g.closing)
	}
	g.stop()
	<-g.done
	closeTransport(g.o.Transport)
	return nil
}

// Leave makes the member leave the group now, static or not, and stop:
// its partitions go to the others at once. A worker that cannot make
// progress calls it (why says so in the log).
func (g *Group) Leave(why string) {
	g.log.Warn("kafka group: leaving the group", "why", why)
	g.mu.Lock()
	g.leave = true
	g.mu.Unlock()
	_ = g.Close()
}

// closed reports whether Close was called.
func (g *Group) closed() bool {
	select {
	case <-g.closing:
		return true
	default:
		return false
	}
}
