package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/testenv"
)

// tracker records, across the members of a test, which member reads which
// partition: a partition is read by one member at a time.
type tracker struct {
	t       *testing.T
	mu      sync.Mutex
	readers map[TopicPartition]string
	stops   map[string][]TopicPartition // by member: partitions it stopped reading
	overlap []string
}

func newTracker(t *testing.T) *tracker {
	return &tracker{t: t, readers: map[TopicPartition]string{}, stops: map[string][]TopicPartition{}}
}

func (k *tracker) read(name string) func(ctx context.Context, c *Claim, offset int64) {
	return func(ctx context.Context, c *Claim, offset int64) {
		c.Start.Store(0)
		k.mu.Lock()
		if r, ok := k.readers[c.TopicPartition]; ok {
			k.overlap = append(k.overlap, fmt.Sprintf("%v read by %s while %s still did", c.TopicPartition, name, r))
		}
		k.readers[c.TopicPartition] = name
		k.mu.Unlock()
		<-ctx.Done()
		k.mu.Lock()
		delete(k.readers, c.TopicPartition)
		k.stops[name] = append(k.stops[name], c.TopicPartition)
		k.mu.Unlock()
	}
}

// owners is how many partitions each member reads now.
func (k *tracker) owners() map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := map[string]int{}
	for _, r := range k.readers {
		n[r]++
	}
	return n
}

func (k *tracker) stopped(name string) []TopicPartition {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.stops[name])
}

func (k *tracker) check() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, o := range k.overlap {
		k.t.Error(o)
	}
}

type groupEnv struct {
	t     *testing.T
	kafka *testenv.Kafka
	track *tracker
	reg   *prometheus.Registry
	gm    *GroupMetrics
}

func newGroupEnv(t *testing.T, partitions int32) *groupEnv {
	reg := prometheus.NewRegistry()
	return &groupEnv{t: t, kafka: testenv.StartKafka(t, partitions, []string{"in"}), track: newTracker(t), reg: reg, gm: NewGroupMetrics(reg)}
}

func (e *groupEnv) join(name, instance, mode string) *Group {
	e.t.Helper()
	g, err := JoinGroup(GroupOptions{Transport: &kafkago.Transport{ClientID: name}, Dialer: &kafkago.Dialer{ClientID: name}, Brokers: e.kafka.Addrs, GroupID: "g", Topics: []string{"in"},
		InstanceID: instance, Protocols: Protocols(mode), SessionTimeout: 6 * time.Second, RebalanceTimeout: 6 * time.Second,
		HeartbeatInterval: 100 * time.Millisecond, StartOffset: kafkago.FirstOffset, Read: e.track.read(name), Metrics: e.gm, Log: testLogger(e.t).With("m", name)})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = g.Close() })
	return g
}

