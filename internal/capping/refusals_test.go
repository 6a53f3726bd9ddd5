package capping

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestRefusalCacheModel runs random traffic through an engine with the
// refusal cache and compares with the model: every answer is the model's,
// limit and retry-after included (the cache answers only when it knows the
// first full limit in policy order); the stored records are the model's;
// and the cache saved Redis calls.
func TestRefusalCacheModel(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	c := r.Client()
	for _, plans := range []bool{false, true} {
		t.Run(fmt.Sprintf("plans=%v", plans), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			e := newEngine(t, c, Options{IdempotencyWindow: 2 * time.Hour, RefusalCacheSize: 10_000, RefusalCacheTTL: time.Hour, Registerer: reg,
				KeyPrefix: fmt.Sprintf("rcm%v", plans)})
			m := newRefModel(e.set.Load().rules, 2*time.Hour)
			g := newGen(t, *modelSeed+20, 300, autumn)
			g.usePlans = plans
			ctx := context.Background()
			for b := range 120 {
				g.step(m.rules)
				reqs := g.batch(1 + g.rng.IntN(100))
				got, err := e.Decide(ctx, reqs)
				if err != nil {
					t.Fatal(err)
				}
				for i, r := range reqs {
					want := m.decide(r)
					if err := compare(got[i], want, compareOpts{}); err != nil {
						t.Fatalf("batch %d request %d %+v: %v", b, i, r, err)
					}
				}
			}
			hits := int(counterValue(t, reg, "capper_refusal_cache_hits_total", nil))
			t.Logf("%d refusals answered from the cache; calls per intent %.2f", hits, counterValue(t, reg, "capper_redis_calls_per_intent", nil))
			if hits == 0 {
				t.Fatal("the cache answered nothing")
			}
			checkStored(t, c, e, m)
		})
	}
}

