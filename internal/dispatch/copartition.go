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

	"github.com/segmentio/kafka-go"
)

// coPartitionProtocol names the balancer in the group protocol. Members of
// earlier versions offer only range and round robin: while any is in the
// group, the group agrees on one of those (the cache then answers only
// where the assignment happens to be co-partitioned).
const coPartitionProtocol = "capper-copartition"

// coPartition assigns tier partition q to the member that reads input
// partition q (the members say which in their user data), and what no
// member claims round robin.
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

func (b *coPartition) ProtocolName() string { return coPartitionProtocol }

func (b *coPartition) UserData() ([]byte, error) {
	ps := b.inputs()
	slices.Sort(ps)
	b.mu.Lock()
	b.sent = ps
	b.mu.Unlock()
	return json.Marshal(coPartitionData{Input: b.input, Partitions: ps})
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

func (b *coPartition) AssignGroups(members []kafka.GroupMember, partitions []kafka.Partition) kafka.GroupMemberAssignments {
	ids := make([]string, 0, len(members))
	owner := map[int]string{} // input partition -> member
	subscribed := map[string]map[string]bool{}
	for _, m := range members {
		ids = append(ids, m.ID)
		subscribed[m.ID] = map[string]bool{}
		for _, t := range m.Topics {
			subscribed[m.ID][t] = true
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		var d coPartitionData
		for _, m := range members {
			if m.ID == id && json.Unmarshal(m.UserData, &d) == nil && d.Input == b.input {
				for _, p := range d.Partitions {
					if _, taken := owner[p]; !taken {
						owner[p] = id
					}
				}
			}
		}
	}
	ps := slices.Clone(partitions)
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Topic != ps[j].Topic {
			return ps[i].Topic < ps[j].Topic
		}
		return ps[i].ID < ps[j].ID
	})
	out := kafka.GroupMemberAssignments{}
	for _, id := range ids {
		out[id] = map[string][]int{}
	}
	next := 0 // round robin over the members that read the topic
	for _, p := range ps {
		id, ok := owner[p.ID]
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
		out[id][p.Topic] = append(out[id][p.Topic], p.ID)
	}
	return out
}

// homeBalancer puts a record in the partition of its Partition field's
// index, modulo the topic's partitions (NewTierWriter).
type homeBalancer struct{}

func (homeBalancer) Balance(m kafka.Message, partitions ...int) int {
	return partitions[max(m.Partition, 0)%len(partitions)]
}
