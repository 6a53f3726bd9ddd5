package capping

// What caps lose when a Redis master restarts empty, and the configurations
// that lose nothing (docs/operations/redis-and-kafka-failures.md, "Redis
// durability: what caps need").

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

// How a crashed master comes back in TestMasterRestartDurability.
type masterReturn int

const (
	// restartedEmpty: no persistence, restarted at once (as a supervisor
	// would), before its replica is promoted.
	restartedEmpty masterReturn = iota
	// restartedWithAOF: the same restart, with appendonly yes.
	restartedWithAOF
	// restartedAfterFailover: no persistence, kept down until its replica
	// took over, then started again.
	restartedAfterFailover
)

const (
	durabilityUsers  = 1500
	durabilityCap    = 2 // a daily limit of 2
	durabilityVictim = 1 // the master that crashes
)

// TestMasterRestartDurability fills the caps of users spread over a 3-master
// Redis Cluster (a replica each, wait_replicas 1), crashes one master
// (SIGKILL), brings it back, and decides the same users' next intents:
//
//   - restarted empty before failover: the master has no persistence and
//     is restarted at once, before its replica is promoted (the test holds
//     the replica back with cluster-replica-no-failover, so that the
//     restart wins the race every time instead of only when it is faster
//     than cluster-node-timeout). It comes back empty, still owning its
//     slots; its replica resyncs from it and drops its copy. Every user of
//     those slots gets a cap's worth of sends again, though wait_replicas
//     made sure the replica had every write. Redis's documented hazard, "a
//     master with persistence turned off that restarts automatically".
//   - append-only file: the same crash and restart, with appendonly yes on
//     the master (turned on at runtime, kept for the restart): the restart
//     reloads the records, no user goes over a cap.
//   - replica promoted first: no persistence, but the master stays down
//     until its replica took over, then comes back (empty) as a replica of
//     the new master and resyncs from it: no user goes over a cap.
//
// Users of the other masters must never go over a cap.
func TestMasterRestartDurability(t *testing.T) {
	for _, tc := range []struct {
		name string
		how  masterReturn
	}{
		{"restarted empty before failover", restartedEmpty},
		{"append-only file", restartedWithAOF},
		{"replica promoted first", restartedAfterFailover},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each waits on its own cluster, mostly
			ctx := context.Background()
			c := testenv.StartCluster(t, 3)
			c.AddReplicas()
			master, replica := c.Nodes[durabilityVictim], c.Replicas[durabilityVictim]
			mc, rc := master.Client(), replica.Client()
			owned := slotsOf(ctx, t, c.Nodes[0].Client(), c.NodeID(durabilityVictim))

			if tc.how == restartedWithAOF {
				if err := mc.ConfigSet(ctx, "appendonly", "yes").Err(); err != nil {
					t.Fatalf("CONFIG SET appendonly yes: %v", err)
				}
				waitFor(t, "the append-only file's first rewrite", func() bool {
					p := infoSection(ctx, mc, "persistence")
					return p["aof_enabled"] == "1" && p["aof_rewrites"] != "0" && p["aof_rewrites"] != "" &&
						p["aof_rewrite_in_progress"] == "0" && p["aof_rewrite_scheduled"] == "0"
				})
			}

			cl, err := NewClient(ClientOptions{Mode: ModeCluster, Addrs: c.Addrs(),
				DialTimeout: 200 * time.Millisecond, ReadTimeout: 3 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cl.Close() })
			rules := Rules{Default: Policy{Limits: []Limit{{Name: "daily", Window: day, Max: durabilityCap}}}, TimeZone: time.UTC}
			e := newEngine(t, cl, Options{Rules: rules, WaitReplicas: 1, WaitTimeout: time.Second})

			users := make([]uint64, durabilityUsers)
			for u := range users {
				users[u] = uint64(u) * bucketSize // a bucket (a key) each: spread over the slots
			}
			intents := func(phase string) []Request {
				var reqs []Request
				for _, uid := range users {
					for k := 0; k < durabilityCap; k++ {
						reqs = append(reqs, Request{UserID: uid, Segment: "s", Channel: "push", Category: "marketing",
							IntentID: phase + "-" + strconv.FormatUint(uid, 10) + "-" + strconv.Itoa(k)})
					}
				}
				return reqs
			}

			// Fill every user's cap.
			first := intents("before")
			for i, d := range decideAnswered(ctx, t, e, first) {
				if d.Outcome != Allowed && d.Outcome != Duplicate {
					t.Fatalf("before the crash, intent %s was %v, want every user's first %d allowed", first[i].IntentID, d.Outcome, durabilityCap)
				}
			}
			masterKeys, replicaKeys := dbSize(ctx, t, mc), dbSize(ctx, t, rc)
			if masterKeys == 0 || replicaKeys < masterKeys {
				t.Fatalf("before the crash: master %d keys, replica %d, want the replica to hold the master's keys", masterKeys, replicaKeys)
			}

			switch tc.how {
			case restartedEmpty, restartedWithAOF:
				if err := rc.ConfigSet(ctx, "cluster-replica-no-failover", "yes").Err(); err != nil {
					t.Fatalf("CONFIG SET cluster-replica-no-failover yes: %v", err)
				}
				if tc.how == restartedWithAOF {
					// Everything answered is written to the file (a killed
					// process loses nothing written; appendfsync everysec
					// only matters when the machine itself goes down).
					waitFor(t, "the append-only file's buffer to be written", func() bool {
						return infoSection(ctx, mc, "persistence")["aof_buffer_length"] == "0"
					})
				}
				master.Kill()
				if tc.how == restartedWithAOF {
					master.RestartWith("--appendonly", "yes")
				} else {
					master.Restart()
				}
				waitFor(t, "the replica to resync from the restarted master", func() bool {
					m, r := infoSection(ctx, mc, "replication"), infoSection(ctx, rc, "replication")
					return m["master_replid"] != "" && r["master_replid"] == m["master_replid"] &&
						r["master_link_status"] == "up" && r["master_sync_in_progress"] == "0"
				})
			case restartedAfterFailover:
				master.Kill()
				waitFor(t, "the replica to take over", func() bool {
					return infoSection(ctx, rc, "replication")["role"] == "master"
				})
				master.Restart()
				waitFor(t, "the old master to rejoin as the new master's replica", func() bool {
					m := infoSection(ctx, mc, "replication")
					return m["role"] == "slave" && m["master_link_status"] == "up" && m["master_sync_in_progress"] == "0"
				})
			}
			wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			c.WaitOK(wctx)
			cancel()
			masterAfter, replicaAfter := dbSize(ctx, t, mc), dbSize(ctx, t, rc)
			t.Logf("%s: the crashed master held %d keys, %d after it came back; its replica %d, then %d",
				tc.name, masterKeys, masterAfter, replicaKeys, replicaAfter)

			// The same users' next intents, seconds later: each cap is full.
			next := intents("after")
			sends := map[uint64]int{}
			for i, d := range decideAnswered(ctx, t, e, next) {
				if d.Outcome == Allowed || d.Outcome == Duplicate { // Duplicate: allowed by an attempt whose answer was lost
					sends[next[i].UserID]++
				}
			}
			victimSlots := 0
			for _, o := range owned {
				if o {
					victimSlots++
				}
			}
			inVictim, over, beyond, overElsewhere := 0, 0, 0, 0
			for _, uid := range users {
				mine := owned[userSlot(uid)]
				if mine {
					inVictim++
				}
				if n := sends[uid]; n > 0 {
					over++
					beyond += n
					if !mine {
						overElsewhere++
					}
				}
			}
			t.Logf("%s: %d of %d users over their cap of %d (%d sends beyond it); the crashed master served %d of 16384 slots (%.1f%%) and %d of the users (%.1f%%)",
				tc.name, over, len(users), durabilityCap, beyond, victimSlots, 100*float64(victimSlots)/16384,
				inVictim, 100*float64(inVictim)/float64(len(users)))
			if inVictim == 0 || inVictim == len(users) {
				t.Fatalf("%d of %d users in the crashed master's slots: the test needs users on every side", inVictim, len(users))
			}
			if overElsewhere > 0 {
				t.Errorf("%d users of the other masters went over their cap", overElsewhere)
			}
			switch tc.how {
			case restartedEmpty:
				if masterAfter != 0 || replicaAfter != 0 {
					t.Errorf("after the restart: master %d keys, replica %d; want both empty (the replica resynced from the empty master)", masterAfter, replicaAfter)
				}
				if over != inVictim || beyond != durabilityCap*inVictim {
					t.Errorf("%d users over their cap with %d sends beyond it; want every user of the crashed master's slots (%d) to get a cap's worth again (%d)",
						over, beyond, inVictim, durabilityCap*inVictim)
				}
			default:
				if over != 0 {
					t.Errorf("%d users over their cap (%d sends beyond it), want none", over, beyond)
				}
			}
		})
	}
}

