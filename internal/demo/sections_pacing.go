package demo

// The send pacing section: its budget in the policy, its users' pushes.

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/pacing"
)

// Send pacing's budget: the members' pushes to FCM (route fcm), at most
// paceRate a second with paceBurst above it, an urgent lane for high
// priorities and a bulk lane for the rest. The rate is low enough that a
// blast of a few thousand pushes waits seconds, high enough that the
// section takes a few seconds of wall time.
const (
	budgetName  = "push-fcm"
	paceChannel = "push"
	paceRoute   = "fcm"
	paceRate    = 200
	paceBurst   = 20
	laneUrgent  = "urgent"
	laneBulk    = "bulk"
	topicLanes  = "capper-lanes" // kafka.topics.lanes: the lanes are capper-lanes.push-fcm.urgent and .bulk
)

// budgetPolicy replaces configs/policy.yaml's budgets (none) in the
// demo's policy file.
var budgetPolicy = fmt.Sprintf(`# capper-demo's send pacing section (the demo's, in place of
# configs/policy.yaml's budgets: []): the members' pushes through FCM.
budgets:
  - name: %s
    rate: %d
    burst: %d
    channels: [%s]
    routes: [%s]
    lanes:
      - {name: %s, min_priority: high}
      - {name: %s}
`, budgetName, paceRate, paceBurst, paceChannel, paceRoute, laneUrgent, laneBulk)

// noBudgets is configs/policy.yaml's budgets line.
var noBudgets = regexp.MustCompile(`(?m)^budgets: \[\][ \t]*(?:\n|\z)`)

// The send pacing section's users and campaigns: the same number at every
// --users (what matters is the blast against the budget's rate, not the
// blast's size): a digest push to each member, breaking news to one in
// paceBreakingEvery of them, a receipt to one in paceReceiptEvery (half
// with the digest, half with the breaking news).
const (
	paceUsers         = 3000
	paceBreakingEvery = 15 // 200 pushes: a second of the budget
	paceReceiptEvery  = 30 // 100 receipts: half a second of it
	// Breaking news comes when the bulk lane released paceBreakingAfter;
	// the digest is stopped when the bulk lane released paceStopAfter more
	// after breaking news went.
	paceBreakingAfter = paceRate / 2
	paceStopAfter     = paceRate / 4
)

// laneTopics are the budget's lane topics and their retry topics.
func laneTopics() []string {
	var ts []string
	for _, l := range []string{laneUrgent, laneBulk} {
		ts = append(ts, pacing.Topic(topicLanes, budgetName, l), pacing.RetryTopic(topicLanes, budgetName, l))
	}
	return ts
}

// pushes are the pacing section's intents of campaign (pushes through
// FCM), one to every every-th member from the offset-th, made at at.
func (s *sections) pushes(campaign, prio, category string, offset, every int, at time.Time) []kafka.Message {
	var out []kafka.Message
	for u := s.members.from + offset; u < s.members.to; u += every {
		in := intent{ID: fmt.Sprintf("%s-%d", campaign, u), User: uint64(u), Campaign: campaign, Channel: paceChannel,
			Created: at.UTC().Format(time.RFC3339), Priority: prio, Category: category, Route: paceRoute}
		v, _ := json.Marshal(in)
		out = append(out, kafka.Message{Key: []byte(strconv.Itoa(u)), Value: v})
	}
	s.produced[campaign] += len(out)
	if _, ok := s.sent[campaign]; !ok {
		s.sent[campaign] = at
	}
	return out
}

// interleave spreads extra evenly through msgs, keeping the order of each.
func interleave(msgs, extra []kafka.Message) []kafka.Message {
	out := make([]kafka.Message, 0, len(msgs)+len(extra))
	j := 0
	for i, m := range msgs {
		for j < len(extra) && j*len(msgs) <= i*len(extra) {
			out = append(out, extra[j])
			j++
		}
		out = append(out, m)
	}
	return append(out, extra[j:]...)
}
