package kafka

// A membership's life: generations one after the other (join, sync, take
// the assignment, heartbeat until the next rebalance), what happens to the
// claims at each step, and leaving.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/capper-dev/capper/internal/retry"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/heartbeat"
	"github.com/segmentio/kafka-go/protocol/leavegroup"
	"github.com/segmentio/kafka-go/protocol/offsetfetch"
)

// How a generation ended.
var (
	errRejoin = errors.New("join again") // a rebalance, or a local change
	errLost   = errors.New("membership lost")
)

// run follows the generations until ctx ends, then leaves.
func (g *Group) run(ctx context.Context) {
	defer close(g.done)
	defer g.finish()
	first, backoff := true, &retry.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}
	for ctx.Err() == nil {
		err := g.generationOnce(ctx, first)
		first = false
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errRejoin):
			backoff.Reset()
			continue
		case errors.Is(err, errLost):
			g.loseAll(err)
		case err != nil:
			g.log.Warn("kafka group: joining failed; retrying", "error", err, "backoff", backoff.Current())
		}
		if backoff.Wait(ctx) != nil {
			return
		}
	}
}

// generationOnce joins, takes the assignment and heartbeats until the
// generation ends (errRejoin, errLost, or the error that stopped it).
func (g *Group) generationOnce(ctx context.Context, first bool) error {
	began := time.Now()
	jr, err := g.join(ctx, first)
	if err != nil {
		return err
	}
	assigned, err := g.sync(ctx, jr)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.generation, g.memberID, g.rebalances = jr.GenerationID, jr.MemberID, g.rebalances+1
	g.mu.Unlock()
	revoked := g.apply(ctx, assigned)
	g.m.rebalanced(time.Since(began))
	if len(revoked) > 0 && g.protocolOf().Cooperative {
		return errRejoin // the next round assigns what was given up
	}
	return g.heartbeat(ctx)
}

// heartbeat keeps the generation alive until a rebalance (errRejoin), the
// loss of the membership (errLost), or ctx's end.
func (g *Group) heartbeat(ctx context.Context) error {
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watched := make(chan struct{})
	if g.o.Watch != nil {
		go func() { g.o.Watch(gctx); close(watched) }()
	}
	partitions := g.watchPartitions(gctx)
	t := time.NewTicker(g.o.HeartbeatInterval)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-g.rejoin:
			return errRejoin
		case <-watched:
			return errRejoin
		case <-partitions:
			return errRejoin
		case <-t.C:
		}
		err := g.beat(ctx)
		switch {
		case err == nil:
			lastOK = time.Now()
		case errors.Is(err, kafkago.RebalanceInProgress):
			return errRejoin
		case errors.Is(err, kafkago.UnknownMemberId), errors.Is(err, kafkago.IllegalGeneration), errors.Is(err, kafkago.FencedInstanceID):
			return fmt.Errorf("%w: %w", errLost, err)
		case time.Since(lastOK) > g.o.SessionTimeout:
			return fmt.Errorf("%w: no heartbeat answered for the session timeout: %w", errLost, err)
		default:
			g.forgetCoordinator()
			g.log.Debug("kafka group: heartbeat failed; trying again", "error", err)
		}
	}
}

func (g *Group) beat(ctx context.Context) error {
	g.mu.Lock()
	req := &heartbeat.Request{GroupID: g.o.GroupID, GenerationID: g.generation, MemberID: g.memberID, GroupInstanceID: g.o.InstanceID}
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, g.o.SessionTimeout)
	defer cancel()
	res, err := g.roundTrip(ctx, req)
	if err != nil {
		return err
	}
	r := res.(*heartbeat.Response)
	return codeError(swappedCode(r.ErrorCode, r.ThrottleTimeMs))
}

