package audit

// The order check: a user's inputs were decided in partition order, within
// each delivery pass. The soak and the end-to-end tests share it.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
)

// Output headers the order check reads besides audit.go's.
const (
	hSource        = "capper-source"
	hDeferredSince = "capper-deferred-since"
	hLane          = "capper-lane"
)

// Order reports each user whose inputs (the records of the input topic)
// were decided out of partition order, within a delivery pass; outputs
// are the records of the topics that say a decision (deliveries, refusals).
//
// An input's decision on its way in is its capper-deferred-since when it
// waited in a delay tier, else its capper-decided-at, to the second (the
// engine's resolution). A redelivered range (a broker restart, a worker
// killed, a rebalance) is decided again from the committed offset: a new
// pass, compared with itself only. The order holds within a lane: an
// intent a budget held is decided when its budget releases it, so a user's
// paced intents are decided in release order, after the user's later
// intents that were not paced or waited in another lane; a lane holds the
// user's intents in partition order and releases them in that order. An
// input is therefore compared only with the user's inputs of its partition
// that waited in the same lane (capper-lane), or, when it waited in none,
// with those that waited in none; an input whose copies name different
// lanes is a finding itself.
//
// Passes are told apart by an input's copies in time order: the k-th
// decision of an input is compared with the k-th of the user's input
// before it. A duplicate's decided-at is when its id was first allowed
// (maybe in an earlier pass, or for another record), so it takes its
// pass's place (after the decisions that were not duplicates: once
// allowed, every later copy is one) but is compared with nothing, unless
// it waited in a delay tier (its deferred-since is its pass's); copies
// decided in the same second are one decision (a tier that handed the
// same deferral back twice). Pairing this way can only compare a decision
// with an earlier or equal pass of the input before it (a pass that ended
// between the two, or began between them, shifts the pairs that way), so
// it reports no false violation; it still reports one within a pass, the
// first as well as a redelivered one.
func Order(inputs []kafka.Message, outputs ...[]kafka.Message) []string {
	copies, found := decisionsOf(outputs)
	type in struct {
		off    int64
		passes []decision
		desc   string // the input, for a report
	}
	byUser := map[string][]in{}
	for _, m := range inputs {
		src := Source(m.Topic, m.Partition, m.Offset)
		cs, ok := copies[src]
		if !ok {
			continue
		}
		k := fmt.Sprintf("partition %d, user %s", m.Partition, m.Key)
		if lane := cs[0].lane; lane != "" {
			k += ", lane " + lane
		}
		if i := slices.IndexFunc(cs, func(d decision) bool { return d.lane != cs[0].lane }); i >= 0 {
			found = append(found, fmt.Sprintf("%s: decided in lane %q and in lane %q: %s", src, cs[0].lane, cs[i].lane, describeAll(cs)))
			continue
		}
		byUser[k] = append(byUser[k], in{m.Offset, passes(cs), describeInput(m)})
	}
	for user, ins := range byUser {
		slices.SortFunc(ins, func(a, b in) int { return cmp.Compare(a.off, b.off) })
		for i := 1; i < len(ins); i++ {
			a, b := ins[i-1], ins[i]
			for k := range min(len(a.passes), len(b.passes)) {
				pa, pb := a.passes[k], b.passes[k]
				if pa.dup || pb.dup || !pb.at.Before(pa.at) {
					continue
				}
				var all strings.Builder
				for _, x := range ins {
					fmt.Fprintf(&all, "\n      offset %d %s: %s", x.off, x.desc, describeAll(x.passes))
				}
				found = append(found, fmt.Sprintf("%s: offset %d decided at %s, before offset %d (decided at %s), in their delivery pass %d; the user's inputs in this partition:%s",
					user, b.off, pb.at.Format(time.TimeOnly), a.off, pa.at.Format(time.TimeOnly), k+1, all.String()))
				break
			}
		}
	}
	slices.Sort(found)
	return found
}

// decisionsOf lists each input's decisions (by its capper-source), and
// the outputs whose decision time cannot be read.
func decisionsOf(outputs [][]kafka.Message) (map[string][]decision, []string) {
	var bad []string
	copies := map[string][]decision{}
	for _, x := range outputs {
		for _, m := range x {
			src := headerValue(m, hSource)
			d := decision{dup: headerValue(m, hDuplicate) == "true", lane: headerValue(m, hLane), desc: Describe(m)}
			v := headerValue(m, hDeferredSince)
			if v != "" {
				// Its pass deferred it then, whatever the tier handed back
				// later (a duplicate, when another pass's copy was
				// allowed meanwhile): a time of that pass.
				d.dup = false
			} else {
				v = headerValue(m, hDecidedAt)
			}
			t, err := time.Parse(timeLayout, v)
			if err != nil {
				bad = append(bad, fmt.Sprintf("output of %s: decision time %q: %v", src, v, err))
				continue
			}
			d.at = t.Truncate(time.Second)
			copies[src] = append(copies[src], d)
		}
	}
	return copies, bad
}

// decision is one decision of an input: when (to the second), whether it
// was a duplicate (when unknown), the lane it waited in (capper-lane, ""
// for none), and what it was, for a report.
type decision struct {
	at   time.Time
	dup  bool
	lane string
	desc string
}

// passes orders an input's decisions by pass: the ones that were not
// duplicates by time (those in the same second merged), then the
// duplicates.
func passes(cs []decision) []decision {
	var out, dups []decision
	for _, c := range cs {
		if c.dup {
			dups = append(dups, c)
		} else {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b decision) int { return a.at.Compare(b.at) })
	out = slices.CompactFunc(out, func(a, b decision) bool { return a.at.Equal(b.at) })
	return append(out, dups...)
}

// Describe is an output record, for a report: where it is, its decision,
// and the headers that say why.
func Describe(m kafka.Message) string {
	s := fmt.Sprintf("%s/%d/%d %s decided-at %s", m.Topic, m.Partition, m.Offset, headerValue(m, hDecision), headerValue(m, hDecidedAt))
	for _, h := range []string{hDeferredSince, hDuplicate, hLimit, "capper-reason", hOverride, "capper-retry-after-ms", hLane, "capper-released-at"} {
		if v := headerValue(m, h); v != "" {
			s += " " + strings.TrimPrefix(h, "capper-") + "=" + v
		}
	}
	return s
}

func describeAll(ds []decision) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, "["+d.desc+"]")
	}
	return strings.Join(parts, " ")
}

// describeInput names an input by its intent's id and campaign.
func describeInput(m kafka.Message) string {
	var v struct {
		ID       string `json:"id"`
		Campaign string `json:"campaign_id"`
	}
	_ = json.Unmarshal(m.Value, &v) // an unreadable input is described by its offset alone
	return fmt.Sprintf("id=%s campaign=%s", v.ID, v.Campaign)
}
