package capping

// The clock check: each Redis master's skew against this process.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// CheckClock compares the local clock (Options.Now) with the TIME of every
// master once and returns skew = master time - local time at the middle of
// the round trip, by master address. It updates
// capper_redis_clock_skew_seconds and warns above Options.SkewWarn.
//
// Decisions use the caller's clock, so a skew between workers shifts window
// edges by as much; the skew of each master against this worker bounds it.
func (e *Engine) CheckClock(ctx context.Context) (map[string]time.Duration, error) {
	var mu sync.Mutex
	skews := map[string]time.Duration{}
	measure := func(ctx context.Context, node *redis.Client) error {
		addr := node.Options().Addr
		if addr == "FailoverClient" { // sentinel: the client resolves the master itself
			ci, err := node.ClientInfo(ctx).Result()
			if err != nil {
				return fmt.Errorf("client info: %w", err)
			}
			addr = ci.LAddr
		}
		t0 := e.now()
		tm, err := node.Time(ctx).Result()
		t1 := e.now()
		if err != nil {
			return fmt.Errorf("TIME on %s: %w", addr, err)
		}
		skew := tm.Sub(t0.Add(t1.Sub(t0) / 2))
		if e.waitReplicas > 0 {
			// With wait_replicas, Redis can decide only while enough
			// replicas acknowledge: the check must not call it back
			// while one is stopped.
			if err := e.checkReplicas(ctx, node, addr); err != nil {
				return err
			}
		}
		mu.Lock()
		skews[addr] = skew
		mu.Unlock()
		return nil
	}
	err := e.forEachMaster(ctx, measure)
	for addr, skew := range skews {
		e.m.skew.WithLabelValues(addr).Set(skew.Seconds())
		if skew > e.skewWarn || skew < -e.skewWarn {
			e.log.Warn("redis clock skew above threshold", "node", addr, "skew", skew, "threshold", e.skewWarn)
		}
	}
	if err != nil {
		return skews, fmt.Errorf("check redis clocks: %w", err)
	}
	return skews, nil
}

// RunClockCheck runs CheckClock every Options.SkewInterval, at once first,
// until ctx ends; then it returns nil. A failed check is logged, not fatal.
// The gauge of a master that is gone is removed.
func (e *Engine) RunClockCheck(ctx context.Context) error {
	seen := map[string]bool{}
	t := time.NewTicker(e.skewEvery)
	defer t.Stop()
	for {
		// A replica's acknowledgement lags by up to a second in INFO
		// replication: the check speaks for what failed before that.
		asOf := time.Now().Add(-replicaAckLag)
		skews, err := e.CheckClock(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			e.log.Warn("redis clock check failed", "err", err)
		} else {
			// Every master answered: Redis is back for a worker with no
			// traffic to tell it (Ready).
			e.health.ok(asOf)
			for addr := range seen {
				if _, ok := skews[addr]; !ok {
					e.m.skew.DeleteLabelValues(addr)
					delete(seen, addr)
				}
			}
			for addr := range skews {
				seen[addr] = true
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// forEachMaster runs fn on every master: each node of a cluster, or the
// client itself (single, or the master a failover client follows).
func (e *Engine) forEachMaster(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	switch c := e.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	case *redis.Ring:
		return c.ForEachShard(ctx, fn)
	}
	return fmt.Errorf("unsupported client %T", e.client)
}

// checkReplicas fails when fewer than Options.WaitReplicas replicas of the
// master are online and acknowledged its stream within the last second
// (INFO replication: a replica acknowledges every second; a stopped one's
// lag grows).
func (e *Engine) checkReplicas(ctx context.Context, node *redis.Client, addr string) error {
	info, err := node.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("INFO replication on %s: %w", addr, err)
	}
	if n := ackingReplicas(info); n < e.waitReplicas {
		return fmt.Errorf("%s: %d replicas acknowledging, wait_replicas needs %d", addr, n, e.waitReplicas)
	}
	return nil
}

// replicaAckLag is how stale INFO replication's view of a replica can be:
// replicas acknowledge every second, and the lag is in whole seconds.
const replicaAckLag = 2 * time.Second

// ackingReplicas counts the replicas online with a lag of at most 1 s in
// the text of INFO replication.
func ackingReplicas(info string) int {
	n := 0
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "slave") || !strings.Contains(line, ":ip=") {
			continue
		}
		online, lag := false, -1
		for _, kv := range strings.Split(line[strings.IndexByte(line, ':')+1:], ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "state":
				online = v == "online"
			case "lag":
				lag, _ = strconv.Atoi(v)
			}
		}
		if online && lag >= 0 && lag <= 1 {
			n++
		}
	}
	return n
}