// swappedCode is the error code of a Heartbeat or LeaveGroup response as
// kafka-go v0.4 decodes it: its structs put error_code before
// throttle_time_ms, which versions 1 and up send the other way round, so
// the code lands in the throttle's low bytes (and the "error code" holds
// the throttle's high bytes, 0). TestHeartbeatErrors pins it: a kafka-go
// that decodes them right passes through the first branch.
func swappedCode(code int16, throttle int32) int16 {
	if code != 0 {
		return code
	}
	return int16(throttle & 0xffff)
}

// apply takes a generation's assignment: claims the member no longer has
// are revoked (their readers stop, what they handed out is committed
// first), new ones start. It returns what was revoked.
func (g *Group) apply(ctx context.Context, assigned []TopicPartition) []TopicPartition {
	g.mu.Lock()
	var revoked []*Claim
	var gone []TopicPartition
	for tp, c := range g.claims {
		if !slices.Contains(assigned, tp) {
			revoked, gone = append(revoked, c), append(gone, tp)
		}
	}
	var added []TopicPartition
	for _, tp := range assigned {
		if g.claims[tp] == nil {
			added = append(added, tp)
		}
	}
	g.mu.Unlock()
	g.revoke(revoked, true)
	if err := g.start(ctx, added); err != nil {
		g.log.Warn("kafka group: reading the committed offsets failed; joining again", "error", err)
		g.askRejoin()
	}
	g.changed(added, gone, false)
	return gone
}

// changed logs and counts a change of what the member owns: it gained
// added and gave up gone (lost: without a commit).
func (g *Group) changed(added, gone []TopicPartition, lost bool) {
	owned := g.owned()
	if lost {
		g.m.lost(len(gone))
		g.m.owned(len(owned), len(added), 0)
	} else {
		g.m.owned(len(owned), len(added), len(gone))
	}
	if len(added)+len(gone) > 0 {
		slices.SortFunc(added, comparePartitions)
		slices.SortFunc(gone, comparePartitions)
		g.mu.Lock()
		gen, proto := g.generation, g.protocol.Name
		g.mu.Unlock()
		g.log.Info("kafka group: partitions changed", "generation", gen, "protocol", proto,
			"assigned", fmt.Sprint(added), "revoked", fmt.Sprint(gone), "owned", len(owned))
	}
	if g.o.Changed != nil {
		g.o.Changed(owned)
	}
}

func (g *Group) owned() []TopicPartition {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]TopicPartition, 0, len(g.claims))
	for tp := range g.claims {
		out = append(out, tp)
	}
	slices.SortFunc(out, comparePartitions)
	return out
}

// revoke ends claims, in parallel: each reader stops, then (drain) waits
// until what it handed out is committed, for at most half the rebalance
// timeout (past it, the next owner reads those records again).
func (g *Group) revoke(claims []*Claim, drain bool) {
	var wg sync.WaitGroup
	deadline := time.Now().Add(g.o.RebalanceTimeout / 2)
	for _, c := range claims {
		wg.Go(func() {
			c.stop()
			if drain {
				c.drain(deadline, func() bool { return !g.closed() }, g.recommit)
			}
			g.mu.Lock()
			if g.claims[c.TopicPartition] == c {
				delete(g.claims, c.TopicPartition)
			}
			g.mu.Unlock()
		})
	}
	wg.Wait()
}

// revokeAll revokes every claim (the eager protocol, before it joins).
func (g *Group) revokeAll(drain bool) []TopicPartition {
	g.mu.Lock()
	claims := make([]*Claim, 0, len(g.claims))
	var gone []TopicPartition
	for tp, c := range g.claims {
		claims, gone = append(claims, c), append(gone, tp)
	}
	g.mu.Unlock()
	g.revoke(claims, drain)
	return gone
}

// loseAll ends every claim without waiting for commits: the membership is
// gone, and the coordinator refuses this member's commits.
func (g *Group) loseAll(why error) {
	gone := g.revokeAll(false)
	g.mu.Lock()
	if !errors.Is(why, kafkago.FencedInstanceID) {
		g.memberID = ""
	}
	g.generation = -1
	g.mu.Unlock()
	if len(gone) > 0 {
		g.log.Warn("kafka group: membership lost; partitions given up without a commit (the next owner reads what was not committed again)",
			"partitions", len(gone), "error", why)
	}
	g.changed(nil, gone, true)
}

