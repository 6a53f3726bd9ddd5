package capping

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestWaitFailureKeepsOrderAndCache: with WaitReplicas and a replica that
// stops acknowledging (SIGSTOP), the master records a user's first intent
// but its answer becomes an error. The user's second intent in the batch
// must not be decided before the first has its final answer (it waits,
// ErrEarlierUndecided, and never reaches Redis), and the refusal cache must
// not answer the first one's retry from what followed it: once the replica
// is back, Redis answers the first duplicate and caps the second.
func TestWaitFailureKeepsOrderAndCache(t *testing.T) {
	ctx := context.Background()
	replica, c := replicated(t)
	rules := Rules{Default: Policy{Limits: []Limit{{Name: "camp", Window: time.Minute, Max: 1, Per: PerCampaign}}}}
	e := newEngine(t, c, Options{Rules: rules, WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond,
		RefusalCacheSize: 100, RefusalCacheTTL: time.Minute})
	req := func(id string, at time.Time) Request {
		return Request{UserID: 7, Segment: "s", IntentID: id, Campaign: "x", Channel: "push", Category: "marketing", At: at}
	}
	decide := func(reqs ...Request) []Decision {
		t.Helper()
		ds, err := e.Decide(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	if d := decide(Request{UserID: 1, Segment: "s", IntentID: "warm", Campaign: "w", Channel: "push", Category: "marketing", At: T0}); d[0].Err != nil {
		t.Fatalf("warm-up: %v", d[0].Err)
	}
	// The cache knows user 7's ids (a refusal brought them): it answers
	// the user's intents whose ids it does not list.
	y := func(id string) Request { r := req(id, T0); r.Campaign = "y"; return r }
	if d := decide(y("p"), y("q")); d[0].Outcome != Allowed || d[1].Outcome != Capped {
		t.Fatalf("campaign y: %s, %s, want allowed, capped", d[0].Outcome, d[1].Outcome)
	}
	calls0 := evalCalls(t, c)

	replica.Pause()
	ds := decide(req("a", T0.Add(time.Second)), req("b", T0.Add(time.Second)))
	var nr errNotReplicated
	if !errors.As(ds[0].Err, &nr) {
		t.Fatalf("first intent: %+v, want a not-replicated error", ds[0])
	}
	if !errors.Is(ds[1].Err, ErrEarlierUndecided) {
		t.Fatalf("second intent decided while the first has no answer: %+v (outcome %s)", ds[1], ds[1].Outcome)
	}
	if n := evalCalls(t, c) - calls0; n != 1 {
		t.Fatalf("%d script calls while the first intent had no answer, want 1 (the second must not reach Redis)", n)
	}
	st, err := e.Inspect(ctx, 7, "s", InspectOptions{At: T0.Add(time.Second), Campaign: "x"})
	if err != nil || len(st) != 1 || st[0].Count != 1 {
		t.Fatalf("inspect: %+v %v, want the first intent counted by the master", st, err)
	}
	if err := e.Ready(); err == nil {
		t.Fatalf("Ready() = nil after an answer the replicas did not acknowledge")
	}

	replica.Resume()
	ds = decide(req("a", T0.Add(2*time.Second)), req("b", T0.Add(2*time.Second)))
	if ds[0].Err != nil || ds[0].Outcome != Duplicate {
		t.Fatalf("first intent retried: %+v (outcome %s), want duplicate: the cache must not answer it from its own send", ds[0], ds[0].Outcome)
	}
	if ds[1].Err != nil || ds[1].Outcome != Capped || ds[1].Limit != "camp" {
		t.Fatalf("second intent: %+v (outcome %s), want capped by camp", ds[1], ds[1].Outcome)
	}
	if err := e.Ready(); err != nil {
		t.Fatalf("Ready() = %v once Redis answered a round", err)
	}
}

// TestDuplicateForgetsRefusals: a duplicate answer means a send the
// refusal cache may not know of (another worker allowed it, here a bypass),
// and the limits it remembers as not full may be full now. After one, the
// cache must not answer from what it knew: Redis names the limit that is
// full first in policy order.
func TestDuplicateForgetsRefusals(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartRedis(t, testenv.RedisOptions{}).Client()
	rules := Rules{Default: Policy{Limits: []Limit{
		{Name: "b-day", Window: 24 * time.Hour, Max: 2},
		{Name: "b-min", Window: time.Minute, Max: 1},
	}}, Overrides: Overrides{Campaigns: []string{"urgent"}}}
	opts := Options{Rules: rules, RefusalCacheSize: 100, RefusalCacheTTL: time.Hour}
	e1, e2 := newEngine(t, c, opts), newEngine(t, c, opts)
	req := func(id, campaign string, at time.Time) Request {
		return Request{UserID: 9, Segment: "s", IntentID: id, Campaign: campaign, Channel: "push", Category: "marketing", At: at}
	}
	decide := func(e *Engine, r Request) Decision {
		t.Helper()
		ds, err := e.Decide(ctx, []Request{r})
		if err != nil || ds[0].Err != nil {
			t.Fatalf("%s: %v %v", r.IntentID, err, ds[0].Err)
		}
		return ds[0]
	}
	if d := decide(e1, req("x1", "c", T0)); d.Outcome != Allowed {
		t.Fatalf("x1: %s", d.Outcome)
	}
	if d := decide(e1, req("x2", "c", T0.Add(time.Second))); d.Outcome != Capped || d.Limit != "b-min" {
		t.Fatalf("x2: %s %s, want capped by b-min", d.Outcome, d.Limit)
	}
	// Another worker honours a bypass: counted, so b-day is full now.
	bypass := req("x3", "urgent", T0.Add(2*time.Second))
	bypass.Override = Bypass
	if d := decide(e2, bypass); d.Outcome != Allowed {
		t.Fatalf("x3 (bypass): %s", d.Outcome)
	}
	// This worker gets the same intent again (a partition moved).
	bypass.Redelivered, bypass.At = true, T0.Add(3*time.Second)
	if d := decide(e1, bypass); d.Outcome != Duplicate {
		t.Fatalf("x3 again: %s, want duplicate", d.Outcome)
	}
	d := decide(e1, req("x4", "c", T0.Add(4*time.Second)))
	if d.Outcome != Capped || d.Limit != "b-day" {
		t.Fatalf("x4: %s by %q (retry after %s), want capped by b-day, as Redis answers", d.Outcome, d.Limit, d.RetryAfter.In)
	}
}

// TestOutageKeepsOrder: Redis goes away while a batch holds two intents of
// a user the refusal cache knows. The first needs Redis and fails; the
// second, which the cache could answer, must wait for it (the order a
// user's intents are decided in is the batch's, whatever answers them),
// and Ready fails from that first failed attempt until a round succeeds.
func TestOutageKeepsOrder(t *testing.T) {
	ctx := context.Background()
	r := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	rules := Rules{Default: Policy{Limits: []Limit{{Name: "camp", Window: time.Hour, Max: 1, Per: PerCampaign}}}}
	e := newEngine(t, c, Options{Rules: rules, RefusalCacheSize: 100, RefusalCacheTTL: time.Hour})
	req := func(id, campaign string, at time.Time) Request {
		return Request{UserID: 5, Segment: "s", IntentID: id, Campaign: campaign, Channel: "push", Category: "marketing", At: at}
	}
	ds, err := e.Decide(ctx, []Request{req("p", "y", T0), req("q", "y", T0)})
	if err != nil || ds[0].Outcome != Allowed || ds[1].Outcome != Capped {
		t.Fatalf("campaign y: %+v %v", ds, err)
	}
	if err := e.Ready(); err != nil {
		t.Fatalf("Ready() = %v with Redis up", err)
	}

	r.Kill()
	ds, err = e.Decide(ctx, []Request{req("a", "z", T0.Add(time.Second)), req("b", "y", T0.Add(time.Second))})
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Err == nil {
		t.Fatalf("first intent decided with Redis down: %+v", ds[0])
	}
	if !errors.Is(ds[1].Err, ErrEarlierUndecided) {
		t.Fatalf("second intent: %+v (outcome %s), want it to wait for the first (ErrEarlierUndecided)", ds[1], ds[1].Outcome)
	}
	if err := e.Ready(); err == nil {
		t.Fatalf("Ready() = nil after a failed attempt")
	}

	r.Restart()
	waitFor(t, "Redis to answer", func() bool {
		ds, err = e.Decide(ctx, []Request{req("a", "z", T0.Add(2*time.Second)), req("b", "y", T0.Add(2*time.Second))})
		return err == nil && ds[0].Err == nil
	})
	if ds[0].Outcome != Allowed || ds[1].Outcome != Capped || ds[1].Limit != "camp" {
		t.Fatalf("after the outage: %s, %s by %q; want allowed, capped by camp", ds[0].Outcome, ds[1].Outcome, ds[1].Limit)
	}
	if err := e.Ready(); err != nil {
		t.Fatalf("Ready() = %v once Redis answered", err)
	}
}

// TestEarlierAnswerKept: a user's first intent is answered by Redis
// (capped: a refusal waits for no replica), the second's answer fails (its
// WAIT, the replica stopped). The first keeps its answer: only what comes
// after a failed request waits for it.
func TestEarlierAnswerKept(t *testing.T) {
	ctx := context.Background()
	replica, c := replicated(t)
	rules := Rules{Default: Policy{Limits: []Limit{{Name: "no-sms", Window: time.Minute, Max: 0, Where: Where{Channels: []string{"sms"}}}}}}
	e := newEngine(t, c, Options{Rules: rules, WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond})
	req := func(id, channel string) Request {
		return Request{UserID: 7, Segment: "s", IntentID: id, Campaign: "x", Channel: channel, Category: "marketing", At: T0}
	}
	replica.Pause()
	defer replica.Resume()
	ds, err := e.Decide(ctx, []Request{req("a", "sms"), req("b", "push"), req("c", "sms")})
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Err != nil || ds[0].Outcome != Capped || ds[0].Limit != "no-sms" {
		t.Fatalf("first intent: %+v (outcome %s), want capped by no-sms: it was answered before the second failed", ds[0], ds[0].Outcome)
	}
	var nr errNotReplicated
	if !errors.As(ds[1].Err, &nr) || !strings.Contains(ds[1].Err.Error(), "WAIT on "+nr.master+" saw 0 of 1") || nr.master == "" {
		t.Fatalf("second intent: %+v, want a not-replicated error naming its master", ds[1])
	}
	if !errors.Is(ds[2].Err, ErrEarlierUndecided) {
		t.Fatalf("third intent: %+v (outcome %s), want it to wait for the second", ds[2], ds[2].Outcome)
	}
}

// TestReadinessWithStoppedReplica: with WaitReplicas, a stopped replica
// keeps the engine not ready: a batch of refusals (which need no replica)
// does not call Redis back, nor do refunds (which wait for none), nor
// does an attempt answered voided, nor does
// the clock check, which also asks the
// master whether enough replicas acknowledge. Both do once it is back.
func TestReadinessWithStoppedReplica(t *testing.T) {
	ctx := context.Background()
	replica, c := replicated(t)
	rules := Rules{Default: Policy{Limits: []Limit{{Name: "no-sms", Window: time.Minute, Max: 0, Where: Where{Channels: []string{"sms"}}}}}}
	e := newEngine(t, c, Options{Rules: rules, WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond})
	sms := func(id string) []Request {
		return []Request{{UserID: 7, Segment: "s", IntentID: id, Campaign: "x", Channel: "sms", Category: "marketing", At: T0}}
	}
	if _, err := e.CheckClock(ctx); err != nil {
		t.Fatalf("clock check with the replica up: %v", err)
	}
	replica.Pause()
	resumed := false
	defer func() {
		if !resumed {
			replica.Resume()
		}
	}()
	// The replica's acknowledgements stop: its lag passes a second.
	waitFor(t, "the master to see the replica lag", func() bool {
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && ackingReplicas(info) == 0
	})
	ds, err := e.Decide(ctx, sms("a"))
	if err != nil || ds[0].Err != nil || ds[0].Outcome != Capped {
		t.Fatalf("a refusal with the replica stopped: %+v %v, want capped", ds[0], err)
	}
	if e.Ready() == nil {
		t.Fatal("ready after a batch whose WAIT failed (a refusal needs no replica, but a send would)")
	}
	// Nor does a refund or a give-back, which waits for no replica.
	if out, err := e.Refund(ctx, []RefundRequest{{UserID: 7, IntentID: "a"}, {UserID: 7, IntentID: "z", Forget: true, Answered: true, Attempts: []time.Time{T0}}}); err != nil || out[0].Err != nil || out[1].Err != nil {
		t.Fatalf("refunds with the replica stopped: %+v %v", out, err)
	}
	if e.Ready() == nil {
		t.Fatal("ready after refunds answered with the replica stopped: a send would still fail")
	}
	// Nor does an attempt Redis answers voided (given back before it ran).
	voided := []Request{{UserID: 7, Segment: "s", IntentID: "v", Campaign: "x", Channel: "email", Category: "marketing", At: T0}}
	if out, err := e.Refund(ctx, []RefundRequest{{UserID: 7, IntentID: "v", Forget: true, Attempts: []time.Time{T0}}}); err != nil || out[0].Err != nil {
		t.Fatalf("a give-back with the replica stopped: %+v %v", out, err)
	}
	if ds, err := e.Decide(ctx, voided); err != nil || !errors.Is(ds[0].Err, ErrVoided) {
		t.Fatalf("an attempt given back, with the replica stopped: %+v %v, want voided", ds, err)
	}
	if e.Ready() == nil {
		t.Fatal("ready after an attempt answered voided with the replica stopped: a send would still fail")
	}
	if _, err := e.CheckClock(ctx); err == nil {
		t.Fatal("the clock check passed with the only replica stopped")
	}
	replica.Resume()
	resumed = true
	waitFor(t, "the clock check to pass again", func() bool {
		_, err := e.CheckClock(ctx)
		return err == nil
	})
	if ds, err := e.Decide(ctx, sms("b")); err != nil || ds[0].Err != nil {
		t.Fatalf("a refusal with the replica back: %+v %v", ds, err)
	}
	if err := e.Ready(); err != nil {
		t.Fatalf("not ready once the replica is back and a batch was decided: %v", err)
	}
}

func TestAckingReplicas(t *testing.T) {
	info := "# Replication\r\nrole:master\r\nconnected_slaves:3\r\n" +
		"slave0:ip=127.0.0.1,port=1,state=online,offset=10,lag=0\r\n" +
		"slave1:ip=127.0.0.1,port=2,state=online,offset=10,lag=5\r\n" +
		"slave2:ip=127.0.0.1,port=3,state=wait_bgsave,offset=0,lag=0\r\n" +
		"master_replid:abc\r\n"
	if n := ackingReplicas(info); n != 1 {
		t.Fatalf("ackingReplicas = %d, want 1 (online with lag <= 1)", n)
	}
}

// replicated starts a master with one replica and a client of the master
// that does not retry (a failed call is the test's to see).
func replicated(t *testing.T) (*testenv.Redis, *redis.Client) {
	t.Helper()
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.ReplicaOf(t, master)
	c := redis.NewClient(&redis.Options{Addr: master.Addr(), MaxRetries: -1, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return replica, c
}

// TestReadinessKeepsTheMasterThatFailed: in a cluster under WaitReplicas,
// one master's replica stopped, a batch that reaches only the other masters
// succeeds yet does not make the engine ready: that says nothing of the
// master that failed. Its own calls succeeding again (replica back) do.
func TestReadinessKeepsTheMasterThatFailed(t *testing.T) {
	ctx := context.Background()
	c := testenv.StartCluster(t, 3)
	c.AddReplicas()
	cl, err := NewClient(ClientOptions{Mode: ModeCluster, Addrs: c.Addrs(), ReadTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	rules := Rules{Default: Policy{Limits: []Limit{{Name: "no-sms", Window: time.Minute, Max: 0, Where: Where{Channels: []string{"sms"}}}}}}
	e := newEngine(t, cl, Options{Rules: rules, WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond})
	// A user on master 0 (whose replica stops) and one on master 1.
	userOn := func(node int) uint64 {
		for u := uint64(1); ; u++ {
			if e.nodeOf(ctx, e.keys.bucket(u)) == c.Nodes[node].Addr() {
				return u
			}
		}
	}
	stopped, healthy := userOn(0), userOn(1)
	sms := func(user uint64, id string) []Request {
		return []Request{{UserID: user, Segment: "s", IntentID: id, Campaign: "x", Channel: "sms", Category: "marketing", At: T0}}
	}
	replica := c.Replicas[0]
	replica.Pause()
	resumed := false
	defer func() {
		if !resumed {
			replica.Resume()
		}
	}()
	mc := c.Nodes[0].Client()
	waitFor(t, "master 0 to see its replica lag", func() bool {
		info, err := mc.Info(ctx, "replication").Result()
		return err == nil && ackingReplicas(info) == 0
	})
	if ds, err := e.Decide(ctx, sms(stopped, "a")); err != nil || ds[0].Outcome != Capped {
		t.Fatalf("a refusal on the master whose replica is stopped: %+v %v, want capped", ds, err)
	}
	if e.Ready() == nil {
		t.Fatal("ready after a batch whose WAIT failed")
	}
	if ds, err := e.Decide(ctx, sms(healthy, "b")); err != nil || ds[0].Err != nil {
		t.Fatalf("a refusal on a healthy master: %+v %v", ds, err)
	}
	if e.Ready() == nil {
		t.Fatal("ready after a batch that reached only healthy masters, while master 0 still cannot replicate")
	}
	replica.Resume()
	resumed = true
	waitFor(t, "master 0's calls to succeed again", func() bool {
		ds, err := e.Decide(ctx, sms(stopped, "c"))
		return err == nil && ds[0].Err == nil && e.Ready() == nil
	})
}
