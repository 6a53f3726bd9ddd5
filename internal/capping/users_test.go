package capping

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

// userRules are the test rules with users' limits: a tier "fewer" (1 a
// day, 3 a week) and a tier "quiet" that defers, push and sms may be
// turned down, counted over 7 days.
func userRules() Rules {
	r := testRules()
	r.Users = &UserRules{
		Tiers: []UserTier{
			{Name: "fewer", Limits: []Limit{{Name: "daily", Window: day, Max: 1}, {Name: "weekly", Window: 7 * day, Max: 3}}},
			{Name: "later", Limits: []Limit{{Name: "hourly", Window: time.Hour, Max: 1, OnCap: Defer, MaxDefer: 2 * time.Hour}}},
		},
		Channels:      []string{"push", "sms"},
		ChannelWindow: 7 * day,
		MaxPerChannel: 5,
		MaxDefer:      24 * time.Hour,
	}
	return r
}

func decideUser(t *testing.T, e *Engine, r Request) Decision {
	t.Helper()
	ds, err := e.Decide(context.Background(), []Request{r})
	if err != nil || ds[0].Err != nil {
		t.Fatalf("decide %s: %v %v", r.IntentID, err, ds[0].Err)
	}
	return ds[0]
}

func setLimits(t *testing.T, e *Engine, uid uint64, u UserLimits) {
	t.Helper()
	if p := e.set.Load().rules.UserProblems(u); len(p) > 0 {
		t.Fatalf("limits %+v: %v", u, p.Err())
	}
	if _, err := e.SetUserLimits(context.Background(), uid, u); err != nil {
		t.Fatal(err)
	}
}

