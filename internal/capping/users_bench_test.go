package capping

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

// benchUserRules are the scoped benchmark policy with users' limits: a
// tier "fewer" and every channel that may be turned down.
func benchUserRules() Rules {
	r := scopedRules()
	r.Users = &UserRules{
		Tiers:         []UserTier{{Name: "fewer", Limits: []Limit{{Name: "daily", Window: day, Max: 1}, {Name: "weekly", Window: 7 * day, Max: 3}}}},
		Channels:      r.Channels,
		ChannelWindow: 7 * day,
		MaxPerChannel: DefaultMaxPerChannel,
		MaxDefer:      DefaultUserMaxDefer,
	}
	return r
}

// BenchmarkUserLimitsCPU: the worker's CPU per intent to build a call
// (plan and packed argument) with and without users' limits in the
// policy; prints both and the difference against the 50 ns goal. A user
// without limits costs the worker nothing else: their limits are read by
// the script, in the same call.
func BenchmarkUserLimitsCPU(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 7))
	reqs := make([]Request, 4096)
	zones := []*time.Location{nil, mustZone(b, "Europe/Berlin"), mustZone(b, "America/New_York")}
	for i := range reqs {
		reqs[i] = benchRequest(rng, uint64(rng.IntN(benchUsers)), T0.Add(time.Duration(i)*time.Second))
		reqs[i].TimeZone = zones[i%len(zones)]
	}
	var sets [2]*policySet
	for k, rules := range []Rules{scopedRules(), benchUserRules()} {
		ps, err := compileRules(rules, 24*time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		sets[k] = ps
	}
	// Timed by hand, the two sets taking turns for several rounds, with a
	// batch's memory of zones as the engine keeps it: the machine's noise
	// falls on both. (testing.Benchmark cannot run inside a benchmark.)
	buf := make([]byte, 0, 64)
	const n = 1_000_000
	ns := [2]float64{math.MaxFloat64, math.MaxFloat64}
	for range 7 {
		for k, ps := range sets {
			var known periods
			start := time.Now()
			for i := range n {
				if i&511 == 0 {
					known = periods{} // a batch of 512
				}
				r := &reqs[i&4095]
				c := call{plan: ps.plan(r, &known)}
				buf = ps.appendPacked(buf[:0], r, &c)
			}
			ns[k] = min(ns[k], float64(time.Since(start).Nanoseconds())/n)
		}
	}
	b.ReportMetric(ns[0], "ns/intent-without")
	b.ReportMetric(ns[1], "ns/intent-with")
	b.ReportMetric(ns[1]-ns[0], "ns/intent-added")
	b.ReportMetric((ns[1]-ns[0])/50, "ratio-to-50ns-goal")
}

// BenchmarkUserLimitsRedis: what users' limits cost Redis. The same
// traffic is decided by the scoped policy without user_limits, with it for
// users holding none, and with it for users who all hold a tier and a
// channel limit; prints Redis CPU per decision and script calls per
// decision (1 in each: no extra round trip), and the memory of a user's
// limits when 10% of 200,000 users with records set a tier, a snooze and
// two channel limits: the bytes they add to their buckets' listpacks
// (extrapolated to 27M users, 10% of 270M), and what the allocator gave
// the buckets more (each bucket written afresh on two servers, with and
// without them): less, as long as they fit the slack of its size class.
func BenchmarkUserLimitsRedis(b *testing.B) {
	ctx := context.Background()
	const users, n = 200_000, 50_000
	rng := rand.New(rand.NewPCG(9, 9))
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = benchRequest(rng, uint64(rng.IntN(users/10)), T0.Add(time.Duration(i)*100*time.Millisecond))
		reqs[i].IntentID = "u-" + strconv.Itoa(i)
	}
	c := testenv.StartRedis(b, testenv.RedisOptions{}).Client()
	var usec [3]float64
	var calls [3]float64
	var perUser, allocated float64
	b.ResetTimer()
	for range b.N {
		for k, rules := range []Rules{scopedRules(), benchUserRules(), benchUserRules()} {
			if err := c.FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			e, err := New(ctx, testOptions(Options{Client: c, Rules: rules}))
			if err != nil {
				b.Fatal(err)
			}
			if k == 2 {
				for u := range uint64(users / 10) {
					if _, err := e.SetUserLimits(ctx, u, UserLimits{Tier: "fewer", Channels: map[string]int{"sms": 1}}); err != nil {
						b.Fatal(err)
					}
				}
			}
			u0, c0 := serverUsec(b, c)
			for lo := 0; lo < n; lo += 500 {
				if _, err := e.Decide(ctx, reqs[lo:lo+500]); err != nil {
					b.Fatal(err)
				}
			}
			u1, c1 := serverUsec(b, c)
			usec[k], calls[k] = float64(u1-u0)/n, float64(c1-c0)/n
		}
		allocated, perUser = limitBytes(b, c)
	}
	b.StopTimer()
	b.ReportMetric(usec[0], "redis-us/decision-without")
	b.ReportMetric(usec[1], "redis-us/decision-none-set")
	b.ReportMetric(usec[2], "redis-us/decision-limits-set")
	b.ReportMetric(calls[1], "calls/decision-none-set")
	b.ReportMetric(calls[2], "calls/decision-limits-set")
	b.ReportMetric(calls[2]/calls[0], "calls-ratio-to-without")
	b.ReportMetric(perUser, "bytes/user-with-limits")
	b.ReportMetric(allocated, "allocated-bytes/user-with-limits")
	b.ReportMetric(perUser*27e6/(1<<30), "GiB-at-27M-users")
}

