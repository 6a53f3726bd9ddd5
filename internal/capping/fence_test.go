package capping

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestFenceRecordsNothingLate: with Options.Fence, a call that a stalled
// redis-server runs more than LateAfter after it was sent records nothing
// (the worker gave up on its answer, and may have given the intent back);
// one it runs in time records the send. Without Fence (a replay's engine)
// the same late call records it.
func TestFenceRecordsNothingLate(t *testing.T) {
	if testing.Short() {
		t.Skip("waits LateAfter with Redis stopped")
	}
	srv := testenv.StartRedis(t, testenv.RedisOptions{})
	// A client each, with a connection open: a new one's handshake would
	// not reach a stopped server, the calls written on an open one do.
	client := func() *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1, PoolSize: 1})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	rules := Rules{Default: Policy{Limits: []Limit{{Name: "daily", Window: day, Max: 5}}}}
	fenced := newEngine(t, client(), Options{Rules: rules, Fence: true})
	open := newEngine(t, client(), Options{Rules: rules, KeyPrefix: "open"})
	ctx := context.Background()
	at := time.Now()
	req := func(id string) Request {
		return Request{UserID: 9, IntentID: id, Campaign: "c", Channel: "push", Category: "marketing", At: at}
	}
	count := func(e *Engine) int {
		t.Helper()
		st, err := e.Inspect(ctx, 9, "", InspectOptions{At: at})
		if err != nil {
			t.Fatal(err)
		}
		return st[0].Count
	}

	srv.Pause()
	for _, e := range []*Engine{fenced, open} {
		ds, _ := e.Decide(ctx, []Request{req("late")})
		if ds[0].Err == nil {
			srv.Resume()
			t.Fatalf("decided %+v with Redis stopped", ds[0])
		}
	}
	time.Sleep(LateAfter + 1500*time.Millisecond)
	srv.Resume()
	// Redis runs both queued calls now; an answer on a new connection comes
	// after them.
	if n := count(fenced); n != 0 {
		t.Fatalf("fenced: the late call counted %d sends, want 0", n)
	}
	if n := count(open); n != 1 {
		t.Fatalf("without the fence: the late call counted %d sends, want 1", n)
	}
	ds, err := fenced.Decide(ctx, []Request{req("late")})
	if err != nil || ds[0].Err != nil || ds[0].Outcome != Allowed {
		t.Fatalf("the intent decided again: %+v %v, want allowed (the late call left no trace)", ds[0], err)
	}
	if n := count(fenced); n != 1 {
		t.Fatalf("fenced: %d sends after the intent was decided in time, want 1", n)
	}
}

// BenchmarkFenceCost prints Redis CPU per decision (INFO commandstats: time
// inside the script call) with the fence (Options.Fence: a TIME call before
// each send is recorded) and without, each engine on its own redis-server,
// taking turns batch by batch on the same mostly allowed intents, and the
// ratio fenced / unfenced measured in the same run.
func BenchmarkFenceCost(b *testing.B) {
	ctx := context.Background()
	mk := func(fence bool) (*Engine, *redis.Client) {
		c := testenv.StartRedis(b, testenv.RedisOptions{}).Client()
		return newEngine(b, c, Options{Rules: benchRules(), Fence: fence}), c
	}
	fenced, fc := mk(true)
	open, oc := mk(false)
	var usec [2]float64
	b.ResetTimer()
	for n := range b.N {
		rng := rand.New(rand.NewPCG(7, uint64(n)))
		const total = 50_000
		reqs := make([]Request, total)
		for i := range reqs {
			reqs[i] = benchRequest(rng, uint64(rng.IntN(benchUsers)), T0.Add(time.Duration(i)*time.Second))
			reqs[i].IntentID = fmt.Sprint("fence-", n, "-", i)
		}
		var before [2][2]int64
		for k, c := range []*redis.Client{fc, oc} {
			if err := c.FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			before[k][0], before[k][1] = serverUsec(b, c)
		}
		for lo := 0; lo < total; lo += 500 {
			for _, e := range []*Engine{fenced, open} {
				ds, err := e.Decide(ctx, reqs[lo:min(lo+500, total)])
				if err != nil {
					b.Fatal(err)
				}
				for _, d := range ds {
					if d.Err != nil {
						b.Fatal(d.Err)
					}
				}
			}
		}
		for k, c := range []*redis.Client{fc, oc} {
			u, calls := serverUsec(b, c)
			if calls-before[k][1] != total {
				b.Fatalf("%d script calls for %d decisions", calls-before[k][1], total)
			}
			usec[k] += float64(u-before[k][0]) / total
		}
	}
	b.StopTimer()
	f, o := usec[0]/float64(b.N), usec[1]/float64(b.N)
	b.ReportMetric(f, "fenced-us/decision")
	b.ReportMetric(o, "unfenced-us/decision")
	b.ReportMetric(f/o, "ratio")
	fmt.Printf("BenchmarkFenceCost: Redis CPU per decision %.2f us fenced, %.2f us unfenced: %.2fx\n", f, o, f/o)
}

