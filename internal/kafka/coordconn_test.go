package kafka

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCommitsOwnConnection: a member with a Dialer sends its commits over
// its own connection to the coordinator, without asking which broker that
// is before each (kafka-go's Transport does); a connection the broker
// closes is dialed again by the next commit, and an answer that the broker
// no longer coordinates the group makes the next commit ask again.
func TestCommitsOwnConnection(t *testing.T) {
	e := newGroupEnv(t, 2)
	g := e.join("a", "", ProtocolCooperative)
	e.waitOwners(map[string]int{"a": 2})
	var finds, commits atomic.Int64
	e.kafka.Cluster.ControlKey(int16(kmsg.FindCoordinator), func(kmsg.Request) (kmsg.Response, error, bool) {
		finds.Add(1)
		return nil, nil, false
	})
	e.kafka.Cluster.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		commits.Add(1)
		return nil, nil, false
	})
	ctx := context.Background()
	p0, p1 := TopicPartition{"in", 0}, TopicPartition{"in", 1}
	const n = 20
	for i := range int64(n) {
		if err := g.Commit(ctx, map[TopicPartition]int64{p0: i + 1, p1: 2 * (i + 1)}); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	if got := e.kafka.Committed(t, "g", "in", 2); got[0] != n || got[1] != 2*n {
		t.Fatalf("committed %v, want 0:%d 1:%d", got, n, 2*n)
	}
	// A heartbeat that failed meanwhile may make one commit ask once.
	if c, f := commits.Load(), finds.Load(); c != n || f > 1 {
		t.Fatalf("%d commits sent %d requests and asked for the coordinator %d times, want %d and at most once", n, c, f, n)
	}

	// The broker drops the connection at the next commit: that commit
	// fails, the one after dials again.
	e.kafka.Cluster.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		return nil, errors.New("dropped"), true
	})
	if err := g.Commit(ctx, map[TopicPartition]int64{p0: 30}); err == nil {
		t.Fatal("a commit whose connection was dropped returned no error")
	}
	if err := g.Commit(ctx, map[TopicPartition]int64{p1: 50}); err != nil {
		t.Fatalf("the commit after a dropped connection: %v", err)
	}
	if got := e.kafka.Committed(t, "g", "in", 2); got[0] != 30 || got[1] != 50 {
		t.Fatalf("committed %v after the connection was dialed again, want 0:30 1:50 (the dropped commit's offset with the next)", got)
	}

	// "Not the coordinator": the next commit asks for it again.
	e.refuseNextCommit(16) // NOT_COORDINATOR
	if err := g.Commit(ctx, map[TopicPartition]int64{p0: 60}); err == nil {
		t.Fatal("a commit the broker answered \"not the coordinator\" returned no error")
	}
	before := finds.Load()
	if err := g.Commit(ctx, map[TopicPartition]int64{p1: 70}); err != nil {
		t.Fatalf("the commit after \"not the coordinator\": %v", err)
	}
	if finds.Load() == before {
		t.Fatal("the commit after \"not the coordinator\" did not ask for the coordinator")
	}
	if got := e.kafka.Committed(t, "g", "in", 2); got[0] != 60 || got[1] != 70 {
		t.Fatalf("committed %v, want 0:60 1:70", got)
	}
}