// TestUserLimits: each of a user's own limits, as the script decides it.
func TestUserLimits(t *testing.T) {
	rdb := testenv.StartRedis(t, testenv.RedisOptions{})
	// A simulated day: the engine's clock is at it too, so what is left
	// of a snooze is measured there (never against the server's clock).
	at := time.Date(2026, 11, 27, 15, 0, 0, 0, time.UTC) // 10:00 in New York
	e := newEngine(t, rdb.Client(), Options{Rules: userRules(), IdempotencyWindow: 48 * time.Hour, Clock: func() time.Time { return at }})
	n := 0
	req := func(uid uint64, channel, category string, at time.Time) Request {
		n++
		return Request{UserID: uid, Segment: "active", IntentID: fmt.Sprintf("i%d", n), Campaign: fmt.Sprintf("c%d", n), Channel: channel, Category: category, At: at}
	}

	t.Run("snooze", func(t *testing.T) {
		until := at.Add(3 * time.Hour)
		setLimits(t, e, 1, UserLimits{SnoozeUntil: until})
		d := decideUser(t, e, req(1, "push", "marketing", at))
		if d.Outcome != Deferred || d.Reason != ReasonSnoozed || !d.NotBefore.Equal(until) {
			t.Fatalf("snoozed push: %+v, want deferred (snoozed) to %v", d, until)
		}
		if d := decideUser(t, e, req(1, "push", "transactional", at)); d.Outcome != Exempt {
			t.Fatalf("exempt intent of a snoozed user: %v, want exempt", d.Outcome)
		}
		if d := decideUser(t, e, req(1, "push", "marketing", until)); d.Outcome != Allowed {
			t.Fatalf("at the snooze's end: %v, want allowed", d.Outcome)
		}
		setLimits(t, e, 2, UserLimits{SnoozeUntil: at.Add(48 * time.Hour)})
		if d := decideUser(t, e, req(2, "email", "marketing", at)); d.Outcome != Cancelled || d.Reason != ReasonSnoozeTooLong {
			t.Fatalf("snoozed past max_defer: %+v, want cancelled (snooze-too-long)", d)
		}
		setLimits(t, e, 3, UserLimits{SnoozeUntil: at.Add(time.Hour), SnoozeChannels: []string{"sms", "push"}})
		if d := decideUser(t, e, req(3, "email", "marketing", at)); d.Outcome != Allowed {
			t.Fatalf("email of a user who snoozed push and sms: %v, want allowed", d.Outcome)
		}
		if d := decideUser(t, e, req(3, "sms", "marketing", at)); d.Reason != ReasonSnoozed {
			t.Fatalf("sms of a user who snoozed sms: %+v", d)
		}
	})

	t.Run("quiet hours", func(t *testing.T) {
		// 22:00-11:00 in New York covers 10:00 there (UTC-5): it ends at
		// 11:00 local, 16:00 UTC.
		setLimits(t, e, 10, UserLimits{Quiet: &UserQuiet{From: 22 * 60, To: 11 * 60}})
		d := decideUser(t, e, req(10, "push", "marketing", at))
		if want := at.Add(time.Hour); d.Outcome != Deferred || d.Reason != ReasonUserQuietHours || !d.NotBefore.Equal(want) {
			t.Fatalf("in the user's quiet hours: %+v, want deferred (user-quiet-hours) to %v", d, want)
		}
		r := req(10, "push", "marketing", at)
		r.TimeZone = mustZone(t, "Europe/Berlin") // 16:00 there: outside
		if d := decideUser(t, e, r); d.Outcome != Allowed {
			t.Fatalf("outside the user's quiet hours in their zone: %+v", d)
		}
	})

	t.Run("tier", func(t *testing.T) {
		setLimits(t, e, 20, UserLimits{Tier: "fewer"})
		if d := decideUser(t, e, req(20, "push", "marketing", at)); d.Outcome != Allowed {
			t.Fatalf("first of the day: %v", d.Outcome)
		}
		d := decideUser(t, e, req(20, "email", "marketing", at.Add(time.Hour)))
		if d.Outcome != Capped || d.Limit != "user-tier/fewer/daily" || d.RetryAfter.In != 23*time.Hour+time.Second {
			t.Fatalf("second of the day: %+v, want capped by user-tier/fewer/daily for 23h0m1s", d)
		}
		// Without the tier the segment's caps (5 a day) allow it.
		setLimits(t, e, 20, UserLimits{})
		if d := decideUser(t, e, req(20, "email", "marketing", at.Add(time.Hour))); d.Outcome != Allowed {
			t.Fatalf("after leaving the tier: %v", d.Outcome)
		}
		setLimits(t, e, 21, UserLimits{Tier: "later"})
		decideUser(t, e, req(21, "push", "marketing", at))
		d = decideUser(t, e, req(21, "push", "marketing", at.Add(10*time.Minute)))
		if d.Outcome != Deferred || d.Reason != ReasonCap || !d.NotBefore.Equal(at.Add(time.Hour+time.Second)) {
			t.Fatalf("a tier that defers: %+v", d)
		}
	})

	t.Run("channel", func(t *testing.T) {
		setLimits(t, e, 30, UserLimits{Channels: map[string]int{"sms": 0, "push": 1}})
		d := decideUser(t, e, req(30, "sms", "marketing", at))
		if d.Outcome != Capped || d.Limit != "user-channel/sms" || !d.RetryAfter.Never {
			t.Fatalf("sms turned off: %+v", d)
		}
		if d := decideUser(t, e, req(30, "push", "marketing", at)); d.Outcome != Allowed {
			t.Fatalf("first push: %v", d.Outcome)
		}
		if d := decideUser(t, e, req(30, "push", "marketing", at.Add(time.Hour))); d.Outcome != Capped || d.Limit != "user-channel/push" {
			t.Fatalf("second push in a week: %+v", d)
		}
		if d := decideUser(t, e, req(30, "email", "marketing", at)); d.Outcome != Allowed {
			t.Fatalf("email: %v", d.Outcome)
		}
		// A push before the limit was set counts: the channel's log keeps
		// every user's sends.
		decideUser(t, e, req(31, "push", "marketing", at))
		setLimits(t, e, 31, UserLimits{Channels: map[string]int{"push": 1}})
		if d := decideUser(t, e, req(31, "push", "marketing", at.Add(time.Minute))); d.Outcome != Capped {
			t.Fatalf("push after one sent before the limit: %v", d.Outcome)
		}
	})

	t.Run("bypass", func(t *testing.T) {
		setLimits(t, e, 40, UserLimits{SnoozeUntil: at.Add(time.Hour)})
		r := req(40, "push", "marketing", at)
		r.Campaign, r.Override = "alert", Bypass
		if d := decideUser(t, e, r); d.Outcome != Allowed || d.Override != Bypass {
			t.Fatalf("an honoured bypass of a snoozed user: %+v", d)
		}
	})
}