// waitOwners waits until the members read want partitions each.
func (e *groupEnv) waitOwners(want map[string]int) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := e.track.owners()
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("members read %v partitions, want %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCooperativeKeepsWhatStays: a third member joins two that read six
// partitions: only the two partitions that move to it are revoked (each
// after its old reader stopped); the other four are read throughout. A
// member that leaves hands its partitions on the same way.
func TestCooperativeKeepsWhatStays(t *testing.T) {
	e := newGroupEnv(t, 6)
	e.join("a", "", ProtocolCooperative)
	e.join("b", "", ProtocolCooperative)
	e.waitOwners(map[string]int{"a": 3, "b": 3})
	time.Sleep(300 * time.Millisecond) // settled: no rejoin in flight
	before := len(e.track.stopped("a")) + len(e.track.stopped("b"))
	c := e.join("c", "", ProtocolCooperative)
	e.waitOwners(map[string]int{"a": 2, "b": 2, "c": 2})
	if n := len(e.track.stopped("a")) + len(e.track.stopped("b")) - before; n != 2 {
		t.Fatalf("%d partitions stopped on the two members when a third joined, want 2 (the ones that moved): a %v, b %v",
			n, e.track.stopped("a"), e.track.stopped("b"))
	}
	_ = c.Close() // a dynamic member leaves: the others take its partitions at once
	e.waitOwners(map[string]int{"a": 3, "b": 3})
	if n := len(e.track.stopped("a")) + len(e.track.stopped("b")) - before; n != 2 {
		t.Fatalf("the member that left took partitions from the others: %d stopped, want still 2", n)
	}
	e.track.check()
	if v := testutil.ToFloat64(e.gm.revoked.WithLabelValues("g")); v != float64(before+2) {
		t.Errorf("capper_kafka_partitions_revoked_total = %v, want %d (%d as b joined, 2 moved to c)", v, before+2, before)
	}
}

// TestStaticRestart: a static member that stops and starts again within
// the session timeout gets its partitions back with no rebalance: the
// other member reads its own throughout and joins no new generation.
func TestStaticRestart(t *testing.T) {
	e := newGroupEnv(t, 4)
	a := e.join("a", "worker-0", ProtocolCooperative)
	b := e.join("b", "worker-1", ProtocolCooperative)
	e.waitOwners(map[string]int{"a": 2, "b": 2})
	time.Sleep(300 * time.Millisecond) // settled: no rejoin in flight
	had := slices.Clone(a.Assigned("in"))
	b.Rebalanced()
	stoppedB := len(e.track.stopped("b"))
	_ = a.Close() // static: does not leave
	e.waitOwners(map[string]int{"b": 2})
	a2 := e.join("a2", "worker-0", ProtocolCooperative)
	e.waitOwners(map[string]int{"a2": 2, "b": 2})
	if got := a2.Assigned("in"); !slices.Equal(got, had) {
		t.Errorf("restarted static member reads %v, want its partitions %v", got, had)
	}
	if n := b.Rebalanced(); n != 0 {
		t.Errorf("the other member joined %d generations while a static member restarted, want 0", n)
	}
	if s := e.track.stopped("b"); len(s) != stoppedB {
		t.Errorf("the other member stopped reading %v", s[stoppedB:])
	}
	e.track.check()
}

// TestEagerWithAnEarlierWorker: a member of an earlier version (kafka-go's
// ConsumerGroup, range only) and a cooperative one agree on range; each
// reads its half, never the same partition at once.
func TestEagerWithAnEarlierWorker(t *testing.T) {
	e := newGroupEnv(t, 4)
	old, err := kafkago.NewConsumerGroup(kafkago.ConsumerGroupConfig{ID: "g", Brokers: e.kafka.Addrs, Topics: []string{"in"},
		HeartbeatInterval: 100 * time.Millisecond, SessionTimeout: 6 * time.Second, RebalanceTimeout: 6 * time.Second, JoinGroupBackoff: 100 * time.Millisecond, ErrorLogger: kafkago.LoggerFunc(func(m string, a ...any) { t.Logf("earlier worker: "+m, a...) })})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for {
			gen, err := old.Next(ctx)
			if err != nil {
				return
			}
			for _, as := range gen.Assignments["in"] {
				gen.Start(func(ctx context.Context) {
					e.track.read("old")(ctx, newClaim(TopicPartition{"in", as.ID}), 0)
				})
			}
		}
	}()
	e.waitOwners(map[string]int{"old": 4})
	g := e.join("new", "", ProtocolCooperative)
	e.waitOwners(map[string]int{"new": 2, "old": 2})
	if p := g.protocolOf(); p.Name != "range" || p.Cooperative {
		t.Errorf("the group agreed on %q, want range (the earlier worker's)", p.Name)
	}
	e.track.check()
}

