package kafka

// Committing offsets: only of partitions this member owns, each past what
// it committed, in the generation the coordinator knows it by (a commit of
// a generation that ended is refused by the coordinator, never applied
// late).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/offsetcommit"
)

// Commit commits offsets (the next offset to read, per partition), and
// again what an earlier commit of a partition this member still owns
// failed to (a generation that ended meanwhile refuses it, and the worker
// does not retry: without this, a partition whose last batch's commit
// failed would be read again by its next owner). Those of partitions the
// member no longer owns are left to their new owner, and an error names
// them. Commits are sent one at a time (commitMu): a call that waited
// finds what the one before it committed, and sends nothing more of it.
func (g *Group) Commit(ctx context.Context, offsets map[TopicPartition]int64) error {
	type pending struct {
		c   *Claim
		off int64
	}
	var todo []pending
	var moved []string
	g.commitMu.Lock()
	defer g.commitMu.Unlock()
	g.mu.Lock()
	for tp, off := range offsets {
		c := g.claims[tp]
		if c == nil {
			moved = append(moved, fmt.Sprintf("%s/%d", tp.Topic, tp.Partition))
			continue
		}
		if off > c.Asked.Load() { // written only here, under commitMu
			c.Asked.Store(off)
		}
	}
	for _, c := range g.claims {
		if c.behind() {
			todo = append(todo, pending{c, c.Asked.Load()})
		}
	}
	req := &offsetcommit.Request{GroupID: g.o.GroupID, GenerationID: g.generation, MemberID: g.memberID, GroupInstanceID: g.o.InstanceID}
	g.mu.Unlock()
	var errs []error
	if len(moved) > 0 {
		slices.Sort(moved)
		errs = append(errs, fmt.Errorf("partitions %v of group %s moved to another member: their new owner reads them again", moved, g.o.GroupID))
	}
	if len(todo) == 0 {
		return errors.Join(errs...)
	}
	slices.SortFunc(todo, func(a, b pending) int { return comparePartitions(a.c.TopicPartition, b.c.TopicPartition) })
	for _, p := range todo {
		if n := len(req.Topics); n == 0 || req.Topics[n-1].Name != p.c.Topic {
			req.Topics = append(req.Topics, offsetcommit.RequestTopic{Name: p.c.Topic})
		}
		t := &req.Topics[len(req.Topics)-1]
		t.Partitions = append(t.Partitions, offsetcommit.RequestPartition{PartitionIndex: int32(p.c.Partition), CommittedOffset: p.off, CommittedLeaderEpoch: -1})
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := g.commitTrip(ctx, req)
	if err != nil {
		g.forgetCoordinator()
		return errors.Join(append(errs, fmt.Errorf("commit to group %s: %w", g.o.GroupID, err))...)
	}
	failed := map[TopicPartition]error{}
	for _, t := range res.(*offsetcommit.Response).Topics {
		for _, p := range t.Partitions {
			if err := codeError(p.ErrorCode); err != nil {
				failed[TopicPartition{t.Name, int(p.PartitionIndex)}] = err
			}
			if movedCoordinator(p.ErrorCode) {
				g.forgetCoordinator() // the next commit asks again
			}
		}
	}
	for _, p := range todo {
		if err := failed[p.c.TopicPartition]; err != nil {
			errs = append(errs, fmt.Errorf("commit %s/%d to group %s: %w", p.c.Topic, p.c.Partition, g.o.GroupID, err))
			continue
		}
		for {
			cur := p.c.Committed.Load()
			if p.off <= cur || p.c.Committed.CompareAndSwap(cur, p.off) {
				break
			}
		}
	}
	return errors.Join(errs...)
}

// commitTrip sends a commit (commitMu held): over the member's own
// connection to its coordinator when it has a Dialer, else through its
// Transport. A failed connection is closed; the next commit dials again.
func (g *Group) commitTrip(ctx context.Context, req *offsetcommit.Request) (protocol.Message, error) {
	if g.o.Dialer == nil {
		return g.roundTrip(ctx, req)
	}
	addr, err := g.coordinator(ctx)
	if err != nil {
		return nil, err
	}
	if g.cc != nil && g.cc.addr != addr.String() {
		g.closeCommits()
	}
	if g.cc == nil {
		if g.cc, err = dialCoordinator(ctx, g.o.Dialer, addr.String()); err != nil {
			return nil, err
		}
	}
	res, err := g.cc.roundTrip(ctx, req)
	if err != nil {
		g.closeCommits()
		return nil, err
	}
	if _, ok := res.(*offsetcommit.Response); !ok {
		g.closeCommits()
		return nil, fmt.Errorf("%w: an offset commit answered with %T", errMalformed, res)
	}
	return res, nil
}

// closeCommits closes the commits' connection (commitMu held).
func (g *Group) closeCommits() {
	if g.cc != nil {
		g.cc.close()
		g.cc = nil
	}
}

// movedCoordinator: the broker asked no longer coordinates the group (or
// not yet).
func movedCoordinator(code int16) bool {
	switch kafkago.Error(code) {
	case kafkago.NotCoordinatorForGroup, kafkago.GroupCoordinatorNotAvailable:
		return true
	}
	return false
}

// recommit commits again what earlier commits failed to, of the
// partitions this member still owns (a revocation, the group's close);
// a failure is logged: the next owner reads those records again.
func (g *Group) recommit() {
	g.mu.Lock()
	behind := false
	for _, c := range g.claims {
		behind = behind || c.behind()
	}
	valid := g.memberID != "" && g.generation >= 0
	g.mu.Unlock()
	if !behind || !valid {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Commit(ctx, nil); err != nil {
		g.log.Warn("kafka group: committing again what a failed commit left failed; the next owner reads those records again", "error", err)
	}
}