// TestRefusalCacheRules: priorities, the TTL, ids allowed before, and
// ForgetRefusals.
func TestRefusalCacheRules(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	c := r.Client()
	reg := prometheus.NewRegistry()
	rules := testOptions(Options{}).Rules
	rules.Segments, rules.Default = nil, Policy{Limits: []Limit{
		{Name: "daily", Window: day, Max: 2, Reserve: Reserve{Slots: 1, Below: High}},
	}}
	e := newEngine(t, c, Options{Rules: rules, RefusalCacheSize: 100, RefusalCacheTTL: time.Minute, Registerer: reg})
	ctx := context.Background()
	n := 0
	decide := func(id string, p Priority, at time.Time) Decision {
		t.Helper()
		n++
		d, err := e.Decide(ctx, []Request{{UserID: 1, IntentID: id, Channel: "push", Category: "marketing", Priority: p, At: at}})
		if err != nil || d[0].Err != nil {
			t.Fatal(err, d[0].Err)
		}
		return d[0]
	}
	hits := func() int { return int(counterValue(t, reg, "capper_refusal_cache_hits_total", nil)) }
	if d := decide("a", Normal, T0); d.Outcome != Allowed {
		t.Fatalf("a: %+v", d)
	}
	if d := decide("b", Normal, T0.Add(time.Second)); d.Outcome != Capped || hits() != 0 { // the reserved slot
		t.Fatalf("b: %+v, %d hits", d, hits())
	}
	if d := decide("c", Low, T0.Add(2*time.Second)); d.Outcome != Capped || hits() != 1 || d.RetryAfter.In != day-time.Second {
		t.Fatalf("c (also below the reserve, from the cache): %+v, %d hits", d, hits())
	}
	if d := decide("d", High, T0.Add(3*time.Second)); d.Outcome != Allowed || hits() != 1 {
		t.Fatalf("d (high: may use the reserved slot, not answered from a normal refusal): %+v, %d hits", d, hits())
	}
	if d := decide("a", Normal, T0.Add(4*time.Second)); d.Outcome != Duplicate {
		t.Fatalf("a again (allowed before: a duplicate, not a cached refusal): %+v", d)
	}
	// d used the reserved slot: what the cache knew about daily is stale,
	// Redis is asked (and refuses). Then the TTL: a minute after that
	// refusal, Redis is asked again.
	calls := evalCalls(t, c)
	if d := decide("e", Normal, T0.Add(10*time.Second)); d.Outcome != Capped || evalCalls(t, c) != calls+1 {
		t.Fatalf("e (after a send of the limit's scope): %+v, %d calls", d, evalCalls(t, c)-calls)
	}
	if d := decide("f", Low, T0.Add(40*time.Second)); d.Outcome != Capped || evalCalls(t, c) != calls+1 {
		t.Fatalf("f (inside the TTL): %+v, %d calls", d, evalCalls(t, c)-calls)
	}
	decide("g", Normal, T0.Add(71*time.Second))
	if evalCalls(t, c) != calls+2 {
		t.Fatal("a refusal past the TTL was answered from the cache")
	}
	e.ForgetRefusals()
	decide("h", Normal, T0.Add(72*time.Second))
	if evalCalls(t, c) != calls+3 {
		t.Fatal("ForgetRefusals did not empty the cache")
	}
	for i := range 3 { // bounded: 100 entries
		for u := range uint64(100) {
			if _, err := e.Decide(ctx, []Request{{UserID: 1000 + u, IntentID: fmt.Sprint(i), Channel: "push", Category: "marketing", At: T0}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if l := e.refusals.users.Len(); l > 100 {
		t.Fatalf("cache holds %d users, bound 100", l)
	}
}

// TestRefusalCacheRedelivered: an intent another worker allowed comes back
// to a worker that remembers its user's limit full (a rebalance moved the
// partition). Marked Redelivered it goes to Redis and is a duplicate; not
// marked, it is a duplicate too: the refusal that filled the cache came
// with the ids Redis allowed. A duplicate is a send the cache may not know
// of: after one, a new id goes to Redis, and its refusal fills the cache
// again for the next.
func TestRefusalCacheRedelivered(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	rules := testOptions(Options{}).Rules
	rules.Segments, rules.Default = nil, Policy{Limits: []Limit{{Name: "daily", Window: day, Max: 2}}}
	a := newEngine(t, r.Client(), Options{Rules: rules})
	b := newEngine(t, r.Client(), Options{Rules: rules, RefusalCacheSize: 100, RefusalCacheTTL: time.Minute})
	ctx := context.Background()
	decide := func(e *Engine, id string, at time.Time, redelivered bool) Decision {
		t.Helper()
		d, err := e.Decide(ctx, []Request{{UserID: 1, IntentID: id, Channel: "push", Category: "marketing", At: at, Redelivered: redelivered}})
		if err != nil || d[0].Err != nil {
			t.Fatal(err, d[0].Err)
		}
		return d[0]
	}
	for i, id := range []string{"x1", "x2"} {
		if d := decide(a, id, T0.Add(time.Duration(i)*time.Second), false); d.Outcome != Allowed {
			t.Fatalf("%s on worker a: %+v", id, d)
		}
	}
	if d := decide(b, "x3", T0.Add(2*time.Second), true); d.Outcome != Capped {
		t.Fatalf("x3 on worker b: %+v", d)
	}
	if d := decide(b, "x2", T0.Add(3*time.Second), true); d.Outcome != Duplicate || !d.At.Equal(T0.Add(time.Second)) {
		t.Fatalf("x2 redelivered to worker b: %+v, want the duplicate of a's send", d)
	}
	if d := decide(b, "x2", T0.Add(4*time.Second), false); d.Outcome != Duplicate {
		t.Fatalf("x2 again: %+v (b saw it a duplicate: it knows the id now)", d)
	}
	if d := decide(b, "x1", T0.Add(5*time.Second), false); d.Outcome != Duplicate || !d.At.Equal(T0) {
		t.Fatalf("x1 not marked redelivered: %+v, want the duplicate of a's send", d)
	}
	calls := evalCalls(t, r.Client())
	if d := decide(b, "x5", T0.Add(6*time.Second), false); d.Outcome != Capped || d.Limit != "daily" || evalCalls(t, r.Client()) != calls+1 {
		t.Fatalf("x5: %+v, %d script calls (want one: a duplicate before it)", d, evalCalls(t, r.Client())-calls)
	}
	if d := decide(b, "x6", T0.Add(7*time.Second), false); d.Outcome != Capped || d.Limit != "daily" || evalCalls(t, r.Client()) != calls+1 {
		t.Fatalf("x6: %+v, %d script calls (want none: from the cache)", d, evalCalls(t, r.Client())-calls-1)
	}
}

// TestRefusalCacheRetryAfterManyAllowed: a user is allowed x, then capped;
// many other users are allowed meanwhile; a producer's retry of x is still a
// duplicate, as Redis says, never capped by the cache (the ids a user was
// allowed are kept with the user, not in a table others can overwrite).
// And a user allowed more ids than the cache keeps is not answered at all.
func TestRefusalCacheRetryAfterManyAllowed(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	rules := testOptions(Options{}).Rules
	rules.Segments, rules.Default = nil, Policy{Limits: []Limit{{Name: "hourly", Window: time.Hour, Max: 1, Where: Where{Channels: []string{"push"}}}, {Name: "many", Window: time.Hour, Max: maxAllowedIDs + 5, Where: Where{Channels: []string{"email"}}}}}
	e := newEngine(t, r.Client(), Options{Rules: rules, RefusalCacheSize: 100, RefusalCacheTTL: time.Minute})
	ctx := context.Background()
	decide := func(user uint64, id, channel string, at time.Time) Decision {
		t.Helper()
		d, err := e.Decide(ctx, []Request{{UserID: user, IntentID: id, Channel: channel, Category: "marketing", At: at}})
		if err != nil || d[0].Err != nil {
			t.Fatal(err, d[0].Err)
		}
		return d[0]
	}
	if d := decide(1, "x", "push", T0); d.Outcome != Allowed {
		t.Fatalf("x: %+v", d)
	}
	if d := decide(1, "y", "push", T0.Add(time.Second)); d.Outcome != Capped {
		t.Fatalf("y: %+v", d)
	}
	for u := range uint64(5000) {
		decide(1000+u, "z", "sms", T0.Add(2*time.Second))
	}
	if d := decide(1, "x", "push", T0.Add(3*time.Second)); d.Outcome != Duplicate {
		t.Fatalf("retry of x after 5000 other users were allowed: %+v, want duplicate", d)
	}

	// User 2 is allowed more emails than the cache keeps ids, then capped
	// on push; a retry of the first email is a duplicate.
	for i := range maxAllowedIDs + 2 {
		if d := decide(2, fmt.Sprint("e", i), "email", T0.Add(time.Duration(i)*time.Millisecond)); d.Outcome != Allowed {
			t.Fatalf("e%d: %+v", i, d)
		}
	}
	if d := decide(2, "p0", "push", T0.Add(time.Second)); d.Outcome != Allowed {
		t.Fatalf("p0: %+v", d)
	}
	if d := decide(2, "p", "push", T0.Add(time.Second)); d.Outcome != Capped {
		t.Fatalf("p: %+v", d)
	}
	if d := decide(2, "e0", "email", T0.Add(2*time.Second)); d.Outcome != Duplicate {
		t.Fatalf("retry of e0: %+v, want duplicate", d)
	}
}

// TestRefusalCacheOverflowIsRemembered: a user allowed more ids than the
// cache keeps, with nothing full meanwhile, then capped: the cache still
// knows it cannot tell the user's ids apart, so a retry of the first id is
// a duplicate (Redis), not capped.
func TestRefusalCacheOverflowIsRemembered(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	rules := testOptions(Options{}).Rules
	rules.Segments, rules.Default = nil, Policy{Limits: []Limit{{Name: "hourly", Window: time.Hour, Max: maxAllowedIDs + 2}}}
	e := newEngine(t, r.Client(), Options{Rules: rules, RefusalCacheSize: 100, RefusalCacheTTL: time.Minute})
	ctx := context.Background()
	decide := func(id string, at time.Time) Decision {
		t.Helper()
		d, err := e.Decide(ctx, []Request{{UserID: 3, IntentID: id, Channel: "push", Category: "marketing", At: at}})
		if err != nil || d[0].Err != nil {
			t.Fatal(err, d[0].Err)
		}
		return d[0]
	}
	for i := range maxAllowedIDs + 2 {
		if d := decide(fmt.Sprint("a", i), T0.Add(time.Duration(i)*time.Millisecond)); d.Outcome != Allowed {
			t.Fatalf("a%d: %+v", i, d)
		}
	}
	if d := decide("b", T0.Add(time.Second)); d.Outcome != Capped {
		t.Fatalf("b: %+v", d)
	}
	if d := decide("a0", T0.Add(2*time.Second)); d.Outcome != Duplicate {
		t.Fatalf("retry of a0: %+v, want duplicate", d)
	}
}

// BenchmarkRefusalCacheBytes measures what the refusal cache costs per user
// (Go heap after a collection, per user held) with one refusal and no ids,
// the common case in a blast, and with 8 ids allowed, and prints the ratio
// to the estimate the byte budget counts with (memo.cost): at most 1x means
// the budget is not exceeded.
func BenchmarkRefusalCacheBytes(b *testing.B) {
	set, err := compileRules(benchRules(), 24*time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	const users = 200_000
	for _, ids := range []int{0, 8} {
		var estimate int64
		per := func() float64 {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			rc, err := newRefusals(0, math.MaxInt64, time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			for u := range uint64(users) {
				r := Request{UserID: u, Segment: "bench", IntentID: fmt.Sprint("r", u), Channel: "push", Category: "marketing", At: T0}
				c := set.plan(&r, nil)
				var idem []byte
				for i := range ids {
					d := digest(fmt.Sprint("a", u, "-", i))
					idem = append(idem, d[:digestSize]...)
					idem = binary.BigEndian.AppendUint32(idem, uint32(T0.Unix()))
				}
				rc.remember(set, &r, c, Decision{Outcome: Capped, Limit: "daily", RetryAfter: RetryAfter{In: time.Hour}, At: T0}, string(idem), true)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			estimate = rc.bytes / int64(rc.users.Len())
			runtime.KeepAlive(rc)
			return float64(after.HeapAlloc-before.HeapAlloc) / users
		}
		var got float64
		for range b.N {
			got = per()
		}
		b.Logf("refusal cache, one refusal and %d ids: %.0f bytes per user measured, %d counted by the budget (%.2fx)", ids, got, estimate, got/float64(estimate))
		b.ReportMetric(got, fmt.Sprintf("bytes/user-%dids", ids))
		b.ReportMetric(got/float64(estimate), fmt.Sprintf("measured-x-budget-%dids", ids))
	}
}

// TestRefusalCacheBudget: the cache keeps what its byte budget holds, the
// least recently used users going first.
func TestRefusalCacheBudget(t *testing.T) {
	set, err := compileRules(benchRules(), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := newRefusals(0, 100*MemoBytes, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	refuse := func(u uint64) {
		r := Request{UserID: u, Segment: "bench", IntentID: fmt.Sprint("r", u), Channel: "push", Category: "marketing", At: T0}
		rc.remember(set, &r, set.plan(&r, nil), Decision{Outcome: Capped, Limit: "daily", RetryAfter: RetryAfter{In: time.Hour}, At: T0}, "", true)
	}
	for u := range uint64(1000) {
		refuse(u)
		if u >= 10 {
			rc.memoOf(3) // user 3 stays recent
		}
	}
	if n := rc.users.Len(); n < 90 || n > 100 || rc.bytes > 100*MemoBytes {
		t.Fatalf("%d users, %d bytes, want about 100 users within %d bytes", n, rc.bytes, 100*MemoBytes)
	}
	if rc.memoOf(3) == nil || rc.memoOf(999) == nil || rc.memoOf(500) != nil {
		t.Fatalf("the least recently used users were not the ones dropped")
	}
	rc.forget()
	if rc.bytes != 0 || rc.users.Len() != 0 {
		t.Fatalf("after forget: %d users, %d bytes", rc.users.Len(), rc.bytes)
	}
}

// TestRefusalCacheRounds: a user's intents in a row in one batch (a blast
// that sends each user several) are decided in rounds, so that the cache
// answers what follows a refusal: four intents against a cap of one cost
// two script calls, with the answers Redis would give.
func TestRefusalCacheRounds(t *testing.T) {
	c := testenv.StartRedis(t, testenv.RedisOptions{}).Client()
	reg := prometheus.NewRegistry()
	e := newEngine(t, c, Options{Rules: Rules{Default: Policy{Limits: []Limit{{Name: "daily", Window: day, Max: 1}}}},
		RefusalCacheSize: 100, RefusalCacheTTL: time.Minute, Registerer: reg})
	var reqs []Request
	for u := range uint64(3) {
		for k := range 4 {
			reqs = append(reqs, Request{UserID: 10 + u, IntentID: fmt.Sprint(u, "-", k), Channel: "push", Category: "marketing", At: T0.Add(time.Duration(k) * time.Second)})
		}
	}
	got, err := e.Decide(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range got {
		want := Capped
		if i%4 == 0 {
			want = Allowed
		}
		if d.Err != nil || d.Outcome != want || want == Capped && (d.Limit != "daily" || d.RetryAfter.In != day+time.Second-time.Duration(i%4)*time.Second) {
			t.Fatalf("intent %s: %+v, want %s", reqs[i].IntentID, d, want)
		}
	}
	if calls := evalCalls(t, c); calls != 6 {
		t.Fatalf("%d script calls for 3 users with 4 intents each, want 6 (one allowed, one refused each)", calls)
	}
	if hits := counterValue(t, reg, "capper_refusal_cache_hits_total", nil); hits != 6 {
		t.Fatalf("%v answers from the cache, want 6", hits)
	}
}
