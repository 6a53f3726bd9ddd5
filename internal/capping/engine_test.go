package capping

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	day := 24 * time.Hour
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
		{"negative max", func(r *Rules) {
			r.Segments[1].Limits[1].Max = -1
		}, []string{`segments[1] (segment "active").limits[1] (limit "weekly").max: must not be negative, got -1`}},
		{"duplicate name", func(r *Rules) {
			r.Segments[0].Policy = Policy{Limits: []Limit{{Name: "d", Window: day, Max: 1}, {Name: "d", Window: 2 * day, Max: 2}}}
		}, []string{`segments[0] (segment "new").limits[1] (limit "d").name: "d" is used by an earlier limit of this policy`}},
		{"unknown channel", func(r *Rules) {
			r.Segments[2].Limits[0].Channel = "pigeon"
		}, []string{`segments[2] (segment "chatty").limits[0] (limit "push-10m").channel: "pigeon" is not one of the channels`}},
		{"no limits", func(r *Rules) {
			r.Segments = append(r.Segments, Segment{Name: "empty"})
			r.Default = Policy{}
		}, []string{`segments[4] (segment "empty").limits: at least one limit is required`, `default_policy.limits: at least one limit is required`}},
		{"duplicate segment", func(r *Rules) {
			r.Segments = append(r.Segments, Segment{Name: "new", Policy: r.Default})
		}, []string{`segments[4] (segment "new").name: segment "new" is listed twice`}},
		{"no channels", func(r *Rules) {
			r.Channels = nil
		}, []string{`channels: at least one channel is required`}},
		{"bad limit name", func(r *Rules) {
			r.Segments[0].Limits[0].Name = "a b"
		}, []string{`segments[0] (segment "new").limits[0] (limit "a b").name: "a b" must be non-empty`}},
		{"sub-ms window", func(r *Rules) {
			r.Segments[0].Limits[0].Window = time.Hour + time.Microsecond
		}, []string{`not a whole number of milliseconds`}},
		{"huge max", func(r *Rules) {
			r.Segments[0].Limits[0].Max = MaxMax + 1
		}, []string{`.max: 1000001 is above 1000000`}},
		{"bad channel", func(r *Rules) {
			r.Channels = []string{"email", "email", "a:b"}
		}, []string{`channels[1]: "email" is listed twice`, `channels[2]: "a:b"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testRules()
			// Deep-copy the limits the case edits.
			for i := range r.Segments {
				r.Segments[i].Limits = append([]Limit(nil), r.Segments[i].Limits...)
			}
			r.Default = Policy{Limits: append([]Limit(nil), r.Default.Limits...)}
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

func TestNewOptions(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	ctx := context.Background()
	valid := testOptions(Options{Client: r.Client()})
	for _, tc := range []struct {
		edit func(*Options)
		want string
	}{
		{func(o *Options) { o.Client = nil }, "Client is required"},
		{func(o *Options) { o.Rules = Rules{Channels: o.Rules.Channels} }, `default_policy.limits: at least one limit is required`},
		{func(o *Options) { o.Algorithm = "token_bucket" }, `algorithm "token_bucket"`},
		{func(o *Options) { o.KeyPrefix = "a{b" }, "braces"},
		{func(o *Options) { o.KeyPrefix = "" }, `key prefix ""`},
		{func(o *Options) { o.Algorithm, o.SubIntervals = SlidingWindow, 5000 }, "sub-intervals 5000"},
		{func(o *Options) { o.IdempotencyWindow = -time.Second }, "idempotency window -1s must be above 0"},
		{func(o *Options) { o.SkewWarn = 0 }, "skew warning threshold 0s"},
	} {
		o := valid
		tc.edit(&o)
		if _, err := New(ctx, o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
	// New loads the script: EVALSHA works at once.
	e := newEngine(t, r.Client(), Options{})
	if ok, err := r.Client().ScriptExists(ctx, e.algo.script().sha).Result(); err != nil || !ok[0] {
		t.Fatalf("script not loaded: %v %v", ok, err)
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
		good,
		bad(func(r *Request) { r.Category = "transactional"; r.IntentID = "t" }),
		// A segment without a policy gets the default one (1 limit).
		bad(func(r *Request) { r.Segment = "ghost"; r.UserID = 2 }),
	}
	d, err := e.Decide(context.Background(), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{`no category`, `unknown channel "fax"`, "intent id of 0 bytes", "intent id of 129 bytes", "no decision time"} {
		if !errors.Is(d[i].Err, ErrInvalidRequest) || !strings.Contains(d[i].Err.Error(), want) {
			t.Errorf("request %d: %v, want an invalid request error with %q", i, d[i].Err, want)
		}
	}
	if d[5].Err != nil || d[5].Outcome != Allowed || len(d[5].Counts) != 2 || !d[5].At.Equal(T0) {
		t.Errorf("good request: %+v", d[5])
	}
	if d[6].Err != nil || d[6].Outcome != Exempt || d[6].Counts != nil || !d[6].At.Equal(T0) {
		t.Errorf("exempt request: %+v", d[6])
	}
	if d[7].Err != nil || d[7].Outcome != Allowed || len(d[7].Counts) != 1 {
		t.Errorf("request of a segment without a policy: %+v", d[7])
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

// TestInspect compares Inspect with the model after a random run, for both
// algorithms, and shows it writes nothing (not even eviction) although it is
// asked about a time far past every window.
func TestInspect(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	c := r.Client()
	ctx := context.Background()

	e := newEngine(t, c, Options{KeyPrefix: "log"})
	m, g := runModel(t, e, *modelSeed+10, 2000, compareOpts{}, nil)
	checked := 0
	for _, uid := range g.users {
		u := m.users[uid]
		if u == nil {
			continue
		}
		for _, seg := range testSegments() {
			pol := e.rules.PolicyOf(seg)
			for _, at := range []time.Time{g.now, g.now.Add(time.Hour), g.now.Add(25 * time.Hour)} {
				st, err := e.Inspect(ctx, uid, seg, at)
				if err != nil {
					t.Fatal(err)
				}
				now := at.UnixMilli()
				for i, l := range pol.Limits {
					set := u.base
					if l.Channel != "" {
						set = u.chans[l.Channel]
					}
					in := window(set, now, l.Window.Milliseconds())
					wantNext := at
					switch {
					case l.Max == 0:
						wantNext = time.Time{}
					case len(in) >= l.Max:
						wantNext = time.UnixMilli(in[len(in)-l.Max] + l.Window.Milliseconds())
					}
					if st[i].Limit != l || st[i].Count != int64(len(in)) || !st[i].NextFree.Equal(wantNext) {
						t.Fatalf("user %d %s at %s limit %s: got %+v, want count %d next %s", uid, seg, at, l.Name, st[i], len(in), wantNext)
					}
					if l.Max > 0 && len(in) >= l.Max {
						checked++ // a full window: NextFree is in the future
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no full window inspected")
	}

	ew := newEngine(t, c, Options{KeyPrefix: "win", Algorithm: SlidingWindow})
	wm := newWindowModel(ew.rules, ew.subs)
	full := 0
	g = newGen(*modelSeed+11, 50)
	for range 30 {
		g.step()
		reqs := g.batch(50)
		if _, err := ew.Decide(ctx, reqs); err != nil {
			t.Fatal(err)
		}
		for _, r := range reqs {
			wm.decide(r)
		}
	}
	for _, uid := range g.users {
		for _, seg := range testSegments() {
			pol := ew.rules.PolicyOf(seg)
			st, err := ew.Inspect(ctx, uid, seg, g.now)
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range pol.Limits {
				// A request on the limit's channel asks the model the same.
				ch := l.Channel
				if ch == "" {
					ch = "inapp"
				}
				probe := Request{UserID: uid, Segment: seg, IntentID: "inspect-probe", Channel: ch, Category: "marketing", At: g.now}
				w := wm.peek(probe)
				var wantNext time.Time
				switch {
				case l.Max > 0 && w.Counts[i] < int64(l.Max):
					wantNext = g.now
				case l.Max > 0:
					wantNext = g.now.Add(w.nextFree[i])
				}
				if wantNext.After(g.now) {
					full++
				}
				if st[i].Count != w.Counts[i] || !st[i].NextFree.Equal(wantNext) {
					t.Fatalf("sliding_window user %d %s limit %s: got %+v, want count %d next %s", uid, seg, l.Name, st[i], w.Counts[i], wantNext)
				}
			}
		}
	}

	if full == 0 {
		t.Fatal("sliding_window: no full window inspected")
	}

	// Read-only: the data set is unchanged byte for byte after inspecting
	// far in the future.
	before := dumpAll(t, c)
	calls := writeCalls(t, c)
	for _, uid := range g.users[:20] {
		for _, eng := range []*Engine{e, ew} {
			if _, err := eng.Inspect(ctx, uid, "chatty", g.now.Add(60*24*time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if after := dumpAll(t, c); after != before {
		t.Fatal("Inspect changed the data")
	}
	if n := writeCalls(t, c); n != calls {
		t.Fatalf("Inspect ran %d write commands", n-calls)
	}
	// A segment without a policy is inspected under the default one.
	if st, err := e.Inspect(ctx, 1, "ghost", g.now); err != nil || len(st) != len(e.rules.Default.Limits) {
		t.Fatalf("Inspect of a segment without a policy: %+v %v", st, err)
	}
}

// peek answers what the model would decide, and for every limit the time
// until it frees, without recording anything.
type peekResult struct {
	Counts   []int64
	nextFree []time.Duration
}

func (m *windowModel) peek(r Request) peekResult {
	pol := m.rules.PolicyOf(r.Segment)
	u := m.user(r.UserID)
	t := r.At.UnixMilli()
	var p peekResult
	for _, l := range pol.Limits {
		w := l.Window.Milliseconds()
		s := w / int64(m.subs)
		cnt := u.counters[windowSuffix(w, l.Channel)]
		e := modelEstimate(cnt, t, w, s)
		p.Counts = append(p.Counts, (e+s-1)/s)
		var next time.Duration
		if l.Max > 0 && e+s > int64(l.Max)*s {
			lo, hi := t, t+2*w+2*s
			for i := range cnt {
				hi = max(hi, (i+2)*s+w)
			}
			for hi-lo > 1 {
				mid := lo + (hi-lo)/2
				if modelEstimate(cnt, mid, w, s)+s <= int64(l.Max)*s {
					hi = mid
				} else {
					lo = mid
				}
			}
			next = time.Duration(hi-t) * time.Millisecond
		}
		p.nextFree = append(p.nextFree, next)
	}
	return p
}

// dumpAll serializes every key (DUMP) with its TTL.
func dumpAll(t *testing.T, c *redis.Client) string {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, k := range keys {
		d, err := c.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s=%x\n", k, d)
	}
	return fmt.Sprint(len(keys), b.Len(), hashString(b.String()))
}

func hashString(s string) string { return string(appendHex(nil, digest(s))) }

// writeCalls counts the write commands a node has run.
func writeCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	var n int64
	for _, cmd := range []string{"zadd", "zremrangebyscore", "pexpire", "hset", "hdel", "set", "del", "evalsha", "eval"} {
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
