package capping

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

// The benchmark workloads: users in a 1M id range, decisions at T0.
const benchUsers = 1_000_000

// benchRules is today's policy shape: a daily and a weekly cap.
func benchRules() Rules {
	return Rules{
		Segments: []Segment{{Name: "bench", Policy: Policy{Limits: []Limit{
			{Name: "daily", Window: day, Max: 3},
			{Name: "weekly", Window: 7 * day, Max: 10},
		}}}},
		Default:    Policy{Limits: []Limit{{Name: "daily", Window: day, Max: 1}}},
		Channels:   []string{"email", "push", "sms", "inapp"},
		Categories: []string{"marketing", "transactional"},
		TimeZone:   time.UTC,
	}
}

// scopedRules is the policy model's shape: a calendar day of promo pushes,
// one send per campaign a week, a reserved daily slot, a weekly cap and an
// sms cap.
func scopedRules() Rules {
	r := benchRules()
	r.Segments[0].Limits = []Limit{
		{Name: "promo-day", Calendar: Day, Max: 2, Where: Where{Tags: []string{"promo"}, Channels: []string{"push"}}},
		{Name: "same-campaign", Window: 7 * day, Max: 1, Per: PerCampaign},
		{Name: "daily", Window: day, Max: 3, Reserve: Reserve{Slots: 1, Below: High}},
		{Name: "weekly", Window: 7 * day, Max: 10},
		{Name: "sms-week", Window: 7 * day, Max: 1, Where: Where{Channels: []string{"sms"}}},
	}
	return r
}

func benchRequests(n int, seed uint64) []Request {
	rng := rand.New(rand.NewPCG(seed, 1))
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = benchRequest(rng, uint64(rng.IntN(benchUsers)), T0)
		reqs[i].IntentID = strconv.FormatUint(seed, 36) + "-" + strconv.FormatUint(uint64(i), 36)
	}
	return reqs
}

// benchRequest is one intent of the benchmark traffic: mostly pushes, a
// third of them promotional, one of 50 campaigns, normal priority.
func benchRequest(rng *rand.Rand, uid uint64, at time.Time) Request {
	r := Request{UserID: uid, Segment: "bench", Channel: "push", Category: "marketing", Priority: Normal, At: at,
		Campaign: "campaign-" + strconv.Itoa(rng.IntN(50))}
	switch rng.IntN(6) {
	case 0, 1:
		r.Tags = []string{"promo"}
	case 2:
		r.Channel = "email"
	case 3:
		r.Channel = "sms"
	}
	return r
}

// rawLimit is the throughput of the same script calls sent without the
// engine: arguments built beforehand, pipelines of 1000 on 4 connections.
// It is the bound the engine's own work is measured against.
func rawLimit(b *testing.B, e *Engine, c redis.UniversalClient) float64 {
	const n = 200_000
	reqs := benchRequests(n, 99)
	calls := make([]call, n)
	for i := range calls {
		calls[i] = call{i: i, plan: e.set.Load().plan(&reqs[i], nil)}
	}
	e.prepare(e.set.Load(), reqs, calls)
	cmds := make([][]any, n)
	for i := range calls {
		c := &calls[i]
		args := []any{"evalsha", e.set.Load().script.sha, 1, c.key}
		cmds[i] = e.set.Load().appendArgv(args, c)
	}
	if err := flushAll(c); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				hi := int(next.Add(1000))
				if hi-1000 >= n {
					return
				}
				pipe := c.Pipeline()
				for _, args := range cmds[hi-1000 : min(hi, n)] {
					pipe.Do(ctx, args...)
				}
				if _, err := pipe.Exec(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return n / time.Since(start).Seconds()
}

func benchDecide(b *testing.B, c redis.UniversalClient) {
	for _, shape := range []struct {
		name  string
		rules Rules
	}{{"today", benchRules()}, {"scopes", scopedRules()}} {
		e := newEngine(b, c, Options{Rules: shape.rules})
		var lim float64
		var once sync.Once
		for _, batch := range []int{1, 100, 1000} {
			for _, conc := range []int{1, 4} {
				b.Run(fmt.Sprintf("policy=%s/batch=%d/conc=%d", shape.name, batch, conc), func(b *testing.B) {
					once.Do(func() { lim = rawLimit(b, e, c) })
					if err := flushAll(c); err != nil {
						b.Fatal(err)
					}
					reqs := benchRequests(b.N, uint64(batch*10+conc))
					var next, failed atomic.Int64
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
					b.ReportMetric(lim, "raw-pipeline-decisions/s")
					b.ReportMetric(rate/lim, "ratio-of-raw")
				})
			}
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

// BenchmarkDecide measures Decide against one redis-server, for today's
// policy shape and the scoped one, beside the same script calls sent raw
// (no engine work) in the same run.
func BenchmarkDecide(b *testing.B) {
	r := testenv.StartRedis(b, testenv.RedisOptions{})
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), PoolSize: 8})
	b.Cleanup(func() { _ = c.Close() })
	benchDecide(b, c)
}

// BenchmarkDecideCluster is the same against the 3-master cluster.
func BenchmarkDecideCluster(b *testing.B) {
	cl := testenv.StartCluster(b, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 8})
	b.Cleanup(func() { _ = c.Close() })
	benchDecide(b, c)
}

