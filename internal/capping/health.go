package capping

// Whether Redis can decide, as the engine sees it (Engine.Ready, for
// /readyz): not from the first failed attempt on, until calls to the master
// that failed (whichever node holds its slots by then) succeed again, or the
// clock check reaches every master. An attempt fails when a connection to a
// node cannot be made (seen at once, through a go-redis dial hook, not after
// go-redis' own retries), when a call fails, or when a call has waited longer
// than StallAfter (a node that accepts connections but does not answer: a
// paused or overloaded server).
//
// Failures are kept per master because a round that reaches only the
// healthy masters says nothing of the one that failed: with one master
// unable to decide (its replica stopped, under wait_replicas), the worker
// stays unready while other users' intents keep being decided.

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

type health struct {
	mu sync.Mutex
	// err: the first failure no master is known for (a failed dial) since a
	// round of calls last succeeded; nil: none. errAt: when it was seen.
	err   error
	errAt time.Time
	// nodes: by master address, the first failure of calls to it since
	// they last succeeded.
	nodes map[string]nodeFailure
	// inflight: the start of each group of calls waiting for Redis.
	inflight map[uint64]time.Time
	seq      uint64
	stall    time.Duration // 0: a slow call alone is not a failure
}

func newHealth(stall time.Duration) *health {
	return &health{inflight: map[uint64]time.Time{}, nodes: map[string]nodeFailure{}, stall: stall}
}

// nodeFailure is a master's first failed call since its calls last
// succeeded.
type nodeFailure struct {
	err         error
	key         string    // a key whose call failed: its slot is followed through a failover
	since, last time.Time // its first failure, and its latest
}

// callResult is one call of a round, for health: the key it was for and its
// failure (nil: answered).
type callResult struct {
	key string
	err error
}

// settle notes a round's calls, answered at at, by master: a master whose
// calls all succeeded can decide again, one with a failed call cannot.
// Rounds run concurrently and settle in any order, so a success clears only
// a failure answered before it: a round answered before a replica stopped
// must not clear the failure of one answered after. Failures noted earlier
// first follow their key to the master that holds it now (a failover moved
// the slots: the new master must answer before the worker is ready). nodeOf
// names a key's master ("" when unknown). It does nothing when no call
// failed and nothing is noted, so that a healthy round costs no lookup.
func (h *health) settle(at time.Time, results []callResult, nodeOf func(key string) string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.nodes) == 0 && !slices.ContainsFunc(results, func(r callResult) bool { return r.err != nil }) {
		return
	}
	for addr, f := range h.nodes {
		if now := nodeOf(f.key); now != "" && now != addr {
			delete(h.nodes, addr)
			if g, ok := h.nodes[now]; ok {
				// One failure now: it stands until a success after the
				// later, and reports the earlier.
				if g.since.Before(f.since) {
					f.err, f.key, f.since = g.err, g.key, g.since
				}
				f.last = maxTime(f.last, g.last)
			}
			h.nodes[now] = f
		}
	}
	failed := map[string]callResult{}
	answered := map[string]bool{}
	for _, r := range results {
		addr := nodeOf(r.key)
		if r.err == nil {
			answered[addr] = true
		} else if _, ok := failed[addr]; !ok {
			failed[addr] = r
		}
	}
	for addr := range answered {
		if _, ok := failed[addr]; !ok && h.nodes[addr].last.Before(at) {
			delete(h.nodes, addr)
		}
	}
	for addr, r := range failed {
		f, ok := h.nodes[addr]
		if !ok {
			f = nodeFailure{err: r.err, key: r.key, since: at, last: at}
		}
		if at.Before(f.since) {
			f.since = at
		}
		if at.After(f.last) {
			f.last = at
		}
		h.nodes[addr] = f
	}
}

// fail notes a failed attempt; the first one since the last success is
// the one reported.
func (h *health) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		h.err = err
	}
	h.errAt = time.Now()
}

// answered notes that Redis answered every call of a round, the last at
// at: the failures no master is known for, seen before then, are over
// (those of masters the round did not reach are not).
func (h *health) answered(at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.errAt.Before(at) {
		h.err = nil
	}
}

// ok notes that every master answered (and, under wait_replicas, had its
// replicas acknowledging) as of asOf: what failed before then is over. A
// failure since is not: INFO replication's lag is in whole seconds, so a
// replica stopped within the last second still looks fine to the check.
func (h *health) ok(asOf time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.errAt.Before(asOf) {
		h.err = nil
	}
	for addr, f := range h.nodes {
		if f.last.Before(asOf) {
			delete(h.nodes, addr)
		}
	}
}

// begin notes calls sent now; the function returned notes their answers
// in (or their failure).
func (h *health) begin() func() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	id := h.seq
	h.inflight[id] = time.Now()
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.inflight, id)
	}
}

// ready is nil when Redis can decide.
func (h *health) ready() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return fmt.Errorf("redis cannot decide: %w", h.err)
	}
	var first *nodeFailure
	for _, f := range h.nodes {
		if first == nil || f.since.Before(first.since) {
			first = &f
		}
	}
	if first != nil {
		return fmt.Errorf("redis cannot decide: %w", first.err)
	}
	if h.stall > 0 {
		for _, t := range h.inflight {
			if d := time.Since(t); d > h.stall {
				return fmt.Errorf("redis cannot decide: calls have waited %s for an answer", d.Round(time.Millisecond))
			}
		}
	}
	return nil
}

// hook reports every failed dial to h, as it happens.
type healthHook struct{ h *health }

func (k healthHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil && ctx.Err() == nil {
			k.h.fail(fmt.Errorf("connect to %s: %w", addr, err))
		}
		return c, err
	}
}

func (healthHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (healthHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// watch installs h's dial hook on the client, and on every cluster node
// it connects to from now on.
func (h *health) watch(c redis.UniversalClient) {
	switch c := c.(type) {
	case *redis.ClusterClient:
		c.OnNewNode(func(n *redis.Client) { n.AddHook(healthHook{h}) })
	case *redis.Client:
		c.AddHook(healthHook{h})
	}
}

// Ready reports whether Redis can decide: an error from the first failed
// attempt (a node out of reach, a call that failed or has waited past
// Options.StallAfter) until calls to that master succeed again or the clock
// check reaches every master. It never names a user or an intent.
func (e *Engine) Ready() error { return e.health.ready() }

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
