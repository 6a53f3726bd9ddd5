package kafka

import (
	"context"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// failNextCommit makes the coordinator refuse the next offset commit, every
// partition of it, as it does when a rebalance began meanwhile.
func (e *groupEnv) failNextCommit() { e.refuseNextCommit(27) } // REBALANCE_IN_PROGRESS

// refuseNextCommit answers the next offset commit with code for every
// partition of it.
func (e *groupEnv) refuseNextCommit(code int16) {
	e.kafka.Cluster.ControlKey(int16(kmsg.OffsetCommit), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.OffsetCommitRequest)
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			t := kmsg.NewOffsetCommitResponseTopic()
			t.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				p := kmsg.NewOffsetCommitResponseTopicPartition()
				p.Partition = rp.Partition
				p.ErrorCode = code
				t.Partitions = append(t.Partitions, p)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return resp, nil, true
	})
}

// TestFailedCommitCommittedAgain: what a failed commit left is committed
// again with the next commit of any partition the member still owns, and
// when the member closes; a partition whose last batch's commit failed is
// not read again by its next owner.
func TestFailedCommitCommittedAgain(t *testing.T) {
	e := newGroupEnv(t, 2)
	g := e.join("a", "", ProtocolCooperative)
	e.waitOwners(map[string]int{"a": 2})
	ctx := context.Background()
	p0, p1 := TopicPartition{"in", 0}, TopicPartition{"in", 1}
	e.failNextCommit()
	if err := g.Commit(ctx, map[TopicPartition]int64{p0: 5, p1: 5}); err == nil {
		t.Fatal("the refused commit returned no error")
	}
	if err := g.Commit(ctx, map[TopicPartition]int64{p0: 6}); err != nil {
		t.Fatal(err)
	}
	if got := e.kafka.Committed(t, "g", "in", 2); got[0] != 6 || got[1] != 5 {
		t.Fatalf("committed %v after the next commit of partition 0, want 0:6 1:5", got)
	}
	e.failNextCommit()
	if err := g.Commit(ctx, map[TopicPartition]int64{p1: 9}); err == nil {
		t.Fatal("the refused commit returned no error")
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if got := e.kafka.Committed(t, "g", "in", 2); got[0] != 6 || got[1] != 9 {
		t.Fatalf("committed %v after the member closed, want 0:6 1:9", got)
	}
}

// TestRevokedAfterFailedCommit: a partition that moves while the commit of
// what was handed out of it failed is committed again before it is given
// up, not after half the rebalance timeout.
func TestRevokedAfterFailedCommit(t *testing.T) {
	e := newGroupEnv(t, 2)
	inner := e.track.read("a")
	g, err := JoinGroup(GroupOptions{Transport: &kafkago.Transport{}, Brokers: e.kafka.Addrs, GroupID: "g", Topics: []string{"in"},
		Protocols: Protocols(ProtocolCooperative), SessionTimeout: 6 * time.Second, RebalanceTimeout: 60 * time.Second,
		HeartbeatInterval: 100 * time.Millisecond, StartOffset: kafkago.FirstOffset,
		Read: func(ctx context.Context, c *Claim, offset int64) {
			c.Handed.Store(5) // five records handed out
			inner(ctx, c, offset)
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	e.waitOwners(map[string]int{"a": 2})
	e.failNextCommit()
	if err := g.Commit(context.Background(), map[TopicPartition]int64{{"in", 0}: 5, {"in", 1}: 5}); err == nil {
		t.Fatal("the refused commit returned no error")
	}
	e.join("b", "", ProtocolCooperative)
	// Without a commit again, a waits half the rebalance timeout (30 s)
	// before it gives a partition up; waitOwners waits 30 s at most.
	e.waitOwners(map[string]int{"a": 1, "b": 1})
	if got := e.kafka.Committed(t, "g", "in", 2); got[0] != 5 || got[1] != 5 {
		t.Fatalf("committed %v, want 5 each", got)
	}
	e.track.check()
}

// TestConcurrentCommits: partitions committed from concurrent readers
// (each its own, in order, as the users' limits' applier does) end where
// each was last asked: a commit that carries another partition's offsets
// never reaches the coordinator after a later one of that partition.
func TestConcurrentCommits(t *testing.T) {
	e := newGroupEnv(t, 4)
	g := e.join("a", "", ProtocolCooperative)
	e.waitOwners(map[string]int{"a": 4})
	e.failNextCommit() // every partition's offsets asked again with the next commits
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Go(func() {
			for off := int64(1); off <= 100; off++ {
				_ = g.Commit(context.Background(), map[TopicPartition]int64{{"in", p}: off})
			}
		})
	}
	wg.Wait()
	if got := e.kafka.Committed(t, "g", "in", 4); got[0] != 100 || got[1] != 100 || got[2] != 100 || got[3] != 100 {
		t.Fatalf("committed %v, want 100 each", got)
	}
}
