package capping

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/testenv"
)

// BenchmarkPlansRedisCost: Redis CPU per decision (INFO commandstats, time
// inside the script call) of the same 100k intents, scoped policy, on two
// redis-servers taking turns batch by batch: without plans, and with two
// a plan of a higher priority booking for every user (a promo push
// within the hour: it books in promo-day, daily and weekly), so that every call carries bookings. Target:
// the same cost (bookings are a byte per limit in the packed argument).
func BenchmarkPlansRedisCost(b *testing.B) {
	ctx := context.Background()
	sides := [2]func([]Request) int{}
	clients := [2]*testenv.Redis{}
	for i := range sides {
		clients[i] = testenv.StartRedis(b, testenv.RedisOptions{})
		sides[i] = v2(b, clients[i].Client(), scopedRules())
	}
	var usec [2]float64
	var capped [2]int
	b.ResetTimer()
	for range b.N {
		rng := rand.New(rand.NewPCG(7, 1))
		const n = 100_000
		reqs := [2][]Request{make([]Request, n), make([]Request, n)}
		for i := range n {
			at := T0.Add(time.Duration(float64(14*day) * float64(i) / n))
			r := benchRequest(rng, uint64(rng.IntN(benchUsers)), at)
			r.IntentID = fmt.Sprint("plans-", i)
			reqs[0][i], reqs[1][i] = r, r
			reqs[1][i].Planned = []Planned{{Campaign: "cart-rescue", Priority: High, Starts: at.Add(30 * time.Minute), Ends: at.Add(time.Hour),
				Channel: "push", Category: "marketing", Tags: []string{"promo"}}}
		}
		var before [2]int64
		for k, c := range clients {
			if err := c.Client().FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			before[k], _ = serverUsec(b, c.Client())
		}
		capped = [2]int{}
		for lo := 0; lo < n; lo += 500 {
			for k := range sides {
				capped[k] += sides[k](reqs[k][lo:min(lo+500, n)])
			}
		}
		for k, c := range clients {
			u, _ := serverUsec(b, c.Client())
			usec[k] = float64(u-before[k]) / n
		}
	}
	b.StopTimer()
	if capped[1] <= capped[0] || capped[1] > 3*capped[0]+1000 {
		b.Fatalf("capped %d without plans, %d with: want a few more with plans (the bookings reach the script), not a different workload", capped[0], capped[1])
	}
	b.Logf("Redis CPU per decision: without plans %.2f us (%.1f%% capped), with a booking in 3 limits %.2f us (%.1f%% capped): %.2fx (target: 1x)",
		usec[0], 100*float64(capped[0])/100_000, usec[1], 100*float64(capped[1])/100_000, usec[1]/usec[0])
	b.ReportMetric(usec[0], "us/decision-fcfs")
	b.ReportMetric(usec[1], "us/decision-plans")
	b.ReportMetric(usec[1]/usec[0], "plans-x-fcfs")
}

// BenchmarkBookings: the worker's cost of the bookings in a decision's
// plan (which limits each plan books, the packed argument's counts), for
// a request with two plans of a higher priority (Set.For finds 1.8 per
// intent with 50 plans of 10M users over 270M), against the same request
// without: what plans add beside the lookup (BenchmarkPlanLookup,
// internal/plans).
func BenchmarkBookings(b *testing.B) {
	ps, err := compileRules(scopedRules(), time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	r := benchRequest(rng, 42, T0)
	r.Tags, r.Channel = []string{"promo"}, "push"
	planned := []Planned{ // as the plans package makes them
		NewPlanned(Planned{Campaign: "cart-rescue", Priority: High, Starts: T0.Add(30 * time.Minute), Ends: T0.Add(time.Hour), Channel: "push", Category: "marketing", Tags: []string{"promo"}}),
		NewPlanned(Planned{Campaign: "digest", Priority: 60, Starts: T0.Add(time.Minute), Ends: T0.Add(2 * time.Hour), Channel: "email", Category: "marketing"}),
	}
	var ns [2]float64
	for k, name := range []string{"without", "with-2-plans"} {
		b.Run(name, func(b *testing.B) {
			req := r
			if k == 1 {
				req.Planned = planned
			}
			booked, n, t := 0, 0, time.Now()
			for b.Loop() {
				c := ps.plan(&req, nil)
				if c.anyBooked {
					booked++
				}
				n++
			}
			ns[k] = float64(time.Since(t).Nanoseconds()) / float64(n)
			if (booked > 0) != (k == 1) {
				b.Fatalf("%s: %d of %d plans with bookings", name, booked, n)
			}
		})
	}
	b.Logf("a decision's plan: %.0f ns without plans, %.0f ns with two: bookings add %.0f ns per intent", ns[0], ns[1], ns[1]-ns[0])
	b.ReportMetric(ns[1]-ns[0], "ns/intent-added")
}