// start claims added: their committed offsets, then a reader each.
func (g *Group) start(ctx context.Context, added []TopicPartition) error {
	if len(added) == 0 {
		return nil
	}
	offsets, err := g.committed(ctx, added)
	if err != nil {
		return err
	}
	held := make(chan struct{})
	if g.o.Hold != nil {
		go func() { defer close(held); g.o.Hold(ctx) }()
	} else {
		close(held)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, tp := range added {
		c := newClaim(tp)
		rctx, cancel := context.WithCancel(ctx)
		c.cancel = cancel
		g.claims[tp] = c
		off, ok := offsets[tp]
		if !ok || off < 0 {
			off = g.o.StartOffset
		}
		go func() {
			defer close(c.done)
			select {
			case <-held:
				g.o.Read(rctx, c, off)
			case <-rctx.Done():
			}
		}()
	}
	return nil
}

// committed fetches the group's committed offsets of tps (-1: none).
func (g *Group) committed(ctx context.Context, tps []TopicPartition) (map[TopicPartition]int64, error) {
	req := &offsetfetch.Request{GroupID: g.o.GroupID}
	for _, t := range groupByTopic(tps) {
		req.Topics = append(req.Topics, offsetfetch.RequestTopic{Name: t.Topic, PartitionIndexes: t.Partitions})
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := g.roundTrip(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("offset fetch: %w", err)
	}
	r := res.(*offsetfetch.Response)
	if err := codeError(r.ErrorCode); err != nil {
		return nil, fmt.Errorf("offset fetch: %w", err)
	}
	out := map[TopicPartition]int64{}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if err := codeError(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("offset fetch %s/%d: %w", t.Name, p.PartitionIndex, err)
			}
			out[TopicPartition{t.Name, int(p.PartitionIndex)}] = p.CommittedOffset
		}
	}
	return out, nil
}

// finish ends the membership: every claim (the worker stopped: nothing
// more will be committed), then the group unless static.
func (g *Group) finish() {
	g.recommit()
	g.revokeAll(false)
	g.commitMu.Lock()
	g.closeCommits()
	g.commitMu.Unlock()
	g.mu.Lock()
	leave := g.memberID != "" && (g.o.InstanceID == "" || g.o.LeaveOnClose || g.leave)
	req := &leavegroup.Request{GroupID: g.o.GroupID, Members: []leavegroup.RequestMember{{MemberID: g.memberID, GroupInstanceID: g.o.InstanceID}}}
	g.mu.Unlock()
	g.m.owned(0, 0, 0)
	if !leave {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := g.roundTrip(ctx, req)
	if err == nil {
		r := res.(*leavegroup.Response)
		err = codeError(swappedCode(r.ErrorCode, r.ThrottleTimeMS))
	}
	if err != nil {
		g.log.Warn("kafka group: leaving failed (the coordinator drops this member after the session timeout)", "error", err)
	}
}

// watchPartitions (the leader) is closed when a topic the group reads
// gains partitions: the next generation assigns them.
func (g *Group) watchPartitions(ctx context.Context) <-chan struct{} {
	out := make(chan struct{})
	g.mu.Lock()
	leader, topics := g.leaderParts != nil, slices.Clone(g.leaderTopics)
	known := g.leaderParts
	g.mu.Unlock()
	if !leader {
		return out
	}
	go func() {
		t := time.NewTicker(partitionWatch)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			parts, err := g.partitions(ctx, topics)
			if err == nil && !samePartitions(parts, known) {
				close(out)
				return
			}
		}
	}()
	return out
}

// partitionWatch is how often the leader looks for new partitions.
const partitionWatch = 5 * time.Second