// TestRevokedAfterCommit: a partition that moves is given up only once
// what was handed out of it is committed.
func TestRevokedAfterCommit(t *testing.T) {
	e := newGroupEnv(t, 2)
	var handed sync.Map
	inner := e.track.read("a")
	g, err := JoinGroup(GroupOptions{Transport: &kafkago.Transport{}, Brokers: e.kafka.Addrs, GroupID: "g", Topics: []string{"in"},
		Protocols: Protocols(ProtocolCooperative), SessionTimeout: 6 * time.Second, RebalanceTimeout: 20 * time.Second,
		HeartbeatInterval: 100 * time.Millisecond, StartOffset: kafkago.FirstOffset,
		Read: func(ctx context.Context, c *Claim, offset int64) {
			c.Handed.Store(5) // five records handed out, none committed yet
			handed.Store(c.TopicPartition, c)
			inner(ctx, c, offset)
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	e.waitOwners(map[string]int{"a": 2})
	e.join("b", "", ProtocolCooperative)
	time.Sleep(2 * time.Second)
	if got := e.track.owners(); got["b"] != 0 {
		t.Fatalf("a partition moved before what was handed out of it was committed: %v", got)
	}
	offsets := map[TopicPartition]int64{}
	handed.Range(func(k, _ any) bool { offsets[k.(TopicPartition)] = 5; return true })
	if err := g.Commit(context.Background(), offsets); err != nil {
		t.Fatal(err)
	}
	e.waitOwners(map[string]int{"a": 1, "b": 1})
	committed, err := g.committed(context.Background(), []TopicPartition{{"in", 0}, {"in", 1}})
	if err != nil || committed[TopicPartition{"in", 0}] != 5 || committed[TopicPartition{"in", 1}] != 5 {
		t.Fatalf("committed offsets %v %v, want 5 each", committed, err)
	}
	if err := g.Commit(context.Background(), map[TopicPartition]int64{{"in", 0}: 6, {"in", 1}: 6}); err == nil {
		t.Error("a commit of a partition the member gave up succeeded")
	}
	e.track.check()
}

// TestHeartbeatErrors: the coordinator's answers to a heartbeat reach the
// member (kafka-go decodes them out of order: swappedCode).
func TestHeartbeatErrors(t *testing.T) {
	e := newGroupEnv(t, 1)
	g := e.join("a", "", ProtocolCooperative)
	e.waitOwners(map[string]int{"a": 1})
	g.mu.Lock()
	g.generation += 5
	g.mu.Unlock()
	if err := g.beat(context.Background()); !errors.Is(err, kafkago.IllegalGeneration) {
		t.Fatalf("a heartbeat of a wrong generation: %v, want IllegalGeneration", err)
	}
}

// testLogger logs to the test's log (shown when it fails).
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

// TestStaticEagerRestart: under the eager protocol too, a static member
// that restarts within the session timeout gets its partitions back and
// the other member keeps reading its own.
func TestStaticEagerRestart(t *testing.T) {
	e := newGroupEnv(t, 4)
	a := e.join("a", "worker-0", ProtocolEager)
	b := e.join("b", "worker-1", ProtocolEager)
	e.waitOwners(map[string]int{"a": 2, "b": 2})
	time.Sleep(300 * time.Millisecond)
	had, stoppedB := slices.Clone(a.Assigned("in")), len(e.track.stopped("b"))
	b.Rebalanced()
	_ = a.Close()
	e.waitOwners(map[string]int{"b": 2})
	a2 := e.join("a2", "worker-0", ProtocolEager)
	e.waitOwners(map[string]int{"a2": 2, "b": 2})
	if got := a2.Assigned("in"); !slices.Equal(got, had) {
		t.Errorf("restarted static member reads %v, want %v", got, had)
	}
	if n, s := b.Rebalanced(), e.track.stopped("b"); n != 0 || len(s) != stoppedB {
		t.Errorf("the other member joined %d generations and stopped %v while a static member restarted, want none", n, s[stoppedB:])
	}
}

// TestLeave: a static member that leaves (scaled down, or stuck) hands its
// partitions to the others at once, long before its session would time
// out (a minute here; the test gives up after 30 s).
func TestLeave(t *testing.T) {
	e := newGroupEnv(t, 4)
	join := func(name, instance string) *Group {
		g, err := JoinGroup(GroupOptions{Transport: &kafkago.Transport{ClientID: name}, Dialer: &kafkago.Dialer{ClientID: name}, Brokers: e.kafka.Addrs, GroupID: "g", Topics: []string{"in"},
			InstanceID: instance, Protocols: Protocols(ProtocolCooperative), SessionTimeout: time.Minute, RebalanceTimeout: time.Minute,
			HeartbeatInterval: 100 * time.Millisecond, StartOffset: kafkago.FirstOffset, Read: e.track.read(name), Log: testLogger(t).With("m", name)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		return g
	}
	a := join("a", "worker-0")
	join("b", "worker-1")
	e.waitOwners(map[string]int{"a": 2, "b": 2})
	a.Leave("a test")
	e.waitOwners(map[string]int{"b": 4})
}

// TestRemoveMembers: a static member that stopped (and so did not leave) is
// removed on its behalf: the other member gets its partitions long before
// its session would time out (a minute).
func TestRemoveMembers(t *testing.T) {
	e := newGroupEnv(t, 4)
	join := func(name, instance string) *Group {
		g, err := JoinGroup(GroupOptions{Transport: &kafkago.Transport{ClientID: name}, Dialer: &kafkago.Dialer{ClientID: name}, Brokers: e.kafka.Addrs, GroupID: "g", Topics: []string{"in"},
			InstanceID: instance, Protocols: Protocols(ProtocolCooperative), SessionTimeout: time.Minute, RebalanceTimeout: time.Minute,
			HeartbeatInterval: 100 * time.Millisecond, StartOffset: kafkago.FirstOffset, Read: e.track.read(name), Log: testLogger(t).With("m", name)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close() })
		return g
	}
	a := join("a", "worker-0")
	join("b", "worker-1")
	e.waitOwners(map[string]int{"a": 2, "b": 2})
	_ = a.Close()
	res, err := RemoveMembers(context.Background(), &kafkago.Transport{}, e.kafka.Addrs, "g", []string{"worker-0", "worker-7"})
	if err != nil || res["worker-0"] != nil || !errors.Is(res["worker-7"], ErrNotMember) {
		t.Fatalf("RemoveMembers = %v, %v; want worker-0 removed, worker-7 not a member", res, err)
	}
	e.waitOwners(map[string]int{"b": 4})
}
