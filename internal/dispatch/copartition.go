package dispatch

// Co-partitioned delay tiers: a deferred intent waits in the tier partition
// with the index of its user's input partition, and the delay tiers' group
// gives that partition to the worker that reads the input partition. A
// user's intents, deferred or not, are then decided by one worker, so its
// refusal cache sees every send it could have missed (see Consumer.Cacheable).

import (
	"encoding/json"
	"slices"
	"sort"
	"sync"

	capkafka "github.com/capper-dev/capper/internal/kafka"
)

// coPartitionProtocol names the assignor in the group protocol, and
// coPartitionCooperative its cooperative form (internal/kafka). Members of
// earlier versions offer only the first (eagerly), range and round robin:
// while any is in the group, the group agrees on one of those.
const (
	coPartitionProtocol    = "capper-copartition"
	coPartitionCooperative = "capper-copartition-cooperative"
)

// coPartition assigns tier partition q to the member that reads input
// partition q (the members say which in their user data), and what no
// member claims round robin. It is a kafka.Assignor.
type coPartition struct {
	input string
	// inputs gives the input partitions this member reads now.
	inputs func() []int

	mu   sync.Mutex
	sent []int // what the last join said
}

// coPartitionData is a member's user data.
type coPartitionData struct {
	Input      string `json:"input"`
	Partitions []int  `json:"partitions"`
}

// protocols are what the delay group's members offer for mode (the
// group protocol: cooperative or eager).
func (b *coPartition) protocols(mode string) []capkafka.Protocol {
	eager := []capkafka.Protocol{{Name: coPartitionProtocol, Assignor: b}, {Name: "range", Assignor: capkafka.RangeAssignor{}}}
	if mode == capkafka.ProtocolEager {
		return eager
	}
	return append([]capkafka.Protocol{{Name: coPartitionCooperative, Assignor: b, Cooperative: true}}, eager...)
}

func (b *coPartition) UserData() []byte {
	ps := b.inputs()
	slices.Sort(ps)
	b.mu.Lock()
	b.sent = ps
	b.mu.Unlock()
	data, _ := json.Marshal(coPartitionData{Input: b.input, Partitions: ps}) // ints and a string: cannot fail
	return data
}

// stale reports whether the member's input partitions changed since it
// last joined (it should join again).
func (b *coPartition) stale() bool {
	ps := b.inputs()
	slices.Sort(ps)
	b.mu.Lock()
	defer b.mu.Unlock()
	return !slices.Equal(ps, b.sent)
}

func (b *coPartition) Assign(members []capkafka.Member, parts map[string][]int) map[string][]capkafka.TopicPartition {
	ids := make([]string, 0, len(members))
	owner := map[int]string{} // input partition -> member
	subscribed := map[string]map[string]bool{}
	data := map[string][]byte{}
	for _, m := range members {
		ids = append(ids, m.ID)
		data[m.ID] = m.UserData
		subscribed[m.ID] = map[string]bool{}
		for _, t := range m.Topics {
			subscribed[m.ID][t] = true
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		var d coPartitionData
		if json.Unmarshal(data[id], &d) == nil && d.Input == b.input {
			for _, p := range d.Partitions {
				if _, taken := owner[p]; !taken {
					owner[p] = id
				}
			}
		}
	}
	var ps []capkafka.TopicPartition
	for topic, ids := range parts {
		for _, p := range ids {
			ps = append(ps, capkafka.TopicPartition{Topic: topic, Partition: p})
		}
	}
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Topic != ps[j].Topic {
			return ps[i].Topic < ps[j].Topic
		}
		return ps[i].Partition < ps[j].Partition
	})
	out := map[string][]capkafka.TopicPartition{}
	next := 0 // round robin over the members that read the topic
	for _, p := range ps {
		id, ok := owner[p.Partition]
		if !ok || !subscribed[id][p.Topic] {
			var cands []string
			for _, m := range ids {
				if subscribed[m][p.Topic] {
					cands = append(cands, m)
				}
			}
			if len(cands) == 0 {
				continue
			}
			id = cands[next%len(cands)]
			next++
		}
		out[id] = append(out[id], p)
	}
	return out
}

// misplaced reports whether a tier record waits in another partition than
// its user's (written by an earlier version): it moves there, undecided,
// so that the worker of its user decides it.
func (w *Worker) misplaced(m *capkafka.Message, home int) bool {
	g, ok := w.o.Reader.(cacheGate)
	if !ok || home < 0 {
		return false
	}
	n := g.TierPartitions(m.Topic)
	return n > 0 && home%n != m.Partition
}
