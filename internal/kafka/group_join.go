package kafka

// Joining a generation: JoinGroup with what the member reads and owns,
// the leader's assignment, SyncGroup; and the requests' way to the
// coordinator.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/describegroups"
	"github.com/segmentio/kafka-go/protocol/findcoordinator"
	"github.com/segmentio/kafka-go/protocol/joingroup"
	"github.com/segmentio/kafka-go/protocol/syncgroup"
)

// join sends JoinGroup until the coordinator answers a generation (a
// dynamic member's first join is answered with its member id, then sent
// again). Under the eager protocol every claim is revoked first.
func (g *Group) join(ctx context.Context, first bool) (*joingroup.Response, error) {
	if p := g.protocolOf(); p.Name != "" && !p.Cooperative {
		gone := g.revokeAll(true)
		g.changed(nil, gone, false)
	}
	var owned []TopicPartition
	if first && g.o.InstanceID != "" {
		owned = g.previouslyOwned(ctx)
	} else {
		owned = g.owned()
	}
	for range 3 {
		req, err := g.joinRequest(owned)
		if err != nil {
			return nil, err
		}
		jctx, cancel := context.WithTimeout(ctx, g.o.RebalanceTimeout+10*time.Second)
		res, err := g.roundTrip(jctx, req)
		cancel()
		if err != nil {
			g.forgetCoordinator()
			return nil, fmt.Errorf("join group: %w", err)
		}
		jr := res.(*joingroup.Response)
		err = codeError(jr.ErrorCode)
		switch {
		case errors.Is(err, kafkago.MemberIDRequired):
			g.setMember(jr.MemberID)
			continue
		case errors.Is(err, kafkago.UnknownMemberId):
			g.setMember("")
			return nil, fmt.Errorf("join group: %w", err)
		case errors.Is(err, kafkago.FencedInstanceID):
			return nil, fmt.Errorf("join group: another running member has instance id %q (two workers must never share one): %w", g.o.InstanceID, err)
		case err != nil:
			return nil, fmt.Errorf("join group: %w", err)
		}
		p := slices.IndexFunc(g.o.Protocols, func(p Protocol) bool { return p.Name == jr.ProtocolName })
		if p < 0 {
			return nil, fmt.Errorf("join group: the coordinator chose protocol %q, which this member did not offer", jr.ProtocolName)
		}
		g.mu.Lock()
		g.memberID, g.protocol = jr.MemberID, g.o.Protocols[p]
		g.mu.Unlock()
		return jr, nil
	}
	return nil, errors.New("join group: no member id after three joins")
}

// joinRequest is the member's JoinGroup: a subscription per protocol,
// owned only in the cooperative ones'.
func (g *Group) joinRequest(owned []TopicPartition) (*joingroup.Request, error) {
	g.mu.Lock()
	topics, memberID := slices.Clone(g.topics), g.memberID
	g.mu.Unlock()
	req := &joingroup.Request{GroupID: g.o.GroupID, SessionTimeoutMS: int32(g.o.SessionTimeout.Milliseconds()),
		RebalanceTimeoutMS: int32(g.o.RebalanceTimeout.Milliseconds()), MemberID: memberID,
		GroupInstanceID: g.o.InstanceID, ProtocolType: "consumer"}
	for _, p := range g.o.Protocols {
		s := subscription{topics: topics, userData: p.Assignor.UserData()}
		if p.Cooperative {
			s.owned = owned
		}
		meta, err := encodeSubscription(s, p.Cooperative)
		if err != nil {
			return nil, err
		}
		req.Protocols = append(req.Protocols, joingroup.RequestProtocol{Name: p.Name, Metadata: meta})
	}
	return req, nil
}

// previouslyOwned is what a static member's previous run said it owned in
// its last join, as the coordinator still has it (nil: nothing, or it said
// something else than this run would). Joining again with the same bytes
// lets the coordinator keep the group as it is: no rebalance.
func (g *Group) previouslyOwned(ctx context.Context) []TopicPartition {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := g.roundTrip(ctx, &describegroups.Request{Groups: []string{g.o.GroupID}})
	if err != nil {
		return nil
	}
	for _, gr := range res.(*describegroups.Response).Groups {
		p := slices.IndexFunc(g.o.Protocols, func(p Protocol) bool { return p.Name == gr.ProtocolData })
		if gr.GroupID != g.o.GroupID || p < 0 || !g.o.Protocols[p].Cooperative {
			continue
		}
		for _, m := range gr.Members {
			if m.GroupInstanceID != g.o.InstanceID {
				continue
			}
			s, err := decodeSubscription(m.MemberMetadata)
			g.mu.Lock()
			same := err == nil && slices.Equal(slices.Sorted(slices.Values(s.topics)), slices.Sorted(slices.Values(g.topics))) &&
				string(s.userData) == string(g.o.Protocols[p].Assignor.UserData())
			g.mu.Unlock()
			if same {
				return s.owned
			}
		}
	}
	return nil
}

