package capping

import (
	"context"
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
