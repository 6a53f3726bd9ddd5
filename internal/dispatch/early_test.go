package dispatch

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/testenv"
)

// TestDeliveriesNotHeldByBatchMates: on a 3-master cluster with one master
// paused, the deliveries of users on the other masters reach their topic
// while the paused master's users wait for their retries, in the same
// batches; once it answers again every intent has exactly one outcome, in
// each user's order, and the caps hold.
func TestDeliveriesNotHeldByBatchMates(t *testing.T) {
	e := &env{t: t, group: "g-" + strings.ReplaceAll(t.Name(), "/", "-")}
	cl := testenv.StartCluster(t, 3)
	e.kafka = testenv.StartKafka(t, 4, []string{tIn, tDel, tSup, tDLQ})
	rdb, err := capping.NewClient(capping.ClientOptions{Mode: capping.ModeCluster, Addrs: cl.Addrs(),
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	c := config.Default().Capping
	if e.engine, err = capping.New(context.Background(), capping.Options{Client: rdb, Rules: testRules,
		KeyPrefix: c.KeyPrefix, IdempotencyWindow: c.IdempotencyWindow.D(), SkewWarn: c.ClockSkewWarn.D()}); err != nil {
		t.Fatal(err)
	}
	// 40 users, each in a bucket of their own (uid/32): on every master.
	in := make([]kafka.Message, 160)
	for i := range in {
		u := (i % 40) * 32
		in[i] = kafka.Message{Key: fmt.Appendf(nil, "%d", u),
			Value: fmt.Appendf(nil, `{"id":"e-%d","user_id":%d,"campaign_id":"c","channel":"push"}`, i, u)}
	}
	cl.Nodes[0].Pause()
	e.start(nil)
	e.kafka.Produce(t, tIn, in)
	deadline := time.Now().Add(20 * time.Second)
	for len(e.read().del) == 0 {
		if time.Now().After(deadline) {
			cl.Nodes[0].Resume()
			t.Fatal("no delivery written while one master was paused: the healthy masters' users waited for their batch-mates")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := len(e.read().sources()); n >= len(in) {
		t.Fatalf("every intent has an outcome with a master paused: the test proves nothing")
	}
	cl.Nodes[0].Resume()
	o := e.waitOutcomes(len(in))
	for src, n := range o.sources() {
		if n != 1 {
			t.Errorf("input %s has %d outcomes", src, n)
		}
	}
	e.auditOK(o)
	// Each user's deliveries in the order of their intents (a user's are
	// in one partition: o.del is in partition order).
	last := map[string]int{}
	for _, m := range o.del {
		var n int
		if _, err := fmt.Sscanf(string(m.Value), `{"id":"e-%d"`, &n); err != nil {
			t.Fatalf("delivery %s: %v", m.Value, err)
		}
		if p, ok := last[string(m.Key)]; ok && n < p {
			t.Errorf("user %s: intent e-%d delivered after e-%d", m.Key, n, p)
		}
		last[string(m.Key)] = n
	}
}