// limitBytes: what the limits of a tenth of users with a record add to
// their buckets, allocated and stored, per user with limits.
func limitBytes(b *testing.B, c *redis.Client) (allocated, perUser float64) {
	ctx := context.Background()
	const users = 200_000
	if err := c.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	e, err := New(ctx, testOptions(Options{Client: c, Rules: benchUserRules()}))
	if err != nil {
		b.Fatal(err)
	}
	// Records of 1 to 3 sends: buckets of many sizes, so that the
	// allocator's size classes average out over them.
	rng := rand.New(rand.NewPCG(11, 11))
	reqs := make([]Request, 0, 1000)
	for u := range uint64(users) {
		for k := range rng.IntN(3) + 1 {
			reqs = append(reqs, Request{UserID: u, Segment: "bench", IntentID: fmt.Sprint("m", u, "-", k), Channel: "push", Category: "marketing", Campaign: "c", At: T0})
		}
		if len(reqs) >= 997 || u == users-1 {
			ds, err := e.Decide(ctx, reqs)
			if err != nil {
				b.Fatal(err)
			}
			if ds[0].Err != nil || ds[0].Outcome != Allowed {
				b.Fatalf("decide: %+v", ds[0])
			}
			reqs = reqs[:0]
		}
	}
	for u := uint64(0); u < users; u += 10 {
		l := UserLimits{Tier: "fewer", SnoozeUntil: T0.Add(7 * day), Channels: map[string]int{"sms": 0, "email": 2}}
		if _, err := e.SetUserLimits(ctx, u, l); err != nil {
			b.Fatal(err)
		}
	}
	// Each bucket is written again, in one HSET (no history of
	// reallocations), on two fresh servers: with and without the users'
	// limits; the difference of their datasets is what the limits take.
	fresh := [2]*redis.Client{testenv.StartRedis(b, testenv.RedisOptions{}).Client(), testenv.StartRedis(b, testenv.RedisOptions{}).Client()}
	var limited, stored int64
	for k := range uint64(users / bucketSize) {
		key := e.keys.bucket(k * bucketSize)
		all, err := c.HGetAll(ctx, key).Result()
		if err != nil {
			b.Fatal(err)
		}
		var a, z []any
		for f, v := range all {
			z = append(z, f, v)
			if f[0] == 'u' {
				// A listpack entry is its bytes plus an encoding byte
				// and a back-length byte (strings under 64 bytes).
				limited, stored = limited+1, stored+int64(len(f)+2+len(v)+2)
				continue
			}
			a = append(a, f, v)
		}
		fresh[0].HSet(ctx, key, a...)
		fresh[1].HSet(ctx, key, z...)
	}
	with, without := infoInt(b, fresh[1], "used_memory_dataset"), infoInt(b, fresh[0], "used_memory_dataset")
	return float64(with-without) / float64(limited), float64(stored) / float64(limited)
}

// infoInt reads one integer field of INFO memory.
func infoInt(b *testing.B, c *redis.Client, name string) int64 {
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatalf("no %s in INFO memory", name)
	return 0
}