// sync sends SyncGroup (the leader with every member's assignment) and
// returns this member's.
func (g *Group) sync(ctx context.Context, jr *joingroup.Response) ([]TopicPartition, error) {
	req := &syncgroup.Request{GroupID: g.o.GroupID, GenerationID: jr.GenerationID, MemberID: jr.MemberID,
		GroupInstanceID: g.o.InstanceID, ProtocolType: "consumer", ProtocolName: jr.ProtocolName}
	g.mu.Lock()
	g.leaderParts, g.leaderTopics = nil, nil
	g.mu.Unlock()
	if jr.LeaderID == jr.MemberID && len(jr.Members) > 0 {
		as, err := g.assign(ctx, jr)
		if err != nil {
			return nil, err
		}
		req.Assignments = as
	}
	sctx, cancel := context.WithTimeout(ctx, g.o.RebalanceTimeout+10*time.Second)
	defer cancel()
	res, err := g.roundTrip(sctx, req)
	if err != nil {
		g.forgetCoordinator()
		return nil, fmt.Errorf("sync group: %w", err)
	}
	sr := res.(*syncgroup.Response)
	if err := codeError(sr.ErrorCode); errors.Is(err, kafkago.RebalanceInProgress) {
		return nil, errRejoin
	} else if err != nil {
		return nil, fmt.Errorf("sync group: %w", err)
	}
	return decodeAssignment(sr.Assignments)
}

// assign is the leader's work: every member's assignment, by the chosen
// protocol (cooperative: what moves is held back a round).
func (g *Group) assign(ctx context.Context, jr *joingroup.Response) ([]syncgroup.RequestAssignment, error) {
	p := g.protocolOf()
	members := make([]Member, 0, len(jr.Members))
	topics := map[string]bool{}
	for _, m := range jr.Members {
		s, err := decodeSubscription(m.Metadata)
		if err != nil {
			return nil, fmt.Errorf("member %s: %w", m.MemberID, err)
		}
		members = append(members, Member{ID: m.MemberID, InstanceID: m.GroupInstanceID, Topics: s.topics, UserData: s.userData, Owned: s.owned})
		for _, t := range s.topics {
			topics[t] = true
		}
	}
	names := slices.Sorted(maps.Keys(topics))
	parts, err := g.partitions(ctx, names)
	if err != nil {
		return nil, err
	}
	target := p.Assignor.Assign(members, parts)
	if p.Cooperative {
		target = cooperative(target, members)
	}
	out := make([]syncgroup.RequestAssignment, 0, len(members))
	for _, m := range members {
		b, err := encodeAssignment(target[m.ID])
		if err != nil {
			return nil, err
		}
		out = append(out, syncgroup.RequestAssignment{MemberID: m.ID, Assignment: b})
	}
	g.mu.Lock()
	g.leaderParts, g.leaderTopics = parts, names
	g.mu.Unlock()
	return out, nil
}

// partitions are the partition ids of topics (a topic that does not
// exist has none).
func (g *Group) partitions(ctx context.Context, topics []string) (map[string][]int, error) {
	c := &kafkago.Client{Addr: g.bootstrap, Transport: g.o.Transport}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	md, err := c.Metadata(ctx, &kafkago.MetadataRequest{Topics: topics})
	if err != nil {
		return nil, fmt.Errorf("metadata of %v: %w", topics, err)
	}
	out := map[string][]int{}
	for _, t := range md.Topics {
		if t.Error != nil {
			continue
		}
		for _, p := range t.Partitions {
			out[t.Name] = append(out[t.Name], p.ID)
		}
		slices.Sort(out[t.Name])
	}
	return out, nil
}

func samePartitions(a, b map[string][]int) bool {
	return maps.EqualFunc(a, b, func(x, y []int) bool { return slices.Equal(x, y) })
}

func (g *Group) protocolOf() Protocol {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.protocol
}

func (g *Group) setMember(id string) {
	g.mu.Lock()
	g.memberID = id
	g.mu.Unlock()
}

// roundTrip sends a group request to the coordinator (found once, again
// after a failure).
func (g *Group) roundTrip(ctx context.Context, req protocol.Message) (protocol.Message, error) {
	addr, err := g.coordinator(ctx)
	if err != nil {
		return nil, err
	}
	return g.o.Transport.RoundTrip(ctx, addr, req)
}

func (g *Group) coordinator(ctx context.Context) (net.Addr, error) {
	g.mu.Lock()
	addr := g.coord
	g.mu.Unlock()
	if addr != nil {
		return addr, nil
	}
	res, err := g.o.Transport.RoundTrip(ctx, g.bootstrap, &findcoordinator.Request{Key: g.o.GroupID})
	if err != nil {
		return nil, fmt.Errorf("find the coordinator of group %s: %w", g.o.GroupID, err)
	}
	fc := res.(*findcoordinator.Response)
	if err := codeError(fc.ErrorCode); err != nil {
		return nil, fmt.Errorf("find the coordinator of group %s: %w", g.o.GroupID, err)
	}
	addr = kafkago.TCP(net.JoinHostPort(fc.Host, strconv.Itoa(int(fc.Port))))
	g.mu.Lock()
	g.coord = addr
	g.mu.Unlock()
	return addr, nil
}

func (g *Group) forgetCoordinator() {
	g.mu.Lock()
	g.coord = nil
	g.mu.Unlock()
}

// codeError is a Kafka error code as kafka-go's error (nil: none).
func codeError(code int16) error {
	if code == 0 {
		return nil
	}
	return kafkago.Error(code)
}
