package dispatch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/capping"
)

// BenchmarkGiveBack: a worker (kfake, one redis-server, a Redis read
// timeout of 500 ms) decides a steady stream of intents, 400 a second to
// 4,000 users; Redis is stopped (SIGSTOP) for 3 s, and 20 intents written
// during the stall have a send-by that passes before it ends: their
// attempts' answers are lost and they end cancelled, so each is given
// back. It prints the p50 and p99 from an intent's record to its outcome's
// record for the intents of the other users written after Redis answered
// again, with the ratio of the p99 to the goal (1 s: a give-back holds only
// its own user), and the same before the stall. Giving back used to wait
// until no lost attempt could run any more (over 10 s), and every batch
// behind it waited as long.
//
//	go test ./internal/dispatch -run '^$' -bench GiveBack -benchtime 1x
func BenchmarkGiveBack(b *testing.B) {
	for range b.N {
		before, after, given := giveBackRun(b)
		p50, p99 := percentile(after, 0.5), percentile(after, 0.99)
		b.ReportMetric(p99.Seconds(), "p99-s")
		fmt.Printf("BenchmarkGiveBack: %d intents given back; intents of other users written after Redis answered again: p50 %v, p99 %v (%d intents): %.3fx the goal (1 s); before the stall p50 %v, p99 %v (%d)\n",
			given, p50.Round(time.Millisecond), p99.Round(time.Millisecond), len(after), p99.Seconds(),
			percentile(before, 0.5).Round(time.Millisecond), percentile(before, 0.99).Round(time.Millisecond), len(before))
	}
}

// giveBackRun is one run of BenchmarkGiveBack: the latencies of the other
// users' intents written before the stall and after it, and how many
// intents were given back.
func giveBackRun(b *testing.B) (before, after []time.Duration, given int) {
	e := newEnv(b)
	e.engine = e.newEngineWith(b, capping.Rules{Default: capping.Policy{Limits: []capping.Limit{{Name: "daily", Window: 24 * time.Hour, Max: 100}}},
		Channels: []string{"push"}, Categories: []string{"marketing", "transactional"}, ExemptCategories: []string{"transactional"}, TimeZone: time.UTC})
	r := e.start(nil)
	rng := rand.New(rand.NewPCG(5, 43))
	var stallEnd time.Time
	stalled := false
	n := 0
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for now := range tick.C {
		el := now.Sub(start)
		if el > 9*time.Second {
			break
		}
		var msgs []kafka.Message
		for range 20 {
			n++
			u := 100 + rng.IntN(4000)
			msgs = append(msgs, kafka.Message{Key: fmt.Appendf(nil, "%d", u), Time: time.Now(),
				Value: fmt.Appendf(nil, `{"id":"i-%d","user_id":%d,"campaign_id":"c","channel":"push"}`, n, u)})
		}
		switch {
		case !stalled && el > 2*time.Second:
			e.redis.Pause()
			stalled = true
			sendBy := time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano)
			for u := range 20 {
				msgs = append(msgs, kafka.Message{Key: fmt.Appendf(nil, "%d", u), Time: time.Now(),
					Value: fmt.Appendf(nil, `{"id":"x-%d","user_id":%d,"campaign_id":"c","channel":"push","send_by":%q}`, u, u, sendBy)})
			}
		case stalled && stallEnd.IsZero() && el > 5*time.Second:
			e.redis.Resume()
			stallEnd = time.Now()
		}
		e.kafka.Produce(b, tIn, msgs)
	}
	o := e.waitOutcomes(n + 20)
	r.cancel()
	_ = r.wait(b)
	in, err := audit.ReadTopic(context.Background(), e.kafka.Addrs, tIn)
	if err != nil {
		b.Fatal(err)
	}
	input := map[string]time.Time{}
	for _, m := range in {
		input[fmt.Sprintf("%s/%d/%d", m.Topic, m.Partition, m.Offset)] = m.Time
	}
	for _, m := range append(o.del, o.sup...) {
		if strings.HasPrefix(string(m.Value), `{"id":"x-`) {
			continue
		}
		at, ok := input[headerValue(m, HeaderSource)]
		if !ok {
			b.Fatalf("an outcome of no input: %s", headerValue(m, HeaderSource))
		}
		switch lat := m.Time.Sub(at); {
		case at.After(stallEnd):
			after = append(after, lat)
		case at.Before(stallEnd.Add(-4 * time.Second)):
			before = append(before, lat)
		}
	}
	for _, res := range []string{"applied", "unknown", "nothing"} {
		given += int(testutil.ToFloat64(r.w.m.givenBack.WithLabelValues(res)))
	}
	return before, after, given
}

func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}
