package capping

// Whether Redis can decide, as the engine sees it (Engine.Ready, for
// /readyz): not from the first failed attempt on, until a round of calls
// succeeds again. An attempt fails when a connection to a node cannot be
// made (seen at once, through a go-redis dial hook, not after go-redis'
// own retries), when a call fails, or when a call has waited longer than
// StallAfter (a node that accepts connections but does not answer: a
// paused or overloaded server).

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

type health struct {
	mu  sync.Mutex
	err error // the first failure since the last success; nil: fine
	// inflight: the start of each group of calls waiting for Redis.
	inflight map[uint64]time.Time
	seq      uint64
	stall    time.Duration // 0: a slow call alone is not a failure
}

func newHealth(stall time.Duration) *health {
	return &health{inflight: map[uint64]time.Time{}, stall: stall}
}

// fail notes a failed attempt; the first one since the last success is
// the one reported.
func (h *health) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		h.err = err
	}
}

// ok notes that Redis answered every call of a round.
func (h *health) ok() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.err = nil
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
// Options.StallAfter) until a round of calls succeeds again or the clock
// check reaches every master. It never names a user or an intent.
func (e *Engine) Ready() error { return e.health.ready() }
