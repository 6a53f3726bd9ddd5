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

// TestGiveBackOfAnAnsweredAttempt: a give-back whose attempt was answered
// (Answered: a send handed back to be decided again) takes the send out
// and forgets the id as any give-back, but voids nothing: the intent
// decided again in the same second is allowed and counts. Without Answered
// that decision is voided. An answered give-back that finds no entry of
// the id writes nothing. Memory answers each step as Redis does and holds
// the same records, byte for byte.
func TestGiveBackOfAnAnsweredAttempt(t *testing.T) {
	rdb := testenv.StartRedis(t, testenv.RedisOptions{}).Client()
	idem := time.Hour
	rules := Rules{Default: Policy{Limits: []Limit{{Name: "daily", Window: day, Max: 1}}}}
	e := newEngine(t, rdb, Options{Rules: rules, IdempotencyWindow: idem, KeyPrefix: "answered"})
	mem := newTestMemory(t, e.set.Load().rules, idem)
	ctx := context.Background()
	at := time.Now().Truncate(time.Second)
	decide := func(uid uint64, id string, at time.Time) Decision {
		t.Helper()
		r := Request{UserID: uid, IntentID: id, Campaign: "c", Channel: "push", Category: "marketing", At: at}
		ds, err := e.Decide(ctx, []Request{r})
		if err != nil {
			t.Fatal(err)
		}
		d, m := ds[0], mem.Decide(&r)
		switch {
		case d.Err != nil || m.Err != nil:
			if !errors.Is(d.Err, ErrVoided) || !errors.Is(m.Err, ErrVoided) {
				t.Fatalf("user %d intent %s: Redis %+v, Memory %+v", uid, id, d, m)
			}
		default:
			if err := compare(m, d, compareOpts{}); err != nil {
				t.Fatalf("user %d intent %s: Memory against Redis: %v", uid, id, err)
			}
		}
		return d
	}
	giveBack := func(uid uint64, id string, answered bool, want RefundResult) {
		t.Helper()
		r := RefundRequest{UserID: uid, IntentID: id, Forget: true, Answered: answered, Attempts: []time.Time{at}}
		res, err := e.Refund(ctx, []RefundRequest{r})
		if err != nil || res[0].Err != nil || res[0].Result != want {
			t.Fatalf("give-back of user %d intent %s (answered %v): %+v %v, want %s", uid, id, answered, res, err, want)
		}
		if m := mem.Refund(r); m != want {
			t.Fatalf("give-back of user %d intent %s (answered %v) in Memory: %s, want %s", uid, id, answered, m, want)
		}
	}
	record := func(uid uint64) string {
		t.Helper()
		rec, err := rdb.HGet(ctx, e.keys.bucket(uid), field(uid)).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		return rec
	}

	// Answered: the same intent in the same second is allowed, and counts.
	if d := decide(1, "held", at); d.Err != nil || d.Outcome != Allowed {
		t.Fatalf("first decision: %+v, want allowed", d)
	}
	giveBack(1, "held", true, RefundApplied)
	d5 := digest("held")
	if ents := entriesOf(record(1)); slices.Contains(ents, string(d5[:digestSize])) || slices.Contains(ents, voidDigest(string(d5[:digestSize]))) {
		t.Fatalf("after an answered give-back: entries %x, want neither the id's nor a voided one", ents)
	}
	if d := decide(1, "held", at.Add(400*time.Millisecond)); d.Err != nil || d.Outcome != Allowed {
		t.Fatalf("decided again in the same second: %+v, want allowed (not voided, not a duplicate)", d)
	}
	if d := decide(1, "next", at.Add(time.Second)); d.Err != nil || d.Outcome != Capped {
		t.Fatalf("the user's next intent: %+v, want capped (the send decided again counts)", d)
	}
	if d := decide(1, "held", at.Add(2*time.Second)); d.Err != nil || d.Outcome != Duplicate {
		t.Fatalf("the intent redelivered: %+v, want duplicate", d)
	}

	// Not answered: the attempt is voided, the same second answers ErrVoided.
	if d := decide(2, "held", at); d.Err != nil || d.Outcome != Allowed {
		t.Fatalf("first decision: %+v, want allowed", d)
	}
	giveBack(2, "held", false, RefundApplied)
	if d := decide(2, "held", at.Add(400*time.Millisecond)); !errors.Is(d.Err, ErrVoided) {
		t.Fatalf("decided again in the voided second: %+v, want ErrVoided", d)
	}
	if d := decide(2, "next", at.Add(time.Second)); d.Err != nil || d.Outcome != Allowed {
		t.Fatalf("the user's next intent: %+v, want allowed (nothing counts)", d)
	}

	// Answered, known id with nothing left to remove: the entry goes all the same.
	if d := decide(3, "refunded", at); d.Err != nil || d.Outcome != Allowed {
		t.Fatalf("first decision: %+v, want allowed", d)
	}
	if res, err := e.Refund(ctx, []RefundRequest{{UserID: 3, IntentID: "refunded"}}); err != nil || res[0].Result != RefundApplied {
		t.Fatalf("refund: %+v %v, want applied", res, err)
	}
	if m := mem.Refund(RefundRequest{UserID: 3, IntentID: "refunded"}); m != RefundApplied {
		t.Fatalf("refund in Memory: %s, want applied", m)
	}
	giveBack(3, "refunded", true, RefundNothing)
	if d := decide(3, "refunded", at.Add(400*time.Millisecond)); d.Err != nil || d.Outcome != Allowed {
		t.Fatalf("decided again in the same second: %+v, want allowed", d)
	}

	// Answered, no entry of the id: nothing written, in a record or without one.
	if d := decide(4, "other", at); d.Err != nil || d.Outcome != Allowed {
		t.Fatalf("first decision: %+v, want allowed", d)
	}
	before, x := record(4), rdb.HGet(ctx, e.keys.bucket(4), xField).Val()
	giveBack(4, "absent", true, RefundUnknown)
	if after, x2 := record(4), rdb.HGet(ctx, e.keys.bucket(4), xField).Val(); after != before || x2 != x {
		t.Fatalf("an answered give-back that found nothing changed the record %x to %x, x %x to %x", before, after, x, x2)
	}
	users := mem.Users()
	giveBack(1000, "absent", true, RefundUnknown)
	if n := rdb.Exists(ctx, e.keys.bucket(1000)).Val(); n != 0 {
		t.Fatal("an answered give-back to a user without a record made a bucket")
	}
	if mem.Users() != users {
		t.Fatalf("Memory holds %d records after an answered give-back to a user without one, want %d", mem.Users(), users)
	}
	sameAsRedis(t, rdb, mem, "answered")
}
