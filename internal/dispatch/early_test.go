package dispatch

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

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
	e, cl, _ := clusterEnv(t, 4, testRules)
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

// TestEarlyWritesKeepAUsersOrder: a user's delivery decided after one of
// their intents that is capped (its outcome written with the batch) waits
// for the batch too: should the batch never be written (its partition
// moved on), the next owner decides the capped one again, and it must not
// come after a later delivery of that user. Here a batch waits for a
// paused master (another user's); user X's first push goes early, their
// sms (no sms at all) and the push after it wait for the batch.
func TestEarlyWritesKeepAUsersOrder(t *testing.T) {
	rules := testRules
	rules.Default = capping.Policy{Limits: []capping.Limit{{Name: "no-sms", Window: time.Hour, Max: 0, Where: capping.Where{Channels: []string{"sms"}}},
		{Name: "daily", Window: 24 * time.Hour, Max: 5}}}
	e, cl, rdb := clusterEnv(t, 1, rules)
	c := config.Default().Capping
	// X on a master that answers, Y on the one that will be paused.
	ctx := context.Background()
	on := func(uid int) string {
		slot := rdb.ClusterKeySlot(ctx, fmt.Sprintf("%s:{b%d}", c.KeyPrefix, uid/32)).Val()
		slots, err := rdb.ClusterSlots(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) {
				return s.Nodes[0].Addr
			}
		}
		t.Fatalf("no master holds slot %d", slot)
		return ""
	}
	paused := cl.Nodes[0].Addr()
	x, y := -1, -1
	for u := 0; x < 0 || y < 0; u += 32 {
		switch on(u) {
		case paused:
			if y < 0 {
				y = u
			}
		default:
			if x < 0 {
				x = u
			}
		}
	}
	intent := func(id string, u int, channel string) kafka.Message {
		return kafka.Message{Key: fmt.Appendf(nil, "%d", u), Value: fmt.Appendf(nil, `{"id":%q,"user_id":%d,"campaign_id":"c","channel":%q}`, id, u, channel)}
	}
	cl.Nodes[0].Pause()
	resumed := false
	defer func() {
		if !resumed {
			cl.Nodes[0].Resume()
		}
	}()
	// Written before the worker starts: one batch.
	e.kafka.Produce(t, tIn, []kafka.Message{intent("x1", x, "push"), intent("y1", y, "push"), intent("x2", x, "sms"), intent("x3", x, "push")})
	r := e.start(nil)
	waitFor(t, "x1's delivery, written while the batch waits", func() bool { return len(e.read().del) > 0 })
	// More attempts (each writes what is decided for good early; x2,
	// and x3 after it, may take one more than x1).
	n := testutil.ToFloat64(r.w.m.redisRetries)
	waitFor(t, "four more attempts", func() bool { return testutil.ToFloat64(r.w.m.redisRetries) >= n+4 })
	for _, m := range e.read().del {
		if strings.Contains(string(m.Value), `"x3"`) {
			t.Fatal("x3 was delivered while x2, capped before it, waited to be written with the batch")
		}
	}
	cl.Nodes[0].Resume()
	resumed = true
	o := e.waitOutcomes(4)
	if len(o.del) != 3 || len(o.sup) != 1 {
		t.Fatalf("%d deliveries and %d suppressed, want 3 and 1 (x2)", len(o.del), len(o.sup))
	}
}

// clusterEnv is an env on a 3-master cluster (short Redis timeouts, one
// retry) and a broker with the test topics of the given partitions.
func clusterEnv(t *testing.T, partitions int32, rules capping.Rules) (*env, *testenv.Cluster, redis.UniversalClient) {
	t.Helper()
	e := &env{t: t, group: "g-" + strings.ReplaceAll(t.Name(), "/", "-")}
	cl := testenv.StartCluster(t, 3)
	e.kafka = testenv.StartKafka(t, partitions, []string{tIn, tDel, tSup, tDLQ})
	rdb, err := capping.NewClient(capping.ClientOptions{Mode: capping.ModeCluster, Addrs: cl.Addrs(),
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	c := config.Default().Capping
	if e.engine, err = capping.New(context.Background(), capping.Options{Client: rdb, Rules: rules,
		KeyPrefix: c.KeyPrefix, IdempotencyWindow: c.IdempotencyWindow.D(), SkewWarn: c.ClockSkewWarn.D()}); err != nil {
		t.Fatal(err)
	}
	return e, cl, rdb
}
