package kafka

// Removing static members on their behalf: a static member that stops does
// not leave its group (its restart gets its partitions back), so one that
// is gone for good (scaled down) keeps its partitions until its session
// times out, unless it is removed (KIP-345's removal by instance id).

import (
	"context"
	"errors"
	"fmt"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/describegroups"
	"github.com/segmentio/kafka-go/protocol/leavegroup"
)

// RemoveMembers removes the static members of group with the given
// instance ids (LeaveGroup on their behalf): their partitions go to the
// other members at once. It returns, per instance id, nil (removed),
// ErrNotMember (no member has it), or why it failed; err is the request's.
func RemoveMembers(ctx context.Context, transport kafkago.RoundTripper, brokers []string, group string, instanceIDs []string) (map[string]error, error) {
	g := &Group{o: GroupOptions{Transport: transport, GroupID: group}, bootstrap: kafkago.TCP(brokers...)}
	req := &leavegroup.Request{GroupID: group}
	for _, id := range instanceIDs {
		req.Members = append(req.Members, leavegroup.RequestMember{GroupInstanceID: id})
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := g.roundTrip(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("remove members of group %s: %w", group, err)
	}
	r := res.(*leavegroup.Response)
	if err := codeError(swappedCode(r.ErrorCode, r.ThrottleTimeMS)); err != nil && len(r.Members) == 0 {
		return nil, fmt.Errorf("remove members of group %s: %w", group, err)
	}
	out := map[string]error{}
	for _, id := range instanceIDs {
		out[id] = ErrNotMember
	}
	for _, m := range r.Members {
		switch err := codeError(m.ErrorCode); {
		case err == nil:
			out[m.GroupInstanceID] = nil
		case errors.Is(err, kafkago.UnknownMemberId):
		default:
			out[m.GroupInstanceID] = err
		}
	}
	return out, nil
}

// ErrNotMember: no member of the group has the instance id.
var ErrNotMember = errors.New("no member has this instance id")

// Owners is who owns each partition of group now, by instance id (the
// member id for a dynamic member), as its coordinator describes it.
func Owners(ctx context.Context, transport kafkago.RoundTripper, brokers []string, group string) (map[TopicPartition]string, error) {
	g := &Group{o: GroupOptions{Transport: transport, GroupID: group}, bootstrap: kafkago.TCP(brokers...)}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := g.roundTrip(ctx, &describegroups.Request{Groups: []string{group}})
	if err != nil {
		return nil, fmt.Errorf("describe group %s: %w", group, err)
	}
	out := map[TopicPartition]string{}
	for _, gr := range res.(*describegroups.Response).Groups {
		if err := codeError(gr.ErrorCode); err != nil {
			return nil, fmt.Errorf("describe group %s: %w", group, err)
		}
		for _, m := range gr.Members {
			tps, err := decodeAssignment(m.MemberAssignment)
			if err != nil {
				return nil, fmt.Errorf("describe group %s: member %s: %w", group, m.MemberID, err)
			}
			who := m.GroupInstanceID
			if who == "" {
				who = m.MemberID
			}
			for _, tp := range tps {
				out[tp] = who
			}
		}
	}
	return out, nil
}
