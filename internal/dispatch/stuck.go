package dispatch

// A stuck worker gives its partitions up. A decision loop that hangs (a
// deadlock, a call that never returns) keeps its process heartbeating, so
// its group keeps its partitions with it forever. The worker notes each
// step of its loops (a fetch's records, an attempt at Redis, an attempt at
// a write, a commit); one that has records in hand and takes no step for
// Options.StuckTimeout leaves its groups (the others read its partitions
// at once), answers /readyz and /healthz with why, and logs it. A Redis or
// Kafka outage is not a hang: each retry is a step.

import (
	"context"
	"fmt"
	"time"
)

// leaver is a Reader that can leave its groups (*Consumer).
type leaver interface{ Leave(why string) }

// step notes that the worker's loops moved.
func (w *Worker) step() { w.progress.Store(time.Now().UnixNano()) }

// holding notes that a stage took (+1) or finished (-1) a batch.
func (w *Worker) holding(n int32) {
	w.busy.Add(n)
	w.step()
}

// watchStuck runs until ctx ends, leaving the groups once the worker has
// records in hand and took no step for StuckTimeout.
func (w *Worker) watchStuck(ctx context.Context) {
	limit := w.o.StuckTimeout
	if limit <= 0 {
		return
	}
	t := time.NewTicker(min(limit/4, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		idle := time.Since(time.Unix(0, w.progress.Load()))
		if w.busy.Load() == 0 || idle < limit {
			continue
		}
		w.setNotReady("stuck", fmt.Errorf("stuck: the decision loop has held records for %s without a step (worker.stuck_timeout %s); it left its consumer groups, restart it", idle.Round(time.Second), limit))
		err := w.Ready()
		w.stuck.Store(&err)
		w.o.Logger.Error("worker stuck: leaving the consumer groups so that the other workers read its partitions", "held_for", idle.Round(time.Second), "stuck_timeout", limit)
		if l, ok := w.o.Reader.(leaver); ok {
			l.Leave(err.Error())
		}
		return
	}
}

// Live reports whether the worker is alive (for /healthz): an error once
// it was found stuck.
func (w *Worker) Live() error {
	if err := w.stuck.Load(); err != nil {
		return *err
	}
	return nil
}
