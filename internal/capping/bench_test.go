package capping

import (
	"context"
	"encoding/csv"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

// The benchmark workload: a 1M-user id range, a daily and a weekly limit, one
// fresh intent id per decision, every decision at the same time (the
// redis-benchmark run cannot vary it).
const benchUsers = 1_000_000

func benchRules() Rules {
	return Rules{
		Segments: []Segment{{Name: "bench", Policy: Policy{Limits: []Limit{
			{Name: "daily", Window: 24 * time.Hour, Max: 3},
			{Name: "weekly", Window: 7 * 24 * time.Hour, Max: 10},
		}}}},
		Default: Policy{Limits: []Limit{{Name: "daily", Window: 24 * time.Hour, Max: 1}}},
	}
}

func benchRequests(n int, seed uint64) []Request {
	rng := rand.New(rand.NewPCG(seed, 1))
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{
			UserID: uint64(rng.IntN(benchUsers)), Segment: "bench", Channel: "push", Category: "marketing", At: T0,
			IntentID: strconv.FormatUint(seed, 36) + "-" + strconv.FormatUint(uint64(i), 36),
		}
	}
	return reqs
}

// serverLimit runs redis-benchmark -P 64 against the same server with the
// same script and the same shape of arguments, and returns its requests per
// second. It returns 0 when redis-benchmark is missing off CI (testenv's
// rule for server binaries).
func serverLimit(b *testing.B, port int, cluster bool, args []string) float64 {
	b.Helper()
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		if testenv.RequireServers() {
			b.Fatalf("redis-benchmark not found: %v", err)
		}
		b.Log("redis-benchmark not found: no server-side limit")
		return 0
	}
	cmd := []string{"-p", strconv.Itoa(port), "-P", "64", "-c", "4", "-n", "300000", "-r", strconv.Itoa(benchUsers), "--csv"}
	if cluster {
		cmd = append(cmd, "--cluster")
	}
	out, err := exec.Command(bin, append(cmd, args...)...).CombinedOutput()
	if err != nil {
		b.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	// The last CSV line is "<command>","<rps>",...
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	rec, err := csv.NewReader(strings.NewReader(lines[len(lines)-1])).Read()
	if err != nil || len(rec) < 2 {
		b.Fatalf("redis-benchmark output: %v\n%s", err, out)
	}
	rps, err := strconv.ParseFloat(rec[1], 64)
	if err != nil || rps <= 0 {
		b.Fatalf("redis-benchmark rps %q: %v\n%s", rec[1], err, out)
	}
	return rps
}

// logBenchArgs are the sliding_log EVALSHA arguments of the benchmark
// workload for redis-benchmark: the same key shape, the member a random
// 12-digit number (our digests are 8 bytes), the same time and limits.
func logBenchArgs(e *Engine, keyTag string) []string {
	p := e.plans["bench"]["push"]
	args := []string{"EVALSHA", e.algo.script().sha, "1", e.keys.prefix + ":" + keyTag, "__rand_int__"}
	for _, a := range p.args(T0.UnixMilli())[1:] {
		args = append(args, fmt.Sprint(a))
	}
	return args
}

func benchDecide(b *testing.B, c redis.UniversalClient, limit func(e *Engine) float64) {
	e := newEngine(b, c, Options{Rules: benchRules()})
	var lim float64
	var once sync.Once
	for _, batch := range []int{1, 100, 1000} {
		for _, conc := range []int{1, 4} {
			b.Run(fmt.Sprintf("batch=%d/conc=%d", batch, conc), func(b *testing.B) {
				once.Do(func() { lim = limit(e) })
				if err := flushAll(c); err != nil {
					b.Fatal(err)
				}
				reqs := benchRequests(b.N, uint64(batch*10+conc))
				var next atomic.Int64
				var failed atomic.Int64
				ctx := context.Background()
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for range conc {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							hi := int(next.Add(int64(batch)))
							lo := hi - batch
							if lo >= len(reqs) {
								return
							}
							ds, err := e.Decide(ctx, reqs[lo:min(hi, len(reqs))])
							if err != nil {
								failed.Add(1)
								return
							}
							for _, d := range ds {
								if d.Err != nil {
									failed.Add(1)
								}
							}
						}
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				if failed.Load() > 0 {
					b.Fatalf("%d decisions failed", failed.Load())
				}
				rate := float64(b.N) / elapsed.Seconds()
				b.ReportMetric(rate, "decisions/s")
				if lim > 0 {
					b.ReportMetric(lim, "limit-decisions/s")
					b.ReportMetric(rate/lim, "ratio-of-limit")
				}
			})
		}
	}
}

