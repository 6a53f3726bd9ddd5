package testenv

// A 3-master Redis Cluster of real redis-server processes.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster, each node a redis-server process: masters
// (Nodes), and the replicas AddReplicas adds.
type Cluster struct {
	t     testing.TB
	Nodes []*Redis
	ids   []string
	// Replicas[i] replicates Nodes[i] when AddReplicas made them (a
	// failover may swap their roles since).
	Replicas []*Redis
	args     []string // every node's extra redis-server arguments
}

// StartCluster starts masters cluster-enabled redis-server processes, assigns
// the 16384 slots evenly, joins them and waits for cluster_state:ok on every
// node.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	return StartClusterWith(t, masters)
}

// StartClusterWith is StartCluster with extra redis-server arguments for
// every node, the replicas AddReplicas adds included, and every restart:
// e.g. "--appendonly", "yes" for masters that persist what they
// acknowledged.
func StartClusterWith(t testing.TB, masters int, args ...string) *Cluster {
	t.Helper()
	if masters < 1 {
		t.Fatalf("StartCluster: masters must be >= 1, got %d", masters)
	}
	c := &Cluster{t: t, args: slices.Clone(args)}
	for i := 0; i < masters; i++ {
		c.Nodes = append(c.Nodes, StartRedis(t, RedisOptions{Cluster: true, Args: c.args}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, n := range c.Nodes {
		cl := n.Client()
		lo := i * 16384 / masters
		hi := (i+1)*16384/masters - 1
		if err := cl.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			t.Fatalf("cluster: add slots %d-%d to %s: %v", lo, hi, n.Addr(), err)
		}
		id, err := cl.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatalf("cluster: CLUSTER MYID on %s: %v", n.Addr(), err)
		}
		c.ids = append(c.ids, id)
	}
	first := c.Nodes[0].Client()
	for _, n := range c.Nodes[1:] {
		if err := first.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", n.Port, n.BusPort).Err(); err != nil {
			t.Fatalf("cluster: MEET %s: %v", n.Addr(), err)
		}
	}
	c.WaitOK(ctx)
	return c
}

// Addrs are the masters' host:port, for a ClusterClient.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.Addr())
	}
	return a
}

// Client returns a ClusterClient for the cluster, closed at test end.
func (c *Cluster) Client() *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// NodeID is the cluster node id of Nodes[i].
func (c *Cluster) NodeID(i int) string { return c.ids[i] }

// AddReplicas starts one cluster-enabled node per master and makes it
// that master's replica (CLUSTER REPLICATE), waiting until each has synced.
// The nodes run with cluster-replica-validity-factor 0, so that a replica
// that lagged may still take over when its master dies.
func (c *Cluster) AddReplicas() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first := c.Nodes[0].Client()
	for i := range c.Nodes {
		r := StartRedis(c.t, RedisOptions{Cluster: true, Args: append([]string{"--cluster-replica-validity-factor", "0"}, c.args...)})
		if err := first.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", r.Port, r.BusPort).Err(); err != nil {
			c.t.Fatalf("cluster: MEET %s: %v", r.Addr(), err)
		}
		rc := r.Client()
		for {
			// REPLICATE needs the node to know the master first.
			err := rc.Do(ctx, "CLUSTER", "REPLICATE", c.ids[i]).Err()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				c.t.Fatalf("cluster: %s REPLICATE %s: %v", r.Addr(), c.Nodes[i].Addr(), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Replicas = append(c.Replicas, r)
	}
	for _, r := range c.Replicas {
		for {
			info, err := r.Client().Info(ctx, "replication").Result()
			if err == nil && strings.Contains(info, "master_link_status:up") {
				break
			}
			if ctx.Err() != nil {
				c.t.Fatalf("cluster: replica %s never linked up: %v %s", r.Addr(), err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	c.WaitOK(ctx)
}

// WaitOK waits until every node reports cluster_state:ok and knows every
// node, failing the test at ctx's deadline.
func (c *Cluster) WaitOK(ctx context.Context) {
	c.t.Helper()
	var last string
	all := append(slices.Clone(c.Nodes), c.Replicas...)
	for {
		ok := true
		for _, n := range all {
			cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
			info, err := cl.ClusterInfo(ctx).Result()
			_ = cl.Close()
			if err != nil || !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(all))) {
				ok = false
				last = fmt.Sprintf("%s: %v %s", n.Addr(), err, info)
				break
			}
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("cluster did not reach cluster_state:ok: %s", last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// SlotOwner returns the index of the node that serves slot.
func (c *Cluster) SlotOwner(ctx context.Context, slot int) int {
	c.t.Helper()
	shards, err := c.Nodes[0].Client().ClusterShards(ctx).Result()
	if err != nil {
		c.t.Fatalf("CLUSTER SHARDS: %v", err)
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if int64(slot) < r.Start || int64(slot) > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role != "master" {
					continue
				}
				for i := range c.Nodes {
					if c.ids[i] == n.ID {
						return i
					}
				}
			}
		}
	}
	c.t.Fatalf("no node serves slot %d", slot)
	return -1
}

// BeginSlotMigration marks slot IMPORTING on dst and MIGRATING on src: from now
// on src answers ASK for keys it no longer has, as during a live resharding.
func (c *Cluster) BeginSlotMigration(ctx context.Context, slot, src, dst int) error {
	if err := c.Nodes[dst].Client().Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", c.ids[src]).Err(); err != nil {
		return fmt.Errorf("SETSLOT %d IMPORTING on %s: %w", slot, c.Nodes[dst].Addr(), err)
	}
	if err := c.Nodes[src].Client().Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", c.ids[dst]).Err(); err != nil {
		return fmt.Errorf("SETSLOT %d MIGRATING on %s: %w", slot, c.Nodes[src].Addr(), err)
	}
	return nil
}

// MoveSlotKeys MIGRATEs up to count keys of slot from src to dst and returns
// how many it moved.
func (c *Cluster) MoveSlotKeys(ctx context.Context, slot, src, dst, count int) (int, error) {
	s := c.Nodes[src].Client()
	keys, err := s.ClusterGetKeysInSlot(ctx, slot, count).Result()
	if err != nil {
		return 0, fmt.Errorf("GETKEYSINSLOT %d on %s: %w", slot, c.Nodes[src].Addr(), err)
	}
	if len(keys) == 0 {
		return 0, nil
	}
	args := []any{"MIGRATE", "127.0.0.1", c.Nodes[dst].Port, "", 0, 5000, "KEYS"}
	for _, k := range keys {
		args = append(args, k)
	}
	if err := s.Do(ctx, args...).Err(); err != nil {
		return 0, fmt.Errorf("MIGRATE %d keys of slot %d to %s: %w", len(keys), slot, c.Nodes[dst].Addr(), err)
	}
	return len(keys), nil
}

// FinishSlotMigration assigns slot to dst on every node, ending a migration.
func (c *Cluster) FinishSlotMigration(ctx context.Context, slot, dst int) error {
	for _, n := range c.Nodes {
		if err := n.Client().Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", c.ids[dst]).Err(); err != nil {
			return fmt.Errorf("SETSLOT %d NODE on %s: %w", slot, n.Addr(), err)
		}
	}
	return nil
}