// TestFenceFollowsSkew: the deadline and LateBy follow the masters' clock
// skews as the clock check measures them, up to maxFenceSkew.
func TestFenceFollowsSkew(t *testing.T) {
	var e Engine
	if got, want := e.LateBy(), LateAfter+time.Second; got != want {
		t.Fatalf("LateBy with no skew = %s, want %s", got, want)
	}
	e.fence.observe([]time.Duration{2 * time.Second, -3 * time.Second, time.Second})
	if got, want := e.LateBy(), LateAfter+6*time.Second; got != want {
		t.Fatalf("LateBy with masters 2s ahead and 3s behind = %s, want %s", got, want)
	}
	if d, want := int64(e.fence.deadline()), time.Now().Add(LateAfter+2*time.Second).Unix(); d < want-1 || d > want+1 {
		t.Fatalf("deadline %d, want about %d (now + LateAfter + the skew ahead)", d, want)
	}
	e.fence.observe([]time.Duration{time.Hour})
	if got, want := e.LateBy(), LateAfter+maxFenceSkew+time.Second; got != want {
		t.Fatalf("LateBy with a master an hour ahead = %s, want %s (bounded)", got, want)
	}
}

// TestFailedCallSentInItsRound: a failed decision says when its own call was
// made (Decision.Sent), in the batch's second round here, not when the
// batch began: the worker's give-back waits LateBy from then, and a call
// of a later round carries a later fence.
func TestFailedCallSentInItsRound(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisOptions{})
	p := startProxy(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 300 * time.Millisecond, MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { _ = c.Close() })
	rules := Rules{Default: Policy{Limits: []Limit{{Name: "daily", Window: day, Max: 5}}}}
	e := newEngine(t, c, Options{Rules: rules, Fence: true})
	ctx := context.Background()
	at := time.Now()
	req := func(id string) Request {
		return Request{UserID: 9, IntentID: id, Campaign: "c", Channel: "push", Category: "marketing", At: at}
	}
	if ds, err := e.Decide(ctx, []Request{req("warm")}); err != nil || ds[0].Err != nil {
		t.Fatalf("warm-up: %+v %v", ds, err)
	}
	// The user's two requests go in two rounds: the first is answered,
	// the second's reply is swallowed (its read times out).
	p.muteAt.Store(p.evalshas.Load() + 2)
	begun := time.Now()
	ds, err := e.Decide(ctx, []Request{req("first"), req("second")})
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Err != nil || ds[0].Outcome != Allowed {
		t.Fatalf("first round: %+v, want allowed", ds[0])
	}
	if ds[1].Err == nil {
		t.Fatalf("second round: %+v, want its read to fail", ds[1])
	}
	firstReply := time.Unix(0, p.replied.Load())
	if ds[1].Sent.IsZero() || ds[1].Sent.Before(firstReply) || !firstReply.After(begun) {
		t.Fatalf("the failed call was sent at %v; the batch began at %v and the first round was answered at %v: want a time after that answer",
			ds[1].Sent, begun, firstReply)
	}
}
