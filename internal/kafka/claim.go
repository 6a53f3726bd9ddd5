package kafka

// A claim: one partition for as long as this member owns it, and the
// offsets its reader handed out and the worker committed. A claim that is
// revoked first stops its reader, then waits until what was handed out is
// committed (or half the rebalance timeout), so that a partition moves to
// another member with nothing decided and uncommitted behind it.

import (
	"context"
	"sync/atomic"
	"time"
)

// Claim is one owned partition. Its reader (GroupOptions.Read) sets Start
// before it hands anything out, and Handed as it does; Group.Commit sets
// Committed.
type Claim struct {
	TopicPartition
	// Start is the offset committed when this member took the partition
	// (resolved from the log's bounds when none was); -1 until then.
	Start atomic.Int64
	// Handed: the offset after the last record handed to the worker;
	// Asked: after the last the worker asked to commit; Committed: after
	// the last this member committed (0: none). Asked > Committed: a
	// commit failed (a rebalance began meanwhile); the next commit of any
	// partition, a revocation and the group's close commit it again.
	Handed, Asked, Committed atomic.Int64
	// Closed: the claim ended (revoked, lost, or the group closed); its
	// reader's queued records are dropped.
	Closed atomic.Bool
	// ParkUntil: the parked topic's reader hands every record below it
	// over; only that reader uses it.
	ParkUntil int64

	cancel context.CancelFunc
	done   chan struct{} // closed when the reader returned
}

func newClaim(tp TopicPartition) *Claim {
	c := &Claim{TopicPartition: tp, done: make(chan struct{})}
	c.Start.Store(-1)
	return c
}

// stop ends the claim's reader and waits for it.
func (c *Claim) stop() {
	c.Closed.Store(true)
	if c.cancel != nil {
		c.cancel()
	}
	<-c.done
}

// drain waits until what the claim handed out is committed, until
// deadline or while wait says so (false: the worker stopped, nothing will
// be committed any more). What the worker asked to commit and a failed
// commit left behind is committed again (recommit), every 100 ms at most.
func (c *Claim) drain(deadline time.Time, wait func() bool, recommit func()) {
	var last time.Time
	for c.Committed.Load() < c.Handed.Load() && time.Now().Before(deadline) && wait() {
		if c.behind() && time.Since(last) >= 100*time.Millisecond {
			recommit()
			last = time.Now()
			continue
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// behind reports whether the worker asked to commit more than was
// committed (a commit failed).
func (c *Claim) behind() bool { return c.Asked.Load() > c.Committed.Load() }
