package capping

// A max raised after a log was trimmed: the log kept only the old max of
// sends, and the raised max must not count from what was kept. The script
// (single node and cluster), Memory and the reference model decide the
// same sequence alike, and Memory writes the bytes Redis holds.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

func TestRaisedMaxCountsTrimmedLog(t *testing.T) {
	for _, c := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{
		{"single", func(t *testing.T) redis.UniversalClient {
			return testenv.StartRedis(t, testenv.RedisOptions{}).Client()
		}},
		{"cluster", func(t *testing.T) redis.UniversalClient { return testenv.StartCluster(t, 3).Client() }},
	} {
		t.Run(c.name, func(t *testing.T) { testRaisedMax(t, c.client(t)) })
	}
}

// raiseStep is one intent of user 7 and what every implementation must
// answer.
type raiseStep struct {
	id, campaign string
	at           time.Duration // after T0
	bypass       bool
	want         Outcome
	retry        time.Duration // capped: the retry-after
}

func testRaisedMax(t *testing.T, c redis.UniversalClient) {
	ctx := context.Background()
	rules := func(max int) Rules {
		return testOptions(Options{Rules: Rules{
			Default:   Policy{Limits: []Limit{{Name: "push-3m", Window: 3 * time.Minute, Max: max, Where: Where{Channels: []string{"push"}}}}},
			Overrides: Overrides{Campaigns: []string{"vip"}},
		}}).Rules
	}
	idem := 24 * time.Hour
	e := newEngine(t, c, Options{Rules: rules(1), KeyPrefix: "raise", RefusalCacheSize: 100, RefusalCacheTTL: time.Hour})
	mem := newTestMemory(t, rules(1), idem)
	model := newRefModel(rules(1), idem)

	check := func(s raiseStep) {
		t.Helper()
		r := Request{UserID: 7, IntentID: s.id, Campaign: s.campaign, Channel: "push", Category: "marketing", At: T0.Add(s.at)}
		if s.bypass {
			r.Override = Bypass
		}
		got, err := e.Decide(ctx, []Request{r})
		if err != nil {
			t.Fatal(err)
		}
		want := Decision{Outcome: s.want, At: r.At}
		if s.want == Capped {
			want.Limit, want.RetryAfter.In = "push-3m", s.retry
		}
		if s.bypass {
			want.Override = Bypass
		}
		for _, impl := range []struct {
			name string
			d    Decision
		}{{"redis", got[0]}, {"memory", mem.Decide(&r)}, {"model", model.decide(r)}} {
			if err := compare(impl.d, want, compareOpts{}); err != nil {
				t.Fatalf("intent %s at T0+%s, %s: %v", s.id, s.at, impl.name, err)
			}
		}
		raw, err := e.client.HGet(ctx, e.keys.bucket(7), field(7)).Result()
		if err != nil {
			t.Fatal(err)
		}
		if raw != mem.users[7] {
			t.Fatalf("after %s: Redis holds %x, Memory %x", s.id, raw, mem.users[7])
		}
	}
	// Three honoured bypasses under max 1: the log keeps the newest and is
	// trimmed (the two dropped are inside the window).
	for i, id := range []string{"b1", "b2", "b3"} {
		check(raiseStep{id: id, campaign: "vip", at: time.Duration(i) * 10 * time.Second, bypass: true, want: Allowed})
	}
	// The max raised to 3, the same scope: 3 sends in the window, so both
	// pushes are capped, until the oldest kept send (b3, at T0+20s) leaves
	// the window: the dropped b1 and b2 are older.
	raised := rules(3)
	if err := e.SetPolicy(ctx, raised, "raised"); err != nil {
		t.Fatal(err)
	}
	set, err := compileRules(raised, idem)
	if err != nil {
		t.Fatal(err)
	}
	set.name = "v-test"
	mem.set = set
	model.setRules(raised)
	free := 20*time.Second + 3*time.Minute + time.Second // b3 + window + 1s
	states, err := e.Inspect(ctx, 7, "", InspectOptions{At: T0.Add(30 * time.Second)})
	if err != nil || len(states) != 1 || !states[0].Trimmed || states[0].Count != 1 || !states[0].NextFree.Equal(T0.Add(free)) {
		t.Fatalf("inspect after the raise: %+v (%v), want 1 kept send, trimmed, next free at T0+%s", states, err, free)
	}
	for i, at := range []time.Duration{30 * time.Second, 40 * time.Second, 50 * time.Second} {
		check(raiseStep{id: fmt.Sprint("p", i+1), campaign: "spring", at: at, want: Capped, retry: free - at})
	}
	// Past it, the log counts what it holds; the write that follows drops
	// the mark (its oldest kept send is before the window).
	check(raiseStep{id: "p4", campaign: "spring", at: free, want: Allowed})
	check(raiseStep{id: "p5", campaign: "spring", at: free + time.Second, want: Allowed})
	check(raiseStep{id: "p6", campaign: "spring", at: free + 2*time.Second, want: Allowed})
	check(raiseStep{id: "p7", campaign: "spring", at: free + 3*time.Second, want: Capped, retry: 3*time.Minute + time.Second - 3*time.Second})
}