// decideAnswered decides reqs until each has an answer, re-deciding (same
// ids, in order) those that failed, as the dispatcher does; each attempt is
// decided at the time it is made (the worker's clock).
func decideAnswered(ctx context.Context, t *testing.T, e *Engine, reqs []Request) []Decision {
	t.Helper()
	out := make([]Decision, len(reqs))
	pending := make([]int, len(reqs))
	for i := range pending {
		pending[i] = i
	}
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for len(pending) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d intents still undecided after 60s: %v", len(pending), last)
		}
		batch := make([]Request, len(pending))
		now := time.Now()
		for k, i := range pending {
			batch[k] = reqs[i]
			batch[k].At = now
		}
		ds, err := e.Decide(ctx, batch)
		if err != nil {
			t.Fatalf("Decide: %v", err)
		}
		var again []int
		for k, d := range ds {
			if d.Err != nil {
				if errors.Is(d.Err, ErrInvalidRequest) {
					t.Fatalf("intent %s: %v", batch[k].IntentID, d.Err)
				}
				if last == nil || !errors.Is(d.Err, ErrEarlierUndecided) {
					last = d.Err // the cause rather than the users' later intents waiting on it
				}
				again = append(again, pending[k])
				continue
			}
			out[pending[k]] = d
		}
		pending = again
		if len(pending) > 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return out
}

// slotsOf marks the slots the node with id serves as a master.
func slotsOf(ctx context.Context, t *testing.T, c *redis.Client, id string) []bool {
	t.Helper()
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatalf("CLUSTER SHARDS: %v", err)
	}
	owned := make([]bool, 16384)
	for _, sh := range shards {
		mine := false
		for _, n := range sh.Nodes {
			mine = mine || (n.ID == id && n.Role == "master")
		}
		if !mine {
			continue
		}
		for _, r := range sh.Slots {
			for s := r.Start; s <= r.End; s++ {
				owned[s] = true
			}
		}
	}
	return owned
}

// infoSection is one INFO section as fields; empty when the node does not
// answer.
func infoSection(ctx context.Context, c *redis.Client, section string) map[string]string {
	fields := map[string]string{}
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return fields
	}
	for _, l := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			fields[k] = v
		}
	}
	return fields
}

func dbSize(ctx context.Context, t *testing.T, c *redis.Client) int64 {
	t.Helper()
	n, err := c.DBSize(ctx).Result()
	if err != nil {
		t.Fatalf("DBSIZE: %v", err)
	}
	return n
}
