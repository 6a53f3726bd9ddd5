package audit

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
)

// TestOrder feeds Order made-up records: order violations within
// a pass (the first one, and a redelivered one) are reported, and within a
// lane; redelivered passes that keep order are not, nor a decision only a
// duplicate took, nor intents of different lanes (or one paced, one not)
// decided in release order.
func TestOrder(t *testing.T) {
	const tIn, tDeliveries, tSuppressed = "send-intents", "deliveries", "suppressed"
	base := time.Date(2026, 11, 26, 20, 47, 40, 0, time.UTC)
	at := func(s int) string { return base.Add(time.Duration(s) * time.Second).Format(timeLayout) }
	type out struct {
		off      int64
		decided  int
		dup      bool
		deferred int // > 0: capper-deferred-since
		topic    string
		lane     string // capper-lane
	}
	run := func(outs ...out) []string {
		var inputs, outputs []kafka.Message
		seen := map[int64]bool{}
		for _, x := range outs {
			if !seen[x.off] {
				seen[x.off] = true
				inputs = append(inputs, kafka.Message{Topic: tIn, Partition: 1, Offset: x.off, Key: []byte("42")})
			}
			topic := x.topic
			if topic == "" {
				topic = tDeliveries
			}
			m := kafka.Message{Topic: topic, Key: []byte("42"), Headers: []kafka.Header{
				{Key: hSource, Value: []byte(fmt.Sprintf("%s/1/%d", tIn, x.off))},
				{Key: hDecision, Value: []byte("allowed")},
				{Key: hDecidedAt, Value: []byte(at(x.decided))},
			}}
			if x.dup {
				m.Headers = append(m.Headers, kafka.Header{Key: hDuplicate, Value: []byte("true")})
			}
			if x.deferred > 0 {
				m.Headers = append(m.Headers, kafka.Header{Key: hDeferredSince, Value: []byte(at(x.deferred))})
			}
			if x.lane != "" {
				m.Headers = append(m.Headers, kafka.Header{Key: hLane, Value: []byte(x.lane)})
			}
			outputs = append(outputs, m)
		}
		return Order(inputs, outputs)
	}
	for _, c := range []struct {
		name string
		outs []out
		want string // "" : no finding
	}{
		{"in order", []out{{off: 1, decided: 1}, {off: 2, decided: 1}, {off: 3, decided: 2}}, ""},
		{"a later one first, one pass", []out{{off: 1, decided: 9}, {off: 2, decided: 1}}, "offset 2 decided at 20:47:41, before offset 1 (decided at 20:47:49), in their delivery pass 1"},
		{"a later one first, through a delay tier", []out{{off: 1, decided: 30, deferred: 9}, {off: 2, decided: 5}}, "offset 2 decided at 20:47:45, before offset 1"},
		// The case: 1919 decided again after a broker restart,
		// 1921's second copy a duplicate (its first decision counts).
		{"redelivered, the later one a duplicate", []out{{off: 1919, decided: 8}, {off: 1921, decided: 8}, {off: 1919, decided: 12, topic: tSuppressed},
			{off: 1921, decided: 8, dup: true}}, ""},
		{"redelivered, both decided again in order", []out{{off: 1, decided: 1}, {off: 2, decided: 2}, {off: 1, decided: 20}, {off: 2, decided: 21}}, ""},
		{"redelivered, out of order in the second pass", []out{{off: 1, decided: 1}, {off: 2, decided: 2}, {off: 1, decided: 20}, {off: 2, decided: 15}},
			"offset 2 decided at 20:47:55, before offset 1 (decided at 20:48:00), in their delivery pass 2"},
		{"a pass began between them", []out{{off: 1, decided: 1}, {off: 2, decided: 2}, {off: 2, decided: 30}}, ""},
		{"a pass ended between them", []out{{off: 1, decided: 1}, {off: 1, decided: 10}, {off: 2, decided: 11}}, ""},
		{"a deferral handed back twice", []out{{off: 1, decided: 30, deferred: 3}, {off: 1, decided: 31, deferred: 3}, {off: 2, decided: 4}, {off: 2, decided: 40}}, ""},
		// Seed 4: two passes deferred offset 1; the first pass's copy
		// came out of the tier a duplicate (the second's was allowed
		// first); its deferred-since still places it in the first pass.
		{"a deferred copy that came out a duplicate", []out{{off: 1, decided: 60, deferred: 24, dup: true}, {off: 1, decided: 60, deferred: 39},
			{off: 2, decided: 24, topic: tSuppressed}, {off: 2, decided: 39, topic: tSuppressed}}, ""},
		{"a producer's retry, a duplicate from the start", []out{{off: 1, decided: 9}, {off: 2, decided: 1, dup: true}}, ""},
		// Pacing: a lane decides what it holds when its budget releases
		// it; the order holds within a lane, and among the intents that
		// waited in none.
		{"paced, then one not paced, decided first", []out{{off: 1, decided: 9, lane: "b/bulk"}, {off: 2, decided: 1}}, ""},
		{"bulk, then urgent, which overtook it", []out{{off: 1, decided: 9, lane: "b/bulk"}, {off: 2, decided: 3, lane: "b/urgent"}}, ""},
		{"out of order within a lane", []out{{off: 1, decided: 9, lane: "b/bulk"}, {off: 2, decided: 3}, {off: 3, decided: 5, lane: "b/bulk"}},
			"partition 1, user 42, lane b/bulk: offset 3 decided at 20:47:45, before offset 1 (decided at 20:47:49)"},
		{"out of order among those not paced, one paced between", []out{{off: 1, decided: 9}, {off: 2, decided: 12, lane: "b/bulk"}, {off: 3, decided: 5}},
			"partition 1, user 42: offset 3 decided at 20:47:45, before offset 1"},
		{"one input in two lanes", []out{{off: 1, decided: 9, lane: "b/bulk"}, {off: 1, decided: 20, lane: "b/urgent"}}, `decided in lane "b/bulk" and in lane "b/urgent"`},
	} {
		got := run(c.outs...)
		switch {
		case c.want == "" && len(got) > 0:
			t.Errorf("%s: reported %q", c.name, got)
		case c.want != "" && (len(got) != 1 || !strings.Contains(got[0], c.want)):
			t.Errorf("%s: reported %q, want one finding with %q", c.name, got, c.want)
		}
	}
}
