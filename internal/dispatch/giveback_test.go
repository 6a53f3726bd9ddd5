package dispatch

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capper-dev/capper/internal/capping"
)

// TestGiveBackWaitsForNobody: an intent whose attempts' answers were lost
// (Redis stalled) ends undelivered (its send-by passes meanwhile): the
// worker gives it back as soon as Redis answers again, and nobody waits
// for anything more, so a worker stopped at that moment finishes its batch
// within its shutdown timeout (2 s here; giving back used to wait until no
// lost attempt could run any more, over 10 s). The lost attempts Redis ran
// when it resumed count nothing: the user's next intent is allowed under
// one a day, and every other user's intent is delivered once.
func TestGiveBackWaitsForNobody(t *testing.T) {
	e := newEnv(t)
	e.engine = e.newEngineWith(t, capping.Rules{Default: capping.Policy{Limits: []capping.Limit{{Name: "daily", Window: 24 * time.Hour, Max: 1}}},
		Channels: []string{"push"}, Categories: []string{"marketing", "transactional"}, ExemptCategories: []string{"transactional"}, TimeZone: time.UTC})
	r := e.start(func(o *Options) { o.ShutdownTimeout = 2 * time.Second })
	ctx := context.Background()
	if err := e.redis.Client().Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	e.redis.Pause()
	resumed := false
	defer func() {
		if !resumed {
			e.redis.Resume()
		}
	}()
	sendBy := time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	late := kafka.Message{Key: []byte("1"), Value: fmt.Appendf(nil, `{"id":"late","user_id":1,"campaign_id":"c","channel":"push","send_by":%q}`, sendBy)}
	e.kafka.Produce(t, tIn, []kafka.Message{late})
	// Its attempts fail while Redis is stopped; its send-by passes.
	waitFor(t, "an attempt to fail with Redis stopped", func() bool { return testutil.ToFloat64(r.w.m.redisRetries) > 0 })
	var msgs []kafka.Message
	for u := 2; u <= 20; u++ {
		msgs = append(msgs, kafka.Message{Key: fmt.Appendf(nil, "%d", u), Value: fmt.Appendf(nil, `{"id":"o-%d","user_id":%d,"campaign_id":"c","channel":"push"}`, u, u)})
	}
	e.kafka.Produce(t, tIn, msgs)
	msgs = append(msgs, late)
	waitFor(t, "the send-by to pass", func() bool {
		at, err := time.Parse(time.RFC3339Nano, sendBy)
		return err == nil && time.Now().After(at)
	})
	// Redis answers again: the intent is cancelled (expired) at its next
	// attempt, and the worker is stopped at once.
	e.redis.Resume()
	resumed = true
	r.cancel()
	if err := r.wait(t); err != nil {
		t.Fatalf("the worker stopped with %v: the batch waited past its shutdown timeout", err)
	}
	if n := testutil.ToFloat64(r.w.m.givenBack.WithLabelValues("applied")) + testutil.ToFloat64(r.w.m.givenBack.WithLabelValues("unknown")); n != 1 {
		t.Fatalf("%v intents given back, want 1 (the expired one)", n)
	}
	// The next worker decides what the stopped one had not fetched.
	e.start(nil)
	o := e.waitOutcomes(len(msgs))
	for src, n := range o.sources() {
		if n != 1 {
			t.Errorf("input %s has %d outcomes", src, n)
		}
	}
	if len(o.sup) != 1 || headerValue(o.sup[0], "capper-reason") != "expired" {
		t.Errorf("suppressed: %d records, want the expired intent alone", len(o.sup))
	}
	// The user's next intent: nothing of the expired one counts.
	ds, err := e.engine.Decide(ctx, []capping.Request{{UserID: 1, IntentID: "next", Campaign: "c", Channel: "push", Category: "marketing", At: time.Now()}})
	if err != nil || ds[0].Err != nil || ds[0].Outcome != capping.Allowed {
		t.Fatalf("user 1's next intent: %+v %v, want allowed (the expired intent was given back)", ds, err)
	}
	e.auditOK(o)
}

// waitFor polls ok until it holds, failing the test after 30 s.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLostAnswerOfASecondCopy: a producer's retry of an intent (the same
// id) is decided in the second the first copy was recorded in (the
// worker's clock is stopped), and its answer is lost (Redis stalls). Its
// attempt found the first copy's entry and recorded nothing: Redis' next
// answer, Duplicate at that second, is the first copy's, not its own. It
// is delivered marked capper-duplicate, and the id is delivered unmarked
// once.
func TestLostAnswerOfASecondCopy(t *testing.T) {
	e := newEnv(t)
	at := time.Now().Truncate(time.Second).Add(500 * time.Millisecond)
	r := e.start(func(o *Options) { o.Now = func() time.Time { return at } })
	intent := kafka.Message{Key: []byte("1"), Value: []byte(`{"id":"twice","user_id":1,"campaign_id":"c","channel":"push"}`)}
	e.kafka.Produce(t, tIn, []kafka.Message{intent})
	if o := e.waitOutcomes(1); len(o.del) != 1 || headerValue(o.del[0], HeaderDuplicate) != "" {
		t.Fatalf("the first copy: %d deliveries, want 1 unmarked", len(o.del))
	}

	e.redis.Pause()
	resumed := false
	defer func() {
		if !resumed {
			e.redis.Resume()
		}
	}()
	e.kafka.Produce(t, tIn, []kafka.Message{intent})
	waitFor(t, "an attempt to fail with Redis stopped", func() bool { return testutil.ToFloat64(r.w.m.redisRetries) > 0 })
	e.redis.Resume()
	resumed = true
	o := e.waitOutcomes(2)
	if len(o.del) != 2 {
		t.Fatalf("%d deliveries, want 2 (the second marked)", len(o.del))
	}
	for k, m := range o.del {
		want := map[int]string{0: "", 1: "true"}[k]
		if got := headerValue(m, HeaderDuplicate); got != want {
			t.Errorf("delivery %d (%s): %s %q, want %q", k, headerValue(m, HeaderSource), HeaderDuplicate, got, want)
		}
	}
}

// TestRecent: the ids recorded in the current second, and only then; a
// give-back forgets its id.
func TestRecent(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 600e6, time.UTC)
	var r recent
	r.at(at)
	a, b, c := &capping.Request{UserID: 1, IntentID: "a"}, &capping.Request{UserID: 1, IntentID: "b"}, &capping.Request{UserID: 2, IntentID: "a"}
	r.add(a, capping.Decision{Outcome: capping.Allowed, At: at})
	r.add(b, capping.Decision{Outcome: capping.Allowed, At: at.Add(-time.Second)}) // recorded a second before
	r.add(c, capping.Decision{Outcome: capping.Capped, At: at})                    // records nothing
	if !r.recorded(a) || r.recorded(b) || r.recorded(c) {
		t.Fatalf("recorded: a %v b %v c %v, want a alone", r.recorded(a), r.recorded(b), r.recorded(c))
	}
	r.add(c, capping.Decision{Outcome: capping.Duplicate, At: at.Truncate(time.Second)}) // after the map was built
	if !r.recorded(c) {
		t.Fatal("a duplicate of an entry of this second, added after a lookup, is not recorded")
	}
	r.forget(1, "a")
	if r.recorded(a) || !r.recorded(c) {
		t.Fatalf("after a's give-back: a %v c %v, want c alone", r.recorded(a), r.recorded(c))
	}
	r.at(at.Add(400 * time.Millisecond)) // the next second
	if r.recorded(c) {
		t.Fatal("an id of the second before is still recorded")
	}
}
