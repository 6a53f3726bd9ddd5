package capping

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestGiveBackVoidsALateAttempt: an attempt whose answer was lost, and
// which Redis runs only after the intent was given back (a stalled server
// running what was queued long ago: here the proxy holds the call back),
// records nothing: the give-back voided it, at once, without waiting until
// no attempt could run any more. The id can be decided again later (a
// deferred intent that comes back), and another id in the same second is
// not touched.
func TestGiveBackVoidsALateAttempt(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisOptions{})
	p := startProxy(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 300 * time.Millisecond, MaxRetries: -1, PoolSize: 1})
	t.Cleanup(func() { _ = c.Close() })
	rules := Rules{Default: Policy{Limits: []Limit{{Name: "daily", Window: day, Max: 2}}}}
	e := newEngine(t, c, Options{Rules: rules})
	ctx := context.Background()
	at := time.Now().Truncate(time.Second)
	req := func(id string, at time.Time) Request {
		return Request{UserID: 9, IntentID: id, Campaign: "c", Channel: "push", Category: "marketing", At: at}
	}
	decide := func(r Request) Decision {
		t.Helper()
		ds, err := e.Decide(ctx, []Request{r})
		if err != nil {
			t.Fatal(err)
		}
		return ds[0]
	}
	count := func() int {
		t.Helper()
		st, err := e.Inspect(ctx, 9, "", InspectOptions{At: at.Add(2 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		return st[0].Count
	}
	if d := decide(req("warm", at.Add(-time.Hour))); d.Err != nil || d.Outcome != Allowed {
		t.Fatalf("warm-up: %+v", d)
	}

	p.holding.Store(true)
	if d := decide(req("lost", at)); d.Err == nil {
		t.Fatalf("the held call was answered: %+v", d)
	}
	res, err := e.Refund(ctx, []RefundRequest{{UserID: 9, IntentID: "lost", Forget: true, Attempts: []time.Time{at}}})
	if err != nil || res[0].Err != nil || res[0].Result != RefundUnknown {
		t.Fatalf("give-back before the attempt ran: %+v %v, want unknown (nothing recorded yet)", res, err)
	}
	if p.release() != 1 {
		t.Fatal("no call held back")
	}
	waitFor(t, "Redis to run the held call", func() bool { return p.released.Load() > 0 })
	if n := count(); n != 1 {
		t.Fatalf("%d sends counted after the voided attempt ran, want 1 (the warm-up's)", n)
	}

	// The same id, in the same second: voided too (a retry goes on).
	if d := decide(req("lost", at)); !errors.Is(d.Err, ErrVoided) {
		t.Fatalf("the id decided again in the voided second: %+v, want ErrVoided", d)
	}
	// Another id in that second, and the id later, are decided as usual.
	if d := decide(req("other", at)); d.Err != nil || d.Outcome != Allowed {
		t.Fatalf("another intent in the voided second: %+v, want allowed", d)
	}
	if d := decide(req("lost", at.Add(time.Second))); d.Err != nil || d.Outcome != Capped {
		t.Fatalf("the given-back intent decided again: %+v, want capped (2 a day: warm and other)", d)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d sends counted, want 2", n)
	}
}

// TestGiveBackOfARecordedAttempt: a lost attempt that Redis ran before the
// give-back counted the send; the give-back takes it out, forgets the id
// and voids the attempt, so a second copy of the same call (go-redis
// re-sends a pipeline after a broken connection) records nothing either.
func TestGiveBackOfARecordedAttempt(t *testing.T) {
	rdb := testenv.StartRedis(t, testenv.RedisOptions{}).Client()
	rules := Rules{Default: Policy{Limits: []Limit{{Name: "daily", Window: day, Max: 1}}}}
	e := newEngine(t, rdb, Options{Rules: rules})
	ctx := context.Background()
	at := time.Now().Truncate(time.Second)
	r := Request{UserID: 4, IntentID: "twice", Campaign: "c", Channel: "push", Category: "marketing", At: at}
	if ds, err := e.Decide(ctx, []Request{r}); err != nil || ds[0].Outcome != Allowed {
		t.Fatalf("first run: %+v %v", ds, err)
	}
	res, err := e.Refund(ctx, []RefundRequest{{UserID: 4, IntentID: "twice", Forget: true, Attempts: []time.Time{at.Add(-time.Second), at}}})
	if err != nil || res[0].Result != RefundApplied {
		t.Fatalf("give-back: %+v %v, want applied", res, err)
	}
	rec, err := rdb.HGet(ctx, e.keys.bucket(4), field(4)).Result()
	if err != nil {
		t.Fatal(err)
	}
	d := digest("twice")
	ents := entryStrings(rec)
	for _, s := range []time.Time{at.Add(-time.Second), at} {
		if !slices.Contains(ents, voidDigest(string(d[:digestSize]))+packTime(s.Unix())) {
			t.Fatalf("no voided entry at %v in %x", s, rec)
		}
	}
	if slices.Contains(entriesOf(rec), string(d[:digestSize])) {
		t.Fatalf("the given-back id still has its entry: %x", rec)
	}
	if ds, _ := e.Decide(ctx, []Request{r}); !errors.Is(ds[0].Err, ErrVoided) {
		t.Fatalf("the same call again: %+v, want ErrVoided", ds[0])
	}
	r.IntentID, r.At = "next", at.Add(time.Second)
	if ds, err := e.Decide(ctx, []Request{r}); err != nil || ds[0].Outcome != Allowed {
		t.Fatalf("the user's next intent: %+v %v, want allowed (the given-back send does not count)", ds, err)
	}
}

// TestGiveBackMakesALivingBucket: a give-back to a user with no bucket
// makes one that expires (the idempotency window), with x 0 so that the
// next decision extends it as its own; one to a bucket that never expires
// (a user's lasting limits) leaves it so.
func TestGiveBackMakesALivingBucket(t *testing.T) {
	rdb := testenv.StartRedis(t, testenv.RedisOptions{}).Client()
	e := newEngine(t, rdb, Options{Rules: userRules(), IdempotencyWindow: time.Hour})
	ctx := context.Background()
	at := time.Now()
	giveBack := func(uid uint64) {
		t.Helper()
		res, err := e.Refund(ctx, []RefundRequest{{UserID: uid, IntentID: "gone", Forget: true, Attempts: []time.Time{at}}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("give-back: %+v %v", res, err)
		}
	}
	giveBack(70)
	key := e.keys.bucket(70)
	if ttl := rdb.TTL(ctx, key).Val(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("a bucket a give-back made lives %v, want up to the idempotency window (1h)", ttl)
	}
	if x := rdb.HGet(ctx, key, xField).Val(); x != "0" {
		t.Fatalf("x of a bucket a give-back made: %q, want 0", x)
	}
	r := Request{UserID: 70, Segment: "active", IntentID: "next", Campaign: "c", Channel: "push", Category: "marketing", At: at}
	if ds, err := e.Decide(ctx, []Request{r}); err != nil || ds[0].Outcome != Allowed {
		t.Fatalf("decided after the give-back: %+v %v", ds, err)
	}
	if ttl := rdb.TTL(ctx, key).Val(); ttl <= time.Hour {
		t.Fatalf("the next decision left the bucket living %v, want its own life (past the window)", ttl)
	}

	setLimits(t, e, 100, UserLimits{Tier: "fewer"})
	giveBack(100)
	if ttl := rdb.TTL(ctx, e.keys.bucket(100)).Val(); ttl != -1 {
		t.Fatalf("a bucket holding a user's tier lives %v after a give-back, want no expiry", ttl)
	}
}