func flushAll(c redis.UniversalClient) error {
	ctx := context.Background()
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.FlushAll(ctx).Err() })
	}
	return c.FlushAll(ctx).Err()
}

// BenchmarkDecide measures Decide against one redis-server beside the
// server's own limit for the same script (redis-benchmark -P 64, same run).
func BenchmarkDecide(b *testing.B) {
	r := testenv.StartRedis(b, testenv.RedisOptions{})
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), PoolSize: 8})
	b.Cleanup(func() { _ = c.Close() })
	benchDecide(b, c, func(e *Engine) float64 {
		if err := flushAll(c); err != nil {
			b.Fatal(err)
		}
		return serverLimit(b, r.Port, false, logBenchArgs(e, "{__rand_int__}"))
	})
}

// BenchmarkDecideCluster is the same against the 3-master cluster. The limit
// is redis-benchmark --cluster, whose keys must carry its {tag}: the same
// script and arguments, the users of one client in one slot.
func BenchmarkDecideCluster(b *testing.B) {
	cl := testenv.StartCluster(b, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 8})
	b.Cleanup(func() { _ = c.Close() })
	benchDecide(b, c, func(e *Engine) float64 {
		if err := flushAll(c); err != nil {
			b.Fatal(err)
		}
		return serverLimit(b, cl.Nodes[0].Port, true, logBenchArgs(e, "{tag}:__rand_int__"))
	})
}

// The textbook sliding logs, for the CPU comparison. ARGV: now, member,
// longest window, then window, max per limit.
//
// textbookScript is the one the issue names: ZREMRANGEBYSCORE, ZCOUNT and
// ZADD on every call (Circles.Life's MULTI version; a denied intent is
// recorded too). textbookAllowedScript adds only when allowed (Grab's). Neither
// has idempotency, all counts or a retry-after.
const textbookScript = `
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
local ok = 1
for i = 4, #ARGV, 2 do
  if redis.call('ZCOUNT', KEYS[1], now - tonumber(ARGV[i]) + 1, '+inf') >= tonumber(ARGV[i + 1]) then ok = 0 end
end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return ok
`

const textbookAllowedScript = `
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[3]))
for i = 4, #ARGV, 2 do
  if redis.call('ZCOUNT', KEYS[1], now - tonumber(ARGV[i]) + 1, '+inf') >= tonumber(ARGV[i + 1]) then
    return 0
  end
end
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`

// BenchmarkRedisCPU measures the Redis CPU per decision of sliding_log,
// sliding_window and the two textbook sliding logs on the same stream of
// intents. Each runs on its own redis-server and the four take turns batch
// by batch, so that a busy machine slows them alike. Two figures per
// script: INFO commandstats usec_per_call of the script call (wall time
// inside the command), and the server process's CPU time (used_cpu_user +
// used_cpu_sys, which also counts reading requests and writing replies),
// both per decision. Two workloads:
//   - fresh: 100k users over two weeks, about 2 intents each: nearly all
//     allowed, most on a new key (the allowed path's floor: ZADD + PEXPIRE
//     of a new key);
//   - capped: 5k users over one day, about 40 intents each against a daily
//     cap of 3: nearly all denied, as in a blast to already-messaged users.
//
// One op = one decision by each of the four.
func BenchmarkRedisCPU(b *testing.B) {
	for _, wl := range []struct {
		name  string
		users int
		span  time.Duration
	}{{"fresh", 100_000, 14 * 24 * time.Hour}, {"capped", 2_500, 24 * time.Hour}} {
		b.Run("workload="+wl.name, func(b *testing.B) {
			redisCPU(b, wl.users, wl.span)
		})
	}
}

// serverCPU is a redis-server's used_cpu_user + used_cpu_sys, in seconds.
func serverCPU(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}

// redisCPUIntents is the size of each workload, fixed so that its shape
// (intents per user per window, hence the share denied) does not depend on
// b.N: "fresh" is 100k intents over 100k users and two weeks (nearly all
// allowed), "capped" the same over 2,500 users in one day (40 each against
// 3 a day: nearly all denied).
const redisCPUIntents = 100_000