// capper v1's scripts (sorted-set logs and sub-interval counters), for the
// side-by-side comparison and the migration test.
var (
	//go:embed testdata/v1_sliding_log.lua
	v1LogSrc string
	//go:embed testdata/v1_sliding_window.lua
	v1WindowSrc string
)

// design is one way of storing caps, driven with the same intents.
type design struct {
	name   string
	c      *redis.Client
	decide func(reqs []Request) (capped int)
}

// v1Log drives capper v1's sliding_log with today's policy (daily 3, weekly
// 10; retention a week): one sorted set per user.
func v1Log(b *testing.B, c *redis.Client) func([]Request) int {
	ctx := context.Background()
	s := newScript(v1LogSrc)
	if err := c.ScriptLoad(ctx, s.src).Err(); err != nil {
		b.Fatal(err)
	}
	dayMS, weekMS := day.Milliseconds(), (7 * day).Milliseconds()
	return func(reqs []Request) int {
		pipe := c.Pipeline()
		cmds := make([]*redis.Cmd, len(reqs))
		for i, r := range reqs {
			d := digest(r.IntentID)
			now := r.At.UnixMilli()
			cmds[i] = pipe.EvalSha(ctx, s.sha, []string{"v1:{" + strconv.FormatUint(r.UserID, 10) + "}"},
				string(d[:]), now, now-weekMS, weekMS, now, 0, "1", now-dayMS+1, 3, dayMS, "1", now-weekMS+1, 10, weekMS)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		return countCapped(b, cmds)
	}
}

// v1Window drives capper v1's sliding_window (24 sub-intervals): an
// idempotency marker key per intent and a counter hash per window.
func v1Window(b *testing.B, c *redis.Client) func([]Request) int {
	ctx := context.Background()
	s := newScript(v1WindowSrc)
	if err := c.ScriptLoad(ctx, s.src).Err(); err != nil {
		b.Fatal(err)
	}
	dayMS, weekMS := day.Milliseconds(), (7 * day).Milliseconds()
	return func(reqs []Request) int {
		pipe := c.Pipeline()
		cmds := make([]*redis.Cmd, len(reqs))
		for i, r := range reqs {
			base := "v1w:{" + strconv.FormatUint(r.UserID, 10) + "}"
			d := digest(r.IntentID)
			cmds[i] = pipe.EvalSha(ctx, s.sha, []string{base + ":d:" + string(appendHex(nil, d)), base + ":sw:86400000", base + ":sw:604800000"},
				weekMS, r.At.UnixMilli(), 2, dayMS, dayMS/24, weekMS, weekMS/24, 2, 3, 3, 10)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		return countCapped(b, cmds)
	}
}

func countCapped(b *testing.B, cmds []*redis.Cmd) int {
	n := 0
	for _, cmd := range cmds {
		res, err := cmd.Int64Slice()
		if err != nil {
			b.Fatal(err)
		}
		if res[0] == codeCapped {
			n++
		}
	}
	return n
}

// v2 drives this engine with rules.
func v2(b *testing.B, c *redis.Client, rules Rules) func([]Request) int {
	e := newEngine(b, c, Options{Rules: rules, KeyPrefix: "v2"})
	return func(reqs []Request) int {
		ds, err := e.Decide(context.Background(), reqs)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for _, d := range ds {
			if d.Err != nil {
				b.Fatal(d.Err)
			}
			if d.Outcome == Capped {
				n++
			}
		}
		return n
	}
}

// floorScript is the least a decision can cost Redis: one Lua script
// call that reads and writes one key (a GET and a SET of the user's
// bucket), the peer of the goal "at most 2x for a cold allowed decision".
var floorScript = redis.NewScript(`redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], ARGV[1]) return 0`)

// floor drives floorScript: one call per intent, on the user's bucket key.
func floor(b *testing.B, c *redis.Client) func([]Request) int {
	ctx := context.Background()
	if err := floorScript.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	k := keys{prefix: "floor"}
	return func(reqs []Request) int {
		pipe := c.Pipeline()
		for i := range reqs {
			floorScript.EvalSha(ctx, pipe, []string{k.bucket(reqs[i].UserID)}, packTime(reqs[i].At.Unix()))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		return 0
	}
}

func designs(b *testing.B) []*design {
	var ds []*design
	for _, x := range []struct {
		name string
		mk   func(*redis.Client) func([]Request) int
	}{
		{"v1 sliding_log", func(c *redis.Client) func([]Request) int { return v1Log(b, c) }},
		{"v1 sliding_window", func(c *redis.Client) func([]Request) int { return v1Window(b, c) }},
		{"v2 packed, today's policy", func(c *redis.Client) func([]Request) int { return v2(b, c, benchRules()) }},
		{"v2 packed, scoped policy", func(c *redis.Client) func([]Request) int { return v2(b, c, scopedRules()) }},
		{"floor: a Lua GET+SET", func(c *redis.Client) func([]Request) int { return floor(b, c) }},
	} {
		c := testenv.StartRedis(b, testenv.RedisOptions{}).Client()
		ds = append(ds, &design{name: x.name, c: c, decide: x.mk(c)})
	}
	return ds
}

// serverUsec is the time a server spent inside EVALSHA and EVAL, and calls.
func serverUsec(b testing.TB, c *redis.Client) (usec, calls int64) {
	for _, name := range []string{"evalsha", "eval"} {
		s, err := commandStat(c, name)
		if err != nil && b != nil {
			b.Fatal(err)
		}
		usec, calls = usec+s.usec, calls+s.calls
	}
	return usec, calls
}

func usedMemory(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no used_memory in INFO")
	return 0
}

// BenchmarkRedisCost runs capper v1's designs and this one side by side,
// each on its own redis-server, taking turns batch by batch on the same
// intents, and prints Redis CPU per decision (INFO commandstats: time
// inside the script call) for a mostly allowed and a mostly refused
// workload, and Redis memory per user (used_memory delta) after 1, 5 and
// 10 sends spread over a week, with the ratios to v1 sliding_log.
//
//   - allowed: 100k intents to 100k random users of 1M over two weeks;
//   - refused: 100k intents to 2,500 users in one day (40 each against a
//     daily cap of 3), as in a blast to users already messaged;
//   - memory: 32,768 users with consecutive ids (buckets full), each sent
//     n intents at even intervals over 7 days.
func BenchmarkRedisCost(b *testing.B) {
	ds := designs(b)
	ctx := context.Background()
	type row struct {
		usec   [3]float64 // allowed, refused, dense (the memory workload at 5 sends)
		capped [2]float64
		bytes  [3]float64 // 1, 5, 10 sends
	}
	rows := make([]row, len(ds))
	b.ResetTimer()
	for range b.N {
		for w, wl := range []struct {
			users int
			span  time.Duration
		}{{benchUsers, 14 * day}, {2_500, day}} {
			rng := rand.New(rand.NewPCG(3, uint64(w)))
			const n = 100_000
			reqs := make([]Request, n)
			for i := range reqs {
				at := T0.Add(time.Duration(float64(wl.span) * float64(i) / n))
				reqs[i] = benchRequest(rng, uint64(rng.IntN(wl.users)), at)
				reqs[i].IntentID = fmt.Sprint("cpu-", w, "-", i)
			}
			before := make([][2]int64, len(ds))
			for k, d := range ds {
				if err := d.c.FlushAll(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				before[k][0], before[k][1] = serverUsec(b, d.c)
			}
			capped := make([]int, len(ds))
			for lo := 0; lo < n; lo += 500 {
				for k, d := range ds {
					capped[k] += d.decide(reqs[lo:min(lo+500, n)])
				}
			}
			for k, d := range ds {
				usec, calls := serverUsec(b, d.c)
				if calls-before[k][1] != n {
					b.Fatalf("%s: %d script calls for %d decisions", d.name, calls-before[k][1], n)
				}
				rows[k].usec[w] = float64(usec-before[k][0]) / n
				rows[k].capped[w] = float64(capped[k]) / n
			}
		}
		for j, sends := range []int{1, 5, 10} {
			const users = 32_768
			for k, d := range ds {
				if err := d.c.FlushAll(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				base := usedMemory(b, d.c)
				usec0, calls0 := serverUsec(b, d.c)
				rng := rand.New(rand.NewPCG(5, uint64(sends)))
				for s := range sends {
					at := T0.Add(time.Duration(s) * 7 * day / time.Duration(sends))
					reqs := make([]Request, 0, users)
					for u := range uint64(users) {
						r := benchRequest(rng, 1_000_000+u, at.Add(time.Duration(u)*time.Millisecond))
						// Every send allowed by every design.
						r.Tags, r.Channel, r.Campaign = nil, "push", "campaign-"+strconv.Itoa(s)
						r.IntentID = fmt.Sprint("mem-", u, "-", s)
						reqs = append(reqs, r)
					}
					for lo := 0; lo < len(reqs); lo += 1000 {
						if c := d.decide(reqs[lo:min(lo+1000, len(reqs))]); c > 0 {
							b.Fatalf("%s: %d of the memory workload's sends capped", d.name, c)
						}
					}
				}
				rows[k].bytes[j] = float64(usedMemory(b, d.c)-base) / users
				if sends == 5 {
					usec, calls := serverUsec(b, d.c)
					rows[k].usec[2] = float64(usec-usec0) / float64(calls-calls0)
				}
			}
		}
	}
	b.StopTimer()
	var out strings.Builder
	tw := tabwriter.NewWriter(&out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "design\tus/decision allowed\t(x v1)\tallowed, dense users\t(x v1)\trefused\t(x v1)\tB/user 1 send\t5 sends\t10 sends\t(x v1 at 5)\tcapped share allowed/refused\t")
	v1 := rows[0]
	for k, d := range ds {
		r := rows[k]
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\t%.0f\t%.0f\t%.2f\t%.2f / %.2f\t\n", d.name,
			r.usec[0], r.usec[0]/v1.usec[0], r.usec[2], r.usec[2]/v1.usec[2], r.usec[1], r.usec[1]/v1.usec[1],
			r.bytes[0], r.bytes[1], r.bytes[2], r.bytes[1]/v1.bytes[1], r.capped[0], r.capped[1])
	}
	_ = tw.Flush()
	b.Logf("Redis cost per decision and per user (%s):\n%s", "same intents, each design on its own redis-server, taking turns", out.String())
	fl := rows[len(rows)-1].usec
	b.Logf("v2 against the floor (a Lua GET+SET of the same keys, same run): allowed %.2fx (goal <= 2x), refused %.2fx, dense %.2fx",
		rows[2].usec[0]/fl[0], rows[2].usec[1]/fl[1], rows[2].usec[2]/fl[2])
	b.ReportMetric(rows[2].usec[0]/fl[0], "v2-allowed-x-floor")
	b.Logf("Sizing from these figures (v2, today's policy):\n%s", sizing(rows[2].usec, rows[2].bytes))
	for k, d := range ds {
		name := strings.NewReplacer(" ", "-", ",", "", "'", "").Replace(d.name)
		b.ReportMetric(rows[k].usec[0]/v1.usec[0], name+"-cpu-allowed-x-v1")
		b.ReportMetric(rows[k].usec[1]/v1.usec[1], name+"-cpu-refused-x-v1")
		b.ReportMetric(rows[k].usec[2]/v1.usec[2], name+"-cpu-dense-x-v1")
		b.ReportMetric(rows[k].bytes[1], name+"-bytes/user@5")
	}
}

// Sizing assumptions: a master's main thread kept at most half busy with
// scripts (the rest is network I/O, replication, headroom for a failover),
// at most 16 GiB of data per master, a blast of 10M users in 60 s.
const (
	masterBusy   = 0.5
	masterMemory = 16 << 30
	blastRate    = 10_000_000 / 60.0
)

// sizing turns measured Redis CPU per decision (allowed sparse, refused,
// allowed dense) and bytes per user (1, 5, 10 sends a week) into memory and
// masters for 10M, 100M and 270M tracked users, and masters for the blast
// rate (all intents allowed to cold users: the costliest case).
func sizing(usec [3]float64, bytes [3]float64) string {
	var out strings.Builder
	tw := tabwriter.NewWriter(&out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tracked users\tmemory at 5 sends/week\tat 10\tmasters for memory\t")
	for _, n := range []float64{10e6, 100e6, 270e6} {
		m5, m10 := n*bytes[1], n*bytes[2]
		fmt.Fprintf(tw, "%.0fM\t%.1f GiB\t%.1f GiB\t%d\t\n", n/1e6, m5/(1<<30), m10/(1<<30), int(math.Ceil(m10/masterMemory)))
	}
	_ = tw.Flush()
	worst := max(usec[0], usec[1], usec[2])
	cores := blastRate * worst / 1e6
	fmt.Fprintf(&out, "blast of %.0fk decisions/s at %.2f us each (the worst measured): %.2f Redis main threads, %d masters at <= %.0f%% busy\n",
		blastRate/1e3, worst, cores, int(math.Ceil(cores/masterBusy)), masterBusy*100)
	return out.String()
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
