package capping

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

func TestRulesValidate(t *testing.T) {
	if err := testRules().Validate(); err != nil {
		t.Fatalf("test rules: %v", err)
	}
	for _, tc := range []struct {
		name string
		edit func(*Rules)
		want []string
	}{
		{"short window", func(r *Rules) {
			r.Segments[0].Limits[0].Window = 30 * time.Second
		}, []string{`segments[0] (segment "new").limits[0] (limit "daily").window: 30s out of range [1m0s, 744h0m0s]`}},
		{"long window", func(r *Rules) {
			r.Default.Limits[0].Window = 32 * day
		}, []string{`default_policy.limits[0] (limit "daily").window: 768h0m0s out of range`}},
		{"sub-second window", func(r *Rules) {
			r.Segments[0].Limits[0].Window = time.Hour + time.Millisecond
		}, []string{`.window: 1h0m0.001s is not a whole number of seconds`}},
		{"window and calendar", func(r *Rules) {
			r.Segments[0].Limits[0].Calendar = Day
		}, []string{`segments[0] (segment "new").limits[0] (limit "daily"): has both window and calendar`}},
		{"neither window nor calendar", func(r *Rules) {
			r.Segments[0].Limits[0].Window = 0
		}, []string{`limits[0] (limit "daily").window: 0s out of range`}},
		{"negative max", func(r *Rules) {
			r.Segments[1].Limits[2].Max = -1
		}, []string{`segments[1] (segment "active").limits[2] (limit "weekly").max: must not be negative, got -1`}},
		{"huge max", func(r *Rules) {
			r.Segments[0].Limits[0].Max = MaxMax + 1
		}, []string{`.max: 10001 is above 10000`}},
		{"reserve all", func(r *Rules) {
			r.Segments[1].Limits[1].Reserve.Slots = 5
		}, []string{`limits[1] (limit "daily").reserve.slots: 5 must be from 1 to max-1 (4)`}},
		{"reserve below 0", func(r *Rules) {
			r.Segments[1].Limits[1].Reserve.Below = 0
		}, []string{`limits[1] (limit "daily").reserve.below: 0 reserves nothing`}},
		{"reserve below the scale", func(r *Rules) {
			r.Segments[1].Limits[1].Reserve.Below = MaxPriority + 1
		}, []string{`limits[1] (limit "daily").reserve.below: 101 is above 100`}},
		{"duplicate name", func(r *Rules) {
			r.Segments[0].Policy = Policy{Limits: []Limit{{Name: "d", Window: day, Max: 1}, {Name: "d", Window: 2 * day, Max: 2}}}
		}, []string{`segments[0] (segment "new").limits[1] (limit "d").name: "d" is used by an earlier limit of this policy`}},
		{"unknown channel", func(r *Rules) {
			r.Segments[2].Limits[0].Where.Channels = []string{"push", "pigeon"}
		}, []string{`segments[2] (segment "chatty").limits[0] (limit "push-10m").where.channels[1]: "pigeon" is not one of the channels`}},
		{"unknown category", func(r *Rules) {
			r.Segments[3].Limits[1].Where.Categories = []string{"gossip"}
		}, []string{`segments[3] (segment "blocked").limits[1] (limit "flash").where.categories[0]: "gossip" is not one of the categories`}},
		{"bad tag", func(r *Rules) {
			r.Segments[1].Limits[0].Where.Tags = []string{"promo", "two words", strings.Repeat("t", 65)}
		}, []string{`limits[0] (limit "promo-day").where.tags[1]: "two words" must be 1 to 64 bytes`, `where.tags[2]`}},
		{"empty campaign", func(r *Rules) {
			r.Segments[3].Limits[1].Where.Campaigns = []string{""}
		}, []string{`limits[1] (limit "flash").where.campaigns[0]: is empty`}},
		{"no limits", func(r *Rules) {
			r.Segments = append(r.Segments, Segment{Name: "empty"})
			r.Default = Policy{}
		}, []string{`segments[4] (segment "empty").limits: at least one limit is required`, `default_policy.limits: at least one limit is required`}},
		{"duplicate segment", func(r *Rules) {
			r.Segments = append(r.Segments, Segment{Name: "new", Policy: r.Default})
		}, []string{`segments[4] (segment "new").name: segment "new" is listed twice`}},
		{"no channels", func(r *Rules) {
			r.Channels = nil
		}, []string{`channels: at least one is required`}},
		{"bad limit name", func(r *Rules) {
			r.Segments[0].Limits[0].Name = "a b"
		}, []string{`segments[0] (segment "new").limits[0] (limit "a b").name: "a b" must be non-empty`}},
		{"bad channel", func(r *Rules) {
			r.Channels = []string{"email", "email", "a:b"}
		}, []string{`channels[1]: "email" is listed twice`, `channels[2]: "a:b"`}},
		{"exempt not a category", func(r *Rules) {
			r.ExemptCategories = []string{"receipts"}
		}, []string{`exempt_categories[0]: "receipts" is not one of the categories`}},
		{"override not a category", func(r *Rules) {
			r.Overrides.Categories = []string{"urgent"}
		}, []string{`overrides.categories[0]: "urgent" is not one of the categories`}},
		{"no time zone", func(r *Rules) {
			r.TimeZone = nil
		}, []string{`time_zone: is required`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testRules() // fresh slices: edits do not leak between cases
			tc.edit(&r)
			err := r.Validate()
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestTooManyScopes: every distinct where/per is a scope, a bit in the
// script's masks; the compiler refuses more than MaxScopes.
func TestTooManyScopes(t *testing.T) {
	r := testRules()
	for i := range MaxScopes {
		l := Limit{Name: fmt.Sprint("l", i), Window: day, Max: 1, Where: Where{Campaigns: []string{fmt.Sprint("camp", i)}}}
		if i%2 == 0 {
			r.Default.Limits = append(r.Default.Limits, l)
		} else {
			r.Segments[0].Limits = append(r.Segments[0].Limits, l)
		}
	}
	if _, err := compileRules(r, time.Hour); err == nil || !strings.Contains(err.Error(), "distinct scopes") {
		t.Fatalf("compile: %v, want a scope count error", err)
	}
}

func TestNewOptions(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	ctx := context.Background()
	valid := testOptions(Options{Client: r.Client()})
	for _, tc := range []struct {
		edit func(*Options)
		want string
	}{
		{func(o *Options) { o.Client = nil }, "Client is required"},
		{func(o *Options) {
			o.Rules = Rules{Channels: o.Rules.Channels, Categories: o.Rules.Categories, TimeZone: time.UTC}
		},
			`default_policy.limits: at least one limit is required`},
		{func(o *Options) { o.KeyPrefix = "a{b" }, "braces"},
		{func(o *Options) { o.KeyPrefix = "" }, `key prefix ""`},
		{func(o *Options) { o.IdempotencyWindow = -time.Second }, "idempotency window -1s must be at least 1s"},
		{func(o *Options) { o.SkewWarn = 0 }, "skew warning threshold 0s"},
		{func(o *Options) { o.WaitReplicas = 1 }, "wait replicas 1 needs a positive wait timeout"},
	} {
		o := valid
		tc.edit(&o)
		if _, err := New(ctx, o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
	// New loads the script: EVALSHA works at once.
	e := newEngine(t, r.Client(), Options{})
	if ok, err := r.Client().ScriptExists(ctx, e.set.Load().script.sha).Result(); err != nil || !ok[0] {
		t.Fatalf("script not loaded: %v %v", ok, err)
	}
}

// TestListpackWarning: a Redis whose hash-max-listpack-value is below what
// records need gets a warning naming the setting (the caps still hold;
// memory does not).
func TestListpackWarning(t *testing.T) {
	for _, tc := range []struct {
		value string
		warn  bool
	}{{"64", true}, {"1024", false}} {
		r := testenv.StartRedis(t, testenv.RedisOptions{Args: []string{"--hash-max-listpack-value", tc.value}})
		var logs testenv.SyncBuffer
		newEngine(t, r.Client(), Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if got := strings.Contains(logs.String(), "hash-max-listpack-value"); got != tc.warn {
			t.Errorf("hash-max-listpack-value %s: warned %v, want %v: %s", tc.value, got, tc.warn, logs.String())
		}
	}
}

func TestInvalidRequests(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	e := newEngine(t, r.Client(), Options{})
	good := Request{UserID: 1, Segment: "new", IntentID: "i", Channel: "email", Category: "marketing", At: T0}
	bad := func(f func(*Request)) Request { r := good; f(&r); return r }
	reqs := []Request{
		bad(func(r *Request) { r.Category = "" }),
		bad(func(r *Request) { r.Channel = "fax" }),
		bad(func(r *Request) { r.IntentID = "" }),
		bad(func(r *Request) { r.IntentID = strings.Repeat("x", MaxIntentID+1) }),
		bad(func(r *Request) { r.At = time.Time{} }),
		bad(func(r *Request) { r.Tags = make([]string, MaxTags+1) }),
		bad(func(r *Request) { r.Priority = MaxPriority + 1 }),
		good,
		bad(func(r *Request) { r.Category = "transactional"; r.IntentID = "t" }),
		// A segment without a policy gets the default one.
		bad(func(r *Request) { r.Segment = "ghost"; r.UserID = 2 }),
	}
	d, err := e.Decide(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{`unknown category ""`, `unknown channel "fax"`, "intent id of 0 bytes", "intent id of 129 bytes",
		"no decision time", "17 tags (at most 16)", "priority 101"} {
		if !errors.Is(d[i].Err, ErrInvalidRequest) || !strings.Contains(d[i].Err.Error(), want) {
			t.Errorf("request %d: %v, want an invalid request error with %q", i, d[i].Err, want)
		}
	}
	if d[7].Err != nil || d[7].Outcome != Allowed || !d[7].At.Equal(T0) {
		t.Errorf("good request: %+v", d[7])
	}
	if d[8].Err != nil || d[8].Outcome != Exempt || !d[8].At.Equal(T0) {
		t.Errorf("exempt request: %+v", d[8])
	}
	if d[9].Err != nil || d[9].Outcome != Allowed {
		t.Errorf("request of a segment without a policy: %+v", d[9])
	}
	// Exempt intents never reach Redis: two script calls for the whole batch.
	if n := evalCalls(t, r.Client()); n != 2 {
		t.Errorf("%d script calls, want 2", n)
	}
	// A done context fails the call as a whole.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d, err = e.Decide(ctx, []Request{good})
	if !errors.Is(err, context.Canceled) || len(d) != 1 || d[0].Err == nil {
		t.Fatalf("Decide with a canceled context: %v %+v", err, d)
	}
}

// TestOverrides: a bypass is honoured only for the listed campaigns and
// categories; honoured, it is delivered past a full cap and counted (or
// not, bypass-uncounted); refused, it is decided normally and says so.
func TestOverrides(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	e := newEngine(t, r.Client(), Options{})
	at := T0
	req := func(id, campaign string, o Override) Request {
		at = at.Add(time.Minute)
		return Request{UserID: 9, Segment: "new", IntentID: id, Campaign: campaign, Channel: "push", Category: "marketing", Override: o, At: at}
	}
	d, err := e.Decide(context.Background(), []Request{
		req("a", "c1", NoOverride),         // allowed: daily 1 is now full
		req("b", "c1", NoOverride),         // capped
		req("c", "c1", Bypass),             // not listed: refused, capped
		req("d", "alert", Bypass),          // honoured: allowed past the cap, counted
		req("e", "alert", BypassUncounted), // honoured: delivered, not counted
		req("d", "alert", Bypass),          // a duplicate of d, not a second bypass, marked like d
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		o        Outcome
		override Override
		refused  bool
	}{{Allowed, NoOverride, false}, {Capped, NoOverride, false}, {Capped, NoOverride, true},
		{Allowed, Bypass, false}, {Exempt, BypassUncounted, false}, {Duplicate, Bypass, false}}
	for i, w := range want {
		if d[i].Err != nil || d[i].Outcome != w.o || d[i].Override != w.override || d[i].OverrideRefused != w.refused {
			t.Errorf("request %d: %+v, want %+v", i, d[i], w)
		}
	}
	// The weekly limit (3) counts a and d: one more is allowed tomorrow.
	st, err := e.Inspect(context.Background(), 9, "new", InspectOptions{At: at})
	if err != nil {
		t.Fatal(err)
	}
	if st[1].Limit.Name != "weekly" || st[1].Count != 2 {
		t.Fatalf("weekly: %+v, want 2 counted", st[1])
	}
}

// TestInspect compares Inspect with the model after a random run, and
// shows it writes nothing although it is asked about a time far past every
// window.
func TestInspect(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	c := r.Client()
	ctx := context.Background()
	e := newEngine(t, c, Options{})
	m, g := runModel(t, e, *modelSeed+10, spring, 3000, compareOpts{}, nil)
	full, perCampaign := 0, 0
	for _, uid := range g.users {
		u := m.users[uid]
		if u == nil {
			continue
		}
		tz := g.tz[uid]
		loc := tz
		if loc == nil {
			loc = m.rules.TimeZone
		}
		for _, seg := range testSegments() {
			pol := m.rules.PolicyOf(seg)
			for _, at := range []time.Time{g.now, g.now.Add(time.Hour), g.now.Add(25 * time.Hour)} {
				st, err := e.Inspect(ctx, uid, seg, InspectOptions{At: at, TimeZone: tz})
				if err != nil {
					t.Fatal(err)
				}
				rows := map[string][]LimitState{}
				for _, s := range st {
					rows[s.Limit.Name] = append(rows[s.Limit.Name], s)
				}
				if len(rows) != len(pol.Limits) {
					t.Fatalf("user %d %s: rows for %d limits, want %d", uid, seg, len(rows), len(pol.Limits))
				}
				for _, l := range pol.Limits {
					// The model's counts by campaign (one group for a per-user limit).
					from, to := at.Unix()-int64(l.Window/time.Second), at.Unix()
					if l.Calendar != None {
						from, to = refPeriod(l.Calendar, at, loc, m.rules.WeekStart)
					}
					times := map[string][]int64{}
					for _, s := range u.sends {
						if !refMatches(l.Where, &s.r) {
							continue
						}
						k := ""
						if l.Per == PerCampaign {
							h := campaignHash(s.r.Campaign)
							k = hex.EncodeToString(h[:])
						}
						times[k] = append(times[k], s.at)
					}
					withSends := 0
					for _, ts := range times {
						if slices.ContainsFunc(ts, func(t int64) bool { return t >= from }) {
							withSends++
						}
					}
					for _, row := range rows[l.Name] {
						if row.Count > 0 {
							withSends--
						}
						ts := times[row.Campaign]
						in := 0
						for _, t := range ts {
							if t >= from {
								in++
							}
						}
						wantNext := at
						switch {
						case l.Max == 0:
							wantNext = time.Time{}
						case in >= l.Max && l.Calendar != None:
							wantNext = time.Unix(to, 0)
						case in >= l.Max:
							wantNext = time.Unix(ts[len(ts)-l.Max]+int64(l.Window/time.Second)+1, 0)
						}
						// A section keeps at most the largest max of its scope's
						// limits (bypasses may have counted more).
						if row.Count != min(in, keepOf(e, seg, l.Name)) ||
							!row.NextFree.Equal(wantNext) || row.From.Unix() != from || row.To.Unix() != to || row.Reserved != l.Reserve.Slots {
							t.Fatalf("user %d %s at %s limit %s campaign %q: got %+v, want count %d next %s window [%s, %s)",
								uid, seg, at, l.Name, row.Campaign, row, in, wantNext, time.Unix(from, 0), time.Unix(to, 0))
						}
						if wantNext.After(at) {
							full++
						}
						if row.Campaign != "" {
							perCampaign++
						}
					}
					if withSends != 0 {
						t.Fatalf("user %d %s at %s limit %s: rows with sends %+v, the model has sends of %d campaigns", uid, seg, at, l.Name, rows[l.Name], len(times))
					}
				}
			}
		}
	}
	if full == 0 || perCampaign == 0 {
		t.Fatalf("%d full windows and %d per-campaign rows inspected: want both", full, perCampaign)
	}

	// Read-only: the data set is unchanged byte for byte after inspecting
	// far in the future.
	before := dumpAll(t, c)
	calls := writeCalls(t, c)
	for _, uid := range g.users[:20] {
		if _, err := e.Inspect(ctx, uid, "chatty", InspectOptions{At: g.now.Add(60 * 24 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if after := dumpAll(t, c); after != before {
		t.Fatal("Inspect changed the data")
	}
	if n := writeCalls(t, c); n != calls {
		t.Fatalf("Inspect ran %d write commands", n-calls)
	}
	// A segment without a policy is inspected under the default one.
	if st, err := e.Inspect(ctx, 1, "ghost", InspectOptions{At: g.now}); err != nil || len(st) != len(m.rules.Default.Limits) {
		t.Fatalf("Inspect of a segment without a policy: %+v %v", st, err)
	}
}

// keepOf is the most sends the scope of a segment's limit keeps.
func keepOf(e *Engine, segment, limit string) int {
	for _, l := range e.set.Load().pols[e.set.Load().policyIndex(segment)].limits {
		if l.Name == limit {
			return e.set.Load().scopes[l.scope].keep
		}
	}
	return -1
}

// dumpAll serializes every key (DUMP) with its TTL.
func dumpAll(t *testing.T, c *redis.Client) string {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		d, err := c.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s=%x\n", k, d)
	}
	return b.String()
}

// writeCalls counts the write commands a node has run.
func writeCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	var n int64
	for _, cmd := range []string{"hset", "hdel", "expire", "pexpire", "set", "del", "evalsha", "eval"} {
		s, err := commandStat(c, cmd)
		if err != nil {
			t.Fatal(err)
		}
		n += s.calls
	}
	return n
}

// TestClockSkew runs the clock check against every master of the cluster
// with a local clock 5s behind: the skew gauge shows it per master and a
// warning names the threshold.
func TestClockSkew(t *testing.T) {
	cl := testenv.StartCluster(t, 3)
	reg := prometheus.NewRegistry()
	var logBuf testenv.SyncBuffer
	e := newEngine(t, cl.Client(), Options{
		Registerer:   reg,
		Logger:       slog.New(slog.NewTextHandler(&logBuf, nil)),
		Now:          func() time.Time { return time.Now().Add(-5 * time.Second) },
		SkewWarn:     time.Second,
		SkewInterval: 20 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.RunClockCheck(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for counterValue(t, reg, "capper_redis_clock_skew_seconds", map[string]string{"node": cl.Nodes[2].Addr()}) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no skew measured")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunClockCheck: %v", err)
	}
	for _, n := range cl.Nodes {
		// Redis TIME has µs precision and the round trip is short: the 5s
		// injected dominate. The bounds are wide on purpose (shared machine).
		v := counterValue(t, reg, "capper_redis_clock_skew_seconds", map[string]string{"node": n.Addr()})
		if v < 4 || v > 6 {
			t.Errorf("skew of %s = %vs, want about 5s", n.Addr(), v)
		}
	}
	if s := logBuf.String(); !strings.Contains(s, "redis clock skew above threshold") || !strings.Contains(s, "threshold=1s") {
		t.Errorf("no warning logged: %q", s)
	}
}

// TestSkewMargin: a worker whose clock is ahead trims the record by its own
// time; a send stays skewMargin (5 minutes) past its longest window, so a
// worker up to that much behind still counts it. Further behind, it would
// not: the bound is real, and documented.
func TestSkewMargin(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	rules := testOptions(Options{}).Rules
	rules.Segments, rules.Default = nil, Policy{Limits: []Limit{{Name: "push-10m", Window: 10 * time.Minute, Max: 1, Where: Where{Channels: []string{"push"}}}}}
	e := newEngine(t, r.Client(), Options{Rules: rules})
	for i, tc := range []struct {
		ahead time.Duration
		want  Outcome
	}{{4 * time.Minute, Capped}, {6 * time.Minute, Allowed}} {
		uid := uint64(i)
		decide := func(id, channel string, at time.Time) Outcome {
			t.Helper()
			d, err := e.Decide(context.Background(), []Request{{UserID: uid, IntentID: id, Channel: channel, Category: "marketing", At: at}})
			if err != nil || d[0].Err != nil {
				t.Fatal(err, d[0].Err)
			}
			return d[0].Outcome
		}
		decide("push-1", "push", T0)                                 // worker B
		behind := T0.Add(10*time.Minute - time.Second)               // B, still inside the window
		decide("email", "email", behind.Add(tc.ahead))               // worker A rewrites the record
		if got := decide("push-2", "push", behind); got != tc.want { // B again
			t.Errorf("worker %s ahead: second push %s, want %s", tc.ahead, got, tc.want)
		}
	}
}

// TestInspectCampaign: the record keeps campaign hashes, not names; asked
// about a campaign by name, Inspect shows that campaign's row only.
func TestInspectCampaign(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	e := newEngine(t, r.Client(), Options{})
	ctx := context.Background()
	for i, c := range []string{"spring", "summer"} {
		if _, err := e.Decide(ctx, []Request{{UserID: 5, Segment: "active", IntentID: c, Campaign: c, Channel: "email",
			Category: "marketing", At: T0.Add(time.Duration(i) * time.Minute)}}); err != nil {
			t.Fatal(err)
		}
	}
	rows := func(o InspectOptions) map[string]int {
		t.Helper()
		o.At = T0.Add(time.Hour)
		st, err := e.Inspect(ctx, 5, "active", o)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, s := range st {
			if s.Limit.Name == "same-campaign" {
				out[s.Campaign] = s.Count
			}
		}
		return out
	}
	if got := rows(InspectOptions{}); len(got) != 2 {
		t.Errorf("without a campaign: %v, want a row per campaign hash", got)
	}
	if got := rows(InspectOptions{Campaign: "spring"}); len(got) != 1 || got["spring"] != 1 {
		t.Errorf("campaign spring: %v", got)
	}
	if got := rows(InspectOptions{Campaign: "autumn"}); len(got) != 1 || got["autumn"] != 0 {
		t.Errorf("campaign autumn: %v", got)
	}
}