// TestUserLimitsKeepBucket: a bucket holding anyone's limits never
// expires; once the last limits in it go, it expires again, and forgetting
// a user leaves nothing of them.
func TestUserLimitsKeepBucket(t *testing.T) {
	rdb := testenv.StartRedis(t, testenv.RedisOptions{})
	c := rdb.Client()
	e := newEngine(t, c, Options{Rules: userRules()})
	ctx := context.Background()
	at := time.Now().Truncate(time.Second)
	key := e.keys.bucket(64)
	decideUser(t, e, Request{UserID: 64, Segment: "new", IntentID: "a", Channel: "push", Category: "marketing", At: at})
	decideUser(t, e, Request{UserID: 65, Segment: "new", IntentID: "b", Channel: "push", Category: "marketing", At: at})
	ttl := func() time.Duration { return c.TTL(ctx, key).Val() }
	if ttl() <= 0 {
		t.Fatalf("a bucket of records: TTL %v, want one", ttl())
	}
	setLimits(t, e, 64, UserLimits{Tier: "fewer"})
	setLimits(t, e, 65, UserLimits{Channels: map[string]int{"sms": 0}})
	if ttl() != -1 {
		t.Fatalf("a bucket holding limits: TTL %v, want none", ttl())
	}
	// A decision does not set one again.
	decideUser(t, e, Request{UserID: 66, Segment: "new", IntentID: "c", Channel: "push", Category: "marketing", At: at})
	if ttl() != -1 {
		t.Fatalf("after a decision: TTL %v, want none", ttl())
	}
	if got, err := e.UserLimits(ctx, 64); err != nil || got.Tier != "fewer" {
		t.Fatalf("UserLimits: %+v %v", got, err)
	}
	if n, err := e.UsersWithLimits(ctx); err != nil || n != 2 {
		t.Fatalf("UsersWithLimits: %d %v, want 2", n, err)
	}
	setLimits(t, e, 64, UserLimits{})
	if ttl() != -1 {
		t.Fatalf("one user's limits left: TTL %v, want none", ttl())
	}
	f, err := e.ForgetUser(ctx, 65)
	if err != nil || f.Limits.Channels["sms"] != 0 || len(f.Limits.Channels) != 1 || f.RecordBytes == 0 {
		t.Fatalf("ForgetUser: %+v %v", f, err)
	}
	if ttl() <= 0 {
		t.Fatalf("no one's limits left: TTL %v, want one", ttl())
	}
	if n, err := e.UsersWithLimits(ctx); err != nil || n != 0 {
		t.Fatalf("UsersWithLimits after clearing and forgetting: %d %v, want 0", n, err)
	}
	all := c.HGetAll(ctx, key).Val()
	for _, fld := range []string{"1", "u1", "u0"} { // 65 is field 1, 64 field 0
		if _, ok := all[fld]; ok {
			t.Fatalf("field %s left in %v", fld, all)
		}
	}
	if _, ok := all["2"]; !ok {
		t.Fatalf("user 66's record gone: %v", all)
	}
	// The decide script's sweep of old records leaves limits alone.
	setLimits(t, e, 67, UserLimits{Tier: "fewer"})
	c.HSet(ctx, key, "y", "\x00\x00\x00\x00\x01")
	decideUser(t, e, Request{UserID: 66, Segment: "new", IntentID: "d", Channel: "push", Category: "marketing", At: at.Add(48 * time.Hour)})
	if v, err := c.HGet(ctx, key, "u3").Result(); err != nil || v == "" {
		t.Fatalf("user 67's limits after a sweep: %q %v", v, err)
	}
}

