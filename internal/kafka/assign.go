package kafka

// Assignors: who reads which partition, computed by the group's leader from
// what every member says in its join (its topics, its user data, the
// partitions it owns). An assignor gives the target; with the cooperative
// protocol the group then holds back every partition that would move from
// one member to another until its owner has given it up (cooperative).

import (
	"cmp"
	"maps"
	"slices"
)

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int
}

func comparePartitions(a, b TopicPartition) int {
	return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
}

// Member is a group member as the leader sees it.
type Member struct {
	ID         string
	InstanceID string // static membership ("": none)
	Topics     []string
	UserData   []byte
	Owned      []TopicPartition // what it owns now (the cooperative protocol)
}

func (m *Member) reads(topic string) bool { return slices.Contains(m.Topics, topic) }

// Assignor computes a group's assignment. UserData is what this member
// tells the leader in its join (nil: nothing); Assign is the leader's
// target: every partition of parts (by topic) that some member reads, to
// one member that reads its topic.
type Assignor interface {
	UserData() []byte
	Assign(members []Member, parts map[string][]int) map[string][]TopicPartition
}

// StickyAssignor balances the partitions over the members (their counts
// differ by at most one where every member reads every topic) and keeps
// each where it is wherever that allows.
type StickyAssignor struct{}

func (StickyAssignor) UserData() []byte { return nil }

func (StickyAssignor) Assign(members []Member, parts map[string][]int) map[string][]TopicPartition {
	all := allPartitions(members, parts)
	ms := slices.Clone(members)
	// The members that own the most keep the larger quotas: fewer moves.
	slices.SortFunc(ms, func(a, b Member) int { return cmp.Or(cmp.Compare(len(b.Owned), len(a.Owned)), cmp.Compare(a.ID, b.ID)) })
	out := make(map[string][]TopicPartition, len(ms))
	if len(ms) == 0 {
		return out
	}
	quota := map[string]int{}
	for i, m := range ms {
		quota[m.ID] = len(all) / len(ms)
		if i < len(all)%len(ms) {
			quota[m.ID]++
		}
	}
	exists := map[TopicPartition]bool{}
	for _, tp := range all {
		exists[tp] = true
	}
	taken := map[TopicPartition]bool{}
	for _, m := range ms {
		owned := slices.Clone(m.Owned)
		slices.SortFunc(owned, comparePartitions)
		for _, tp := range owned {
			if exists[tp] && !taken[tp] && m.reads(tp.Topic) && len(out[m.ID]) < quota[m.ID] {
				out[m.ID] = append(out[m.ID], tp)
				taken[tp] = true
			}
		}
	}
	for _, tp := range all {
		if taken[tp] {
			continue
		}
		// The member furthest below its quota (else the least loaded) that
		// reads the topic.
		best := ""
		for _, m := range ms {
			if !m.reads(tp.Topic) {
				continue
			}
			if best == "" || len(out[m.ID])-quota[m.ID] < len(out[best])-quota[best] {
				best = m.ID
			}
		}
		if best != "" {
			out[best] = append(out[best], tp)
			taken[tp] = true
		}
	}
	return out
}

// RangeAssignor is Kafka's range assignor: per topic, the members that
// read it in id order each get a contiguous range of its partitions. It is
// the eager protocol's, and what workers of earlier versions speak.
type RangeAssignor struct{}

func (RangeAssignor) UserData() []byte { return nil }

func (RangeAssignor) Assign(members []Member, parts map[string][]int) map[string][]TopicPartition {
	out := map[string][]TopicPartition{}
	for _, topic := range slices.Sorted(maps.Keys(parts)) {
		var ids []string
		for _, m := range members {
			if m.reads(topic) {
				ids = append(ids, m.ID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		slices.Sort(ids)
		ps := slices.Sorted(slices.Values(parts[topic]))
		per, extra := len(ps)/len(ids), len(ps)%len(ids)
		at := 0
		for i, id := range ids {
			n := per
			if i < extra {
				n++
			}
			for _, p := range ps[at : at+n] {
				out[id] = append(out[id], TopicPartition{topic, p})
			}
			at += n
		}
	}
	return out
}

// cooperative is target without what would move from a member that owns
// it to another (KIP-429): the owner gives it up first (its assignment
// lacks it, so it revokes it and joins again), and the next round assigns
// it. A partition two members claim goes to neither this round.
func cooperative(target map[string][]TopicPartition, members []Member) map[string][]TopicPartition {
	owner := map[TopicPartition]string{}
	for _, m := range members {
		for _, tp := range m.Owned {
			if _, dup := owner[tp]; dup {
				owner[tp] = "" // claimed twice: both give it up
				continue
			}
			owner[tp] = m.ID
		}
	}
	out := make(map[string][]TopicPartition, len(target))
	for id, tps := range target {
		kept := []TopicPartition{}
		for _, tp := range tps {
			if o, owned := owner[tp]; !owned || o == id {
				kept = append(kept, tp)
			}
		}
		out[id] = kept
	}
	return out
}

// allPartitions is every partition of parts whose topic some member reads,
// in order.
func allPartitions(members []Member, parts map[string][]int) []TopicPartition {
	var all []TopicPartition
	for topic, ps := range parts {
		if !slices.ContainsFunc(members, func(m Member) bool { return m.reads(topic) }) {
			continue
		}
		for _, p := range ps {
			all = append(all, TopicPartition{topic, p})
		}
	}
	slices.SortFunc(all, comparePartitions)
	return all
}
