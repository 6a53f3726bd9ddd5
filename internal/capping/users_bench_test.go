package capping

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
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
	var ns [2]float64
	for k, rules := range []Rules{scopedRules(), benchUserRules()} {
		ps, err := compileRules(rules, 24*time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 0, 64)
		res := testing.Benchmark(func(b *testing.B) {
			for i := range b.N {
				r := &reqs[i&4095]
				c := call{plan: ps.plan(r, nil)}
				buf = ps.appendPacked(buf[:0], r, &c)
			}
		})
		ns[k] = float64(res.T.Nanoseconds()) / float64(res.N)
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
// limits, measured as used_memory's growth when 10% of 200,000 users with
// records set a tier, a snooze and a channel limit, extrapolated to 27M
// users (10% of 270M).
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
	var perUser float64
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
		perUser = limitBytes(b, c)
	}
	b.StopTimer()
	b.ReportMetric(usec[0], "redis-us/decision-without")
	b.ReportMetric(usec[1], "redis-us/decision-none-set")
	b.ReportMetric(usec[2], "redis-us/decision-limits-set")
	b.ReportMetric(calls[1], "calls/decision-none-set")
	b.ReportMetric(calls[2], "calls/decision-limits-set")
	b.ReportMetric(perUser, "bytes/user-with-limits")
	b.ReportMetric(perUser*27e6/(1<<30), "GiB-at-27M-users")
}

// limitBytes: used_memory's growth per user when a tenth of users with a
// record set limits.
func limitBytes(b *testing.B, c *redis.Client) float64 {
	ctx := context.Background()
	const users = 200_000
	if err := c.FlushAll(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	e, err := New(ctx, testOptions(Options{Client: c, Rules: benchUserRules()}))
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]Request, 0, 1000)
	for u := range uint64(users) {
		reqs = append(reqs, Request{UserID: u, Segment: "bench", IntentID: fmt.Sprint("m", u), Channel: "push", Category: "marketing", Campaign: "c", At: T0})
		if len(reqs) == cap(reqs) {
			if _, err := e.Decide(ctx, reqs); err != nil {
				b.Fatal(err)
			}
			reqs = reqs[:0]
		}
	}
	before := usedMemory(b, c)
	for u := uint64(0); u < users; u += 10 {
		l := UserLimits{Tier: "fewer", SnoozeUntil: T0.Add(7 * day), Channels: map[string]int{"sms": 0, "email": 2}}
		if _, err := e.SetUserLimits(ctx, u, l); err != nil {
			b.Fatal(err)
		}
	}
	return float64(usedMemory(b, c)-before) / (users / 10)
}
