package capping

// Replication before an answer counts: with Options.WaitReplicas, an allowed
// or duplicate answer is returned only once replicas of the master that gave
// it acknowledged the writes behind it, so that a failover cannot lose a
// send that was already forwarded.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// errNotReplicated fails an answer whose writes the replicas did not
// acknowledge in time; the caller decides the intent again later (it is
// then a duplicate, or decided afresh if a failover lost it).
type errNotReplicated struct {
	master      string // the address of the master that ran the calls
	acked, want int64
	timeout     time.Duration
}

func (e errNotReplicated) Error() string {
	return fmt.Sprintf("not replicated: WAIT on %s saw %d of %d replicas acknowledge within %s", e.master, e.acked, e.want, e.timeout)
}

// sendDurable sends each master its calls in one pipeline that ends with a
// small write (a short-lived key in the slot of one of its users) and WAIT.
// WAIT counts the writes of its own connection, and a pipeline is one
// connection to one server, so the WAIT is about the very server that ran
// the scripts (not one a failover client or a cluster redirect would reach
// later); and since the replication stream is ordered, a replica that
// acknowledged the small write has every earlier one, the scripts' and those
// a duplicate answer rests on. Masters are sent to in parallel.
func (e *Engine) sendDurable(ctx context.Context, set *policySet, reqs []Request, calls []*call, eval bool) {
	type group struct {
		node  *redis.Client
		calls []*call
	}
	var groups []*group
	byNode := map[*redis.Client]*group{}
	for _, c := range calls {
		node, err := e.masterFor(ctx, c.key)
		if err != nil {
			c.cmd = redis.NewCmd(ctx)
			c.cmd.SetErr(fmt.Errorf("find the master: %w", err))
			continue
		}
		g := byNode[node]
		if g == nil {
			g = &group{node: node}
			byNode[node] = g
			groups = append(groups, g)
		}
		g.calls = append(g.calls, c)
	}
	var wg sync.WaitGroup
	t0 := time.Now()
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pipe := g.node.Pipeline()
			e.queue(ctx, set, reqs, pipe, g.calls, eval)
			pipe.Set(ctx, g.calls[0].key+":w", "1", 10*time.Second) // same hash tag, same slot
			wait := pipe.Do(ctx, "wait", e.waitReplicas, e.waitTimeout.Milliseconds())
			_, _ = pipe.Exec(ctx) // errors are per command
			acked, err := wait.Int64()
			if err == nil && acked < int64(e.waitReplicas) {
				err = errNotReplicated{g.node.Options().Addr, acked, int64(e.waitReplicas), e.waitTimeout}
			}
			if err != nil {
				e.m.waitFailures.Inc()
				for _, c := range g.calls {
					c.notReplicated = err
				}
			}
		}()
	}
	wg.Wait()
	e.m.waitDuration.Observe(time.Since(t0).Seconds())
	// A node's own client does not follow redirections: let the cluster
	// client learn the new slot owners before the re-send.
	if cc, ok := e.client.(*redis.ClusterClient); ok {
		for _, c := range calls {
			if err := c.cmd.Err(); redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") {
				cc.ReloadState(ctx)
				break
			}
		}
	}
}

// masterFor is the client of the master that serves key: a cluster node's
// own client, or the (single or failover) client itself.
func (e *Engine) masterFor(ctx context.Context, key string) (*redis.Client, error) {
	switch c := e.client.(type) {
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case *redis.Client:
		return c, nil
	}
	return nil, fmt.Errorf("unsupported client %T", e.client)
}