func redisCPU(b *testing.B, users int, span time.Duration) {
	ctx := context.Background()
	rules := benchRules()
	rng := rand.New(rand.NewPCG(3, 4))
	reqs := make([]Request, redisCPUIntents)
	for i := range reqs {
		reqs[i] = Request{UserID: uint64(rng.IntN(users)), Segment: "bench", Channel: "push", Category: "marketing",
			IntentID: "cpu-" + strconv.Itoa(i), At: T0.Add(time.Duration(float64(span) * float64(i) / float64(len(reqs))))}
	}
	type contender struct {
		name string
		c    *redis.Client
		run  func([]Request)
		cpu  float64
	}
	var denied int
	engine := func(algo Algorithm) func(*redis.Client) func([]Request) {
		return func(c *redis.Client) func([]Request) {
			e := newEngine(b, c, Options{Rules: rules, Algorithm: algo})
			return func(batch []Request) {
				ds, err := e.Decide(ctx, batch)
				if err != nil {
					b.Fatal(err)
				}
				for _, d := range ds {
					if d.Err != nil {
						b.Fatal(d.Err)
					}
					if algo == SlidingLog && d.Outcome == Capped {
						denied++
					}
				}
			}
		}
	}
	maxW := (7 * 24 * time.Hour).Milliseconds()
	textbook := func(src string) func(*redis.Client) func([]Request) {
		return func(c *redis.Client) func([]Request) {
			s := newScript(src)
			if err := c.ScriptLoad(ctx, s.src).Err(); err != nil {
				b.Fatal(err)
			}
			return func(batch []Request) {
				pipe := c.Pipeline()
				for _, r := range batch {
					d := digest(r.IntentID)
					pipe.EvalSha(ctx, s.sha, []string{"capper:{" + uintString(r.UserID) + "}"},
						r.At.UnixMilli(), string(d[:]), maxW, (24 * time.Hour).Milliseconds(), 3, maxW, 10)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	var cs []*contender
	for _, x := range []struct {
		name string
		mk   func(*redis.Client) func([]Request)
	}{
		{"log", engine(SlidingLog)}, {"window", engine(SlidingWindow)},
		{"textbook", textbook(textbookScript)}, {"textbook-allowed", textbook(textbookAllowedScript)},
	} {
		c := testenv.StartRedis(b, testenv.RedisOptions{}).Client()
		cs = append(cs, &contender{name: x.name, c: c, run: x.mk(c)})
	}
	for _, x := range cs {
		if err := x.c.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		x.cpu = serverCPU(b, x.c)
	}
	b.ResetTimer()
	for lo := 0; lo < len(reqs); lo += 500 {
		for _, x := range cs {
			x.run(reqs[lo:min(lo+500, len(reqs))])
		}
	}
	// One pass of the fixed workload is the measurement: it takes seconds,
	// so the framework does not call this again with a larger b.N.
	b.StopTimer()
	usec := map[string]float64{}
	cpu := map[string]float64{}
	for _, x := range cs {
		s, err := commandStat(x.c, "evalsha")
		if err != nil {
			b.Fatal(err)
		}
		if s.calls != int64(len(reqs)) {
			b.Fatalf("%s: %d EVALSHA calls for %d decisions", x.name, s.calls, len(reqs))
		}
		usec[x.name] = float64(s.usec) / float64(s.calls)
		cpu[x.name] = (serverCPU(b, x.c) - x.cpu) * 1e6 / float64(len(reqs))
		b.ReportMetric(usec[x.name], x.name+"-usec/decision")
		b.ReportMetric(cpu[x.name], x.name+"-cpu-usec/decision")
	}
	b.ReportMetric(float64(denied)/float64(len(reqs)), "denied-share")
	b.ReportMetric(usec["log"]/usec["textbook"], "log/textbook")
	b.ReportMetric(usec["log"]/usec["textbook-allowed"], "log/textbook-allowed")
	b.ReportMetric(usec["window"]/usec["textbook"], "window/textbook")
	b.ReportMetric(cpu["log"]/cpu["textbook"], "log/textbook-cpu")
}

// BenchmarkMemoryPerUser reports Redis memory per tracked user (MEMORY USAGE
// of every key of the user) after 1, 5 and 10 allowed intents, for
// sliding_log (one sorted set) and sliding_window (counter hashes and one
// idempotency marker per intent), on a single node.
func BenchmarkMemoryPerUser(b *testing.B) {
	r := testenv.StartRedis(b, testenv.RedisOptions{})
	c := r.Client()
	ctx := context.Background()
	rules := Rules{
		Segments: []Segment{{Name: "bench", Policy: Policy{Limits: []Limit{
			{Name: "daily", Window: 24 * time.Hour, Max: 100},
			{Name: "weekly", Window: 7 * 24 * time.Hour, Max: 100},
		}}}},
		Default: Policy{Limits: []Limit{{Name: "daily", Window: 24 * time.Hour, Max: 1}}},
	}
	const users = 1000
	for _, n := range []int{1, 5, 10} {
		b.Run(fmt.Sprintf("intents=%d", n), func(b *testing.B) {
			if err := c.FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			per := map[Algorithm]float64{}
			for _, algo := range []Algorithm{SlidingLog, SlidingWindow} {
				if err := c.FlushAll(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				e := newEngine(b, c, Options{Rules: rules, Algorithm: algo}) // the default key prefix
				for k := range n {
					var reqs []Request
					for u := range uint64(users) {
						reqs = append(reqs, Request{UserID: 100_000_000 + u, Segment: "bench", Channel: "push", Category: "marketing",
							IntentID: fmt.Sprintf("mem-%d-%d", u, k), At: T0.Add(time.Duration(k) * 37 * time.Minute)})
					}
					ds, err := e.Decide(ctx, reqs)
					if err != nil {
						b.Fatal(err)
					}
					for _, d := range ds {
						if d.Err != nil || d.Outcome != Allowed {
							b.Fatalf("%s: %+v", algo, d)
						}
					}
				}
				var total int64
				keys, err := c.Keys(ctx, e.keys.prefix+":*").Result()
				if err != nil {
					b.Fatal(err)
				}
				for _, k := range keys {
					m, err := c.MemoryUsage(ctx, k, 0).Result()
					if err != nil {
						b.Fatal(err)
					}
					total += m
				}
				per[algo] = float64(total) / users
			}
			key := "capper:{100000000}:sw:86400000"
			b.ResetTimer()
			for range b.N {
				if err := c.MemoryUsage(ctx, key, 0).Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(per[SlidingLog], "log-bytes/user")
			b.ReportMetric(per[SlidingWindow], "window-bytes/user")
		})
	}
}

// BenchmarkDecideWait measures what redis.wait_replicas costs: the same
// batches against a master with one replica, without and with WAIT 1, in
// one run (latency per batch and decisions/s, and their ratios).
func BenchmarkDecideWait(b *testing.B) {
	master := testenv.StartRedis(b, testenv.RedisOptions{})
	testenv.ReplicaOf(b, master)
	c := redis.NewClient(&redis.Options{Addr: master.Addr(), PoolSize: 8})
	b.Cleanup(func() { _ = c.Close() })
	base := map[int]time.Duration{}
	for _, batch := range []int{100, 1000} {
		for _, wait := range []int{0, 1} {
			b.Run(fmt.Sprintf("batch=%d/wait_replicas=%d", batch, wait), func(b *testing.B) {
				e := newEngine(b, c, Options{Rules: benchRules(), WaitReplicas: wait, WaitTimeout: time.Second})
				if err := flushAll(c); err != nil {
					b.Fatal(err)
				}
				reqs := benchRequests(b.N*batch, uint64(batch+wait))
				ctx := context.Background()
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					ds, err := e.Decide(ctx, reqs[i*batch:(i+1)*batch])
					if err != nil {
						b.Fatal(err)
					}
					for _, d := range ds {
						if d.Err != nil {
							b.Fatal(d.Err)
						}
					}
				}
				perBatch := time.Since(start) / time.Duration(b.N)
				b.StopTimer()
				b.ReportMetric(float64(perBatch.Microseconds())/1000, "ms/batch")
				b.ReportMetric(float64(batch)/perBatch.Seconds(), "decisions/s")
				if wait == 0 {
					base[batch] = perBatch
				} else if base[batch] > 0 {
					b.ReportMetric(float64(perBatch)/float64(base[batch]), "latency-ratio-to-no-wait")
				}
			})
		}
	}
}