// TestSnoozeOnlyBucketExpires: a bucket whose users hold only snoozes
// lives at least until the last snooze ends, and expires afterwards (an
// ended snooze goes with its bucket); a lasting limit keeps it.
func TestSnoozeOnlyBucketExpires(t *testing.T) {
	rdb := testenv.StartRedis(t, testenv.RedisOptions{})
	c := rdb.Client()
	e := newEngine(t, c, Options{Rules: userRules()})
	ctx := context.Background()
	key := e.keys.bucket(320)
	ttl := func() time.Duration { return c.TTL(ctx, key).Val() }
	until := time.Now().Add(3 * time.Hour).Truncate(time.Second)
	setLimits(t, e, 320, UserLimits{SnoozeUntil: until})
	if d := ttl(); d < 3*time.Hour-time.Minute {
		t.Fatalf("a bucket holding a 3h snooze: TTL %v, want at least until it ends", d)
	}
	if x, _, ok := readMark(c.HGet(ctx, key, xField).Val()); !ok || x != until.Unix() {
		t.Fatalf("x = %d (a mark: %t), want the snooze's end %d", x, ok, until.Unix())
	}
	setLimits(t, e, 321, UserLimits{Tier: "fewer"})
	if d := ttl(); d != -1 {
		t.Fatalf("with a tier beside the snooze: TTL %v, want none", d)
	}
	setLimits(t, e, 321, UserLimits{})
	if d := ttl(); d < 3*time.Hour-time.Minute {
		t.Fatalf("the tier gone, the snooze left: TTL %v", d)
	}
	// A decision long before the snooze's end does not shorten it.
	decideUser(t, e, Request{UserID: 322, Segment: "new", IntentID: "a", Channel: "push", Category: "marketing", At: time.Now()})
	if d := ttl(); d < 3*time.Hour-time.Minute {
		t.Fatalf("after a decision: TTL %v", d)
	}
	// Nothing left but an ended snooze and no record: the bucket goes.
	key2 := e.keys.bucket(640)
	setLimits(t, e, 640, UserLimits{SnoozeUntil: time.Now().Add(-time.Hour)})
	setLimits(t, e, 641, UserLimits{})
	if n := c.Exists(ctx, key2).Val(); n != 0 {
		t.Fatalf("a bucket with only an ended snooze: exists")
	}
}

// TestUserTierExactUnderConcurrency: workers deciding one user's intents at
// once on a cluster send no more than the tier allows.
func TestUserTierExactUnderConcurrency(t *testing.T) {
	cl := testenv.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = c.Close() })
	var engines []*Engine
	for range 4 {
		engines = append(engines, newEngine(t, c, Options{Rules: userRules()}))
	}
	at := time.Now().Truncate(time.Second)
	const users = 20
	for u := range uint64(users) {
		setLimits(t, engines[0], 1000+u, UserLimits{Tier: "fewer"})
	}
	var allowed [users]atomic.Int32
	var wg sync.WaitGroup
	for w, e := range engines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var reqs []Request
			for i := range 10 {
				for u := range uint64(users) {
					reqs = append(reqs, Request{UserID: 1000 + u, Segment: "active", IntentID: fmt.Sprintf("w%d-%d", w, i), Channel: "push", Category: "marketing", At: at})
				}
			}
			ds, err := e.Decide(context.Background(), reqs)
			if err != nil {
				t.Error(err)
				return
			}
			for i, d := range ds {
				if d.Err != nil {
					t.Error(d.Err)
				}
				if d.Outcome == Allowed {
					allowed[reqs[i].UserID-1000].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for u := range allowed {
		if n := allowed[u].Load(); n != 1 {
			t.Errorf("user %d: %d allowed, the tier allows 1 a day", 1000+u, n)
		}
	}
}

// TestUserLimitsWaitForReplicas: with WaitReplicas, a user's limits are
// set once a replica has them, and setting them fails (the applier retries,
// never commits) while no replica acknowledges.
func TestUserLimitsWaitForReplicas(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	replica := testenv.ReplicaOf(t, master)
	e := newEngine(t, master.Client(), Options{Rules: userRules(), WaitReplicas: 1, WaitTimeout: 300 * time.Millisecond})
	ctx := context.Background()
	setLimits(t, e, 7, UserLimits{Tier: "fewer"})
	if v := replica.Client().HGet(ctx, e.keys.bucket(7), userField(7)).Val(); v != (UserLimits{Tier: "fewer"}).Encode() {
		t.Fatalf("the replica holds %q once set returned", v)
	}
	replica.Pause()
	defer replica.Resume()
	_, err := e.SetUserLimits(ctx, 8, UserLimits{Tier: "fewer"})
	if err == nil || !strings.Contains(err.Error(), "not replicated") {
		t.Fatalf("set with the replica paused: %v, want not replicated", err)
	}
	if _, err := e.ForgetUser(ctx, 7); err == nil {
		t.Fatal("forget with the replica paused: no error")
	}
}
