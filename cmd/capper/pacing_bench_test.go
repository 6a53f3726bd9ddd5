package main

// BenchmarkPacing: send pacing's promises measured on real `capper run`
// workers draining a blast through a provider budget, with an urgent
// campaign, exempt sends, a worker killed and the blast stopped.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/control"
	"github.com/capper-dev/capper/internal/demo"
	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/testenv"
)

// Send pacing's goals (docs/concepts/pacing.md), each figure's own.
const (
	goalMostPerSecond = 1.01                   // most releases in any 1 s / rate (plus the burst)
	goalMeanRate      = 0.95                   // mean releases/s / rate while anything waits
	goalTxnP99        = time.Second            // transactional, input to delivery
	goalOvertake      = 100 * time.Millisecond // a p75 waiting longer than this holds back p50
	goalStopGrace     = 2 * time.Second        // nothing of a stopped blast released later
	goalLeaseCalls    = 0.01                   // Redis calls per paced intent
	goalCPUDelta      = 3.0                    // us of worker CPU per intent, paced - unpaced (pacing v2; v1 asked 1)
)

// pacingScale is the workload, from the environment
// (CAPPER_BENCH_PACING_*); the defaults fit a 2-core machine.
type pacingScale struct {
	blast, campaign int     // the blast (priority 50) and the urgent campaign (75)
	rate            float64 // the budget, releases/s
	burst           int
	txnRate         float64 // transactional (exempt) pushes/s
	workers         int
	masters         int // 1: one redis-server; more: a Redis Cluster
	partitions      int // of the input and every topic co-partitioned with it
	// The timeline, from the blast's first record: the campaign arrives,
	// a worker is killed (SIGKILL; restarted restartAfter later), the
	// blast is stopped; transactional pushes run from 0 until txnUntil
	// (and until nothing waits).
	campaignAt, killAt, stopAt, txnUntil time.Duration
	restartAfter                         time.Duration // after the kill; negative: never
	sample                               int           // cancelled users checked in Redis
	statusTopic                          string        // kafka.topics.delivery_status ("": none)
}

func pacingScaleFromEnv(b *testing.B) pacingScale {
	b.Helper()
	num := func(name string, def float64) float64 {
		v := os.Getenv("CAPPER_BENCH_PACING_" + name)
		if v == "" {
			return def
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			b.Fatalf("CAPPER_BENCH_PACING_%s=%q: not a number", name, v)
		}
		return f
	}
	s := pacingScale{blast: int(num("INTENTS", 200_000)), rate: num("RATE", 2000),
		workers: int(num("WORKERS", 3)), masters: int(num("MASTERS", 1)),
		campaignAt: 10 * time.Second, killAt: 20 * time.Second, stopAt: 30 * time.Second, txnUntil: 35 * time.Second,
		sample: int(num("SAMPLE", 1000))}
	if v := os.Getenv("CAPPER_BENCH_PACING_RESTART"); v == "never" {
		s.restartAfter = -1
	} else {
		s.restartAfter = time.Duration(num("RESTART", 0) * float64(time.Second))
	}
	s.campaign = int(num("CAMPAIGN", float64(s.blast/10)))
	s.burst = int(num("BURST", math.Ceil(s.rate/10)))
	s.txnRate = num("TXN_RATE", s.rate/20)
	s.partitions = int(num("PARTITIONS", float64(max(4, 2*s.workers))))
	if s.workers < 2 || s.masters < 1 || s.partitions < 1 || s.blast < 1 || s.rate <= 0 || s.burst < 1 {
		b.Fatalf("CAPPER_BENCH_PACING_*: %+v (at least 2 workers, 1 master, 1 partition, 1 intent)", s)
	}
	return s
}

// BenchmarkPacing runs one workload twice on fresh servers, with a
// provider budget and without (first come, first served), and prints each
// figure with its goal and ratio (docs/benchmarks.md, send pacing):
//
//	go test ./cmd/capper -run '^$' -bench BenchmarkPacing -benchtime 1x -timeout 30m
//
// The workload: WORKERS `capper run` processes (as BenchmarkEndToEnd runs
// them: the test stack's broker timings, the production batch size) on
// PARTITIONS partitions, one redis-server (MASTERS 1) or a Redis Cluster
// of MASTERS masters, and one budget of RATE/s with a burst of BURST on
// push, lanes high (min_priority 75) and normal; a blast of INTENTS pushes
// (priority 50, one per user) at t=0, a campaign of CAMPAIGN pushes
// (priority 75) at 10 s, transactional pushes (exempt) at TXN_RATE a
// second from 0 to 35 s (and until nothing waits), one worker SIGKILLed at
// 20 s and restarted RESTART seconds later ("never": not restarted), the
// blast stopped (app.SetCampaign, what `capper campaign stop` calls) at
// 30 s. Each is CAPPER_BENCH_PACING_<NAME> in the environment; the
// defaults (INTENTS 200000, RATE 2000, BURST RATE/10, CAMPAIGN INTENTS/10,
// TXN_RATE RATE/20, WORKERS 3, PARTITIONS 2 x WORKERS (at least 4),
// MASTERS 1, RESTART 0) fit a 2-core machine; for a 16-core one:
// INTENTS=10000000 RATE=50000 WORKERS=8 MASTERS=6. SAMPLE (1000) is how
// many cancelled users are read back from Redis; SECONDS=1 also prints the
// run second by second, PROFILE=DIR saves CPU profiles of the workers never
// killed (profileAt). The
// workers are static members (kafka.group_instance_id w-0, w-1, ..., as the
// Helm chart sets it); MEMBERS=dynamic runs them without.
func BenchmarkPacing(b *testing.B) {
	sc := pacingScaleFromEnv(b)
	var paced, unpaced *pacingRun
	for b.Loop() {
		paced = runPacing(b, sc, true)
		unpaced = runPacing(b, sc, false)
	}
	reportPacing(b, sc, paced, unpaced)
}

const (
	paceBudget   = "push"
	paceLanes    = "capper-lanes"
	paceInput    = "send-intents"
	paceDelay    = "send-intents-delay-1m"
	paceGroup    = "pacing"
	paceBlast    = "blast"
	paceUrgent   = "urgent"
	paceReceipts = "receipts"
)

func pacePolicyYAML(sc pacingScale, budgets bool) string {
	p := `channels: [push, email, sms, inapp]
categories: [marketing, transactional]
default_category: marketing
exempt_categories: [transactional]
default_policy:
  limits:
    - {name: daily, window: 24h, max: 10}
`
	if budgets {
		p += fmt.Sprintf(`budgets:
  - name: %s
    rate: %v
    burst: %d
    channels: [push]
    lanes:
      - {name: high, min_priority: 75}
      - {name: normal}
`, paceBudget, sc.rate, sc.burst)
	}
	return p
}

// pacingRun is what one run measured.
type pacingRun struct {
	paced   bool
	intents int // every input record
	t0      time.Time
	blastIn time.Duration // producing the blast took
	killed, restarted, stopAck,
	txnStopped, drained time.Time
	cpuIdle  float64    // worker CPU/s (all workers) before t0, nothing to do
	cpu      float64    // worker CPU seconds from t0 to the end
	alloc    float64    // bytes the workers allocated from t0 to the end (go_memstats_alloc_bytes_total)
	cpuPhase [4]float64 // ... from t0 to the campaign, to the kill, to the stop, to the end
	metrics  map[string]float64
	out      pacingOutputs
	redis    redisCheck
}

// pacingWorker is one `capper run` process and its scrapes.
type pacingWorker struct {
	path, addr string
	p          *proc
	last       map[string]float64
	cpu        map[int]float64 // process_cpu_seconds_total at each mark it saw
	alloc      map[int]float64 // go_memstats_alloc_bytes_total likewise
	killed     bool
}

// The marks CPU is read at: t0, the campaign, the kill, the stop, the end.
const (
	markT0 = iota
	markCampaign
	markKill
	markStop
	markEnd
)

// pacingDriver runs one run's timeline.
type pacingDriver struct {
	b         *testing.B
	sc        pacingScale
	s         *stack
	r         *pacingRun
	ws        []*pacingWorker
	txnTimes  []time.Time // each transactional push's timestamp
	profile   string      // CAPPER_BENCH_PACING_PROFILE
	profiles  sync.WaitGroup
	engineCfg *config.Config
}

func runPacing(b *testing.B, sc pacingScale, paced bool) *pacingRun {
	b.Helper()
	d := &pacingDriver{b: b, sc: sc, r: &pacingRun{paced: paced}, profile: os.Getenv("CAPPER_BENCH_PACING_PROFILE"),
		txnTimes: make([]time.Time, int(sc.txnRate*(sc.txnUntil.Seconds()+600))+16)}
	d.s, d.engineCfg = pacingStack(b, sc, paced)
	d.s.cfg.HTTP.Pprof = d.profile != ""
	d.startWorkers()
	d.idle()
	r := d.r
	r.t0 = time.Now()
	blastDone := d.produceBlast()
	txnCtx, stopTxn := context.WithCancel(context.Background())
	var txnSent atomic.Int64
	txnDone := make(chan error, 1)
	go func() { txnDone <- produceTransactional(txnCtx, d.s.kafka.Addrs, sc, d.txnTimes, &txnSent) }()
	// One CPU profile at a time per process: the blast's arrival (held
	// when paced), the releases up to the kill, the stop's read-back.
	d.profileAt("hold", 0, 5*time.Second)
	d.profileAt("release", 6*time.Second, 13*time.Second)
	d.profileAt("stop", sc.stopAt, 4*time.Second)
	d.timeline()
	if err := <-blastDone; err != nil {
		b.Fatal(err)
	}
	time.Sleep(time.Until(r.t0.Add(sc.txnUntil)))
	var lanes []string
	if paced {
		lanes = []string{pacing.Topic(paceLanes, paceBudget, "high"), pacing.Topic(paceLanes, paceBudget, "normal")}
	}
	// Transactional pushes go on while anything waits.
	waitPacingDrained(b, d.s, sc, lanes, -1, d.ws)
	stopTxn()
	r.txnStopped = time.Now()
	if err := <-txnDone; err != nil {
		b.Fatal(err)
	}
	txn := int(txnSent.Load())
	r.intents = sc.blast + sc.campaign + txn
	waitPacingDrained(b, d.s, sc, lanes, r.intents, d.ws)
	r.drained = time.Now()
	d.mark(markEnd)
	d.profiles.Wait()
	d.allocsProfile()
	d.finish()
	r.out = readPacingOutputs(b, d.s.kafka.Addrs, sc, d.txnTimes[:txn])
	if paced {
		r.redis = checkCancelledUncounted(b, d.engineCfg, sc, &r.out)
	}
	return r
}

func (d *pacingDriver) startWorkers() {
	for i := range d.sc.workers {
		w := &pacingWorker{path: filepath.Join(d.b.TempDir(), fmt.Sprintf("worker-%d.yaml", i)),
			addr: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(d.b)), cpu: map[int]float64{}, alloc: map[int]float64{}}
		d.s.path, d.s.cfg.HTTP.Address = w.path, w.addr
		// Static members, as the Helm chart runs them (a restarted worker
		// gets its partitions back at once); MEMBERS=dynamic: none.
		d.s.cfg.Kafka.GroupInstanceID = ""
		if os.Getenv("CAPPER_BENCH_PACING_MEMBERS") != "dynamic" {
			d.s.cfg.Kafka.GroupInstanceID = fmt.Sprintf("w-%d", i)
		}
		d.s.writeConfig(d.b)
		w.p = d.s.start(d.b)
		d.ws = append(d.ws, w)
	}
}

// mark scrapes every live worker: its counters, and its CPU at mark k.
func (d *pacingDriver) mark(k int) {
	for _, w := range d.ws {
		if !w.killed {
			w.last = scrapeWorker(d.b, w.addr)
			w.cpu[k] = w.last["process_cpu_seconds_total"]
			w.alloc[k] = w.last["go_memstats_alloc_bytes_total"]
		}
	}
}

// idle lets the group settle and measures what the workers burn doing
// nothing.
func (d *pacingDriver) idle() {
	time.Sleep(time.Second)
	d.mark(markT0)
	from, before := time.Now(), 0.0
	for _, w := range d.ws {
		before += w.cpu[markT0]
	}
	time.Sleep(3 * time.Second)
	d.mark(markT0)
	after := 0.0
	for _, w := range d.ws {
		after += w.cpu[markT0]
	}
	d.r.cpuIdle = (after - before) / time.Since(from).Seconds()
}

func (d *pacingDriver) produceBlast() chan error {
	done := make(chan error, 1)
	go func() {
		start := time.Now()
		err := produceIntents(context.Background(), d.s.kafka.Addrs, d.sc.blast, d.sc.workers, func(i int) (string, string) {
			u := 1000 + i
			return strconv.Itoa(u), fmt.Sprintf(`{"id":"%s-%d","user_id":%d,"campaign_id":%q,"channel":"push","category":"marketing","priority":50}`, paceBlast, i, u, paceBlast)
		})
		d.r.blastIn = time.Since(start)
		done <- err
	}()
	return done
}

// profileAt saves, with CAPPER_BENCH_PACING_PROFILE=dir, a CPU profile of
// each worker that is never killed, secs long from t0+from
// (<paced|unpaced>-<name>-<i>.pprof): a worker burns a few percent of a
// core, so one worker's seconds hold too few samples to say anything;
// `go tool pprof -top -diff_base 'unpaced-*' 'paced-*'` merges them.
func (d *pacingDriver) profileAt(name string, from, secs time.Duration) {
	if d.profile == "" {
		return
	}
	for i, w := range d.ws[1:] {
		d.profiles.Go(func() {
			time.Sleep(time.Until(d.r.t0.Add(from)))
			file := filepath.Join(d.profile, fmt.Sprintf("%s-%s-%d.pprof", map[bool]string{true: "paced", false: "unpaced"}[d.r.paced], name, i+1))
			if err := saveProfile(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", w.addr, int(secs.Seconds())), file); err != nil {
				d.b.Error(err)
			}
		})
	}
}

// allocsProfile saves, with CAPPER_BENCH_PACING_PROFILE=dir, what each
// worker that was never killed allocated since it started
// (<paced|unpaced>-allocs-<i>.pprof; `go tool pprof -sample_index=alloc_space`).
func (d *pacingDriver) allocsProfile() {
	if d.profile == "" {
		return
	}
	for i, w := range d.ws[1:] {
		file := filepath.Join(d.profile, fmt.Sprintf("%s-allocs-%d.pprof", map[bool]string{true: "paced", false: "unpaced"}[d.r.paced], i+1))
		if err := saveProfile(fmt.Sprintf("http://%s/debug/pprof/allocs", w.addr), file); err != nil {
			d.b.Error(err)
		}
	}
}

// timeline: the campaign, the kill, the stop and the restart, each at its
// time from t0.
func (d *pacingDriver) timeline() {
	type event struct {
		at time.Duration
		do func()
	}
	events := []event{{d.sc.campaignAt, d.campaign}, {d.sc.killAt, d.kill}, {d.sc.stopAt, d.stop}}
	if d.sc.restartAfter >= 0 {
		events = append(events, event{d.sc.killAt + d.sc.restartAfter, d.restart})
	}
	slices.SortStableFunc(events, func(x, y event) int { return cmp.Compare(x.at, y.at) })
	for _, e := range events {
		time.Sleep(time.Until(d.r.t0.Add(e.at)))
		e.do()
	}
}

func (d *pacingDriver) campaign() {
	d.mark(markCampaign)
	if err := produceIntents(context.Background(), d.s.kafka.Addrs, d.sc.campaign, 1, func(i int) (string, string) {
		u := 1000 + d.sc.blast + i
		return strconv.Itoa(u), fmt.Sprintf(`{"id":"%s-%d","user_id":%d,"campaign_id":%q,"channel":"push","category":"marketing","priority":75}`, paceUrgent, i, u, paceUrgent)
	}); err != nil {
		d.b.Fatal(err)
	}
}

func (d *pacingDriver) kill() {
	d.mark(markKill)
	victim := d.ws[0]
	d.r.killed = time.Now()
	if err := victim.p.cmd.Process.Kill(); err != nil {
		d.b.Fatal(err)
	}
	_ = victim.p.wait(d.b, 10*time.Second)
	victim.killed = true
}

func (d *pacingDriver) stop() {
	d.mark(markStop)
	if _, err := app.SetCampaign(context.Background(), d.s.cfg, app.CampaignChange{Campaign: paceBlast, State: control.Stopped,
		Reason: "benchmark", By: "bench"}, slog.New(slog.DiscardHandler)); err != nil {
		d.b.Fatal(err)
	}
	d.r.stopAck = time.Now()
}

// restart starts the killed worker again; its CPU counts from its start,
// in the phase it started in.
func (d *pacingDriver) restart() {
	victim := d.ws[0]
	again := &pacingWorker{path: victim.path, addr: victim.addr, cpu: map[int]float64{markKill: 0}, alloc: map[int]float64{markKill: 0}}
	d.s.path, d.s.cfg.HTTP.Address = again.path, again.addr
	again.p = d.s.start(d.b)
	d.r.restarted = time.Now()
	if !d.r.stopAck.IsZero() {
		again.cpu, again.alloc = map[int]float64{markStop: 0}, map[int]float64{markStop: 0}
	}
	d.ws = append(d.ws, again)
}

// finish sums the workers' counters and CPU by phase, and stops them.
func (d *pacingDriver) finish() {
	r := d.r
	r.metrics = map[string]float64{}
	for _, w := range d.ws {
		for k, v := range w.last {
			r.metrics[k] += v
		}
		marks := slices.Sorted(maps.Keys(w.cpu))
		for i := 1; i < len(marks); i++ {
			c := w.cpu[marks[i]] - w.cpu[marks[i-1]]
			r.cpuPhase[marks[i]-1] += c
			r.cpu += c
			r.alloc += w.alloc[marks[i]] - w.alloc[marks[i-1]]
		}
	}
	for _, w := range d.ws {
		if w.killed {
			continue
		}
		if err := w.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			d.b.Fatal(err)
		}
		if err := w.p.wait(d.b, 30*time.Second); err != nil {
			d.b.Fatalf("capper run: %v\n%s", err, w.p.logs)
		}
	}
}

// pacingStack is the servers of one run: a broker with the topics (the
// lanes created with the others), one redis-server or a cluster, a
// snapshot, and the workers' config (returned too for the engine that
// reads Redis back).
func pacingStack(b *testing.B, sc pacingScale, paced bool) (*stack, *config.Config) {
	b.Helper()
	s := &stack{kafka: testenv.StartKafka(b, int32(sc.partitions), nil)}
	dir := b.TempDir()
	st, err := objstore.Open(context.Background(), dir, objstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := demo.BuildSnapshot(context.Background(), st, 500, 1, time.Now); err != nil {
		b.Fatal(err)
	}
	policyFile := filepath.Join(b.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(pacePolicyYAML(sc, paced)), 0o644); err != nil {
		b.Fatal(err)
	}
	cfg := exampleConfig(b)
	cfg.Policy.Source = "file://" + policyFile
	cfg.Kafka.Brokers = s.kafka.Addrs
	cfg.Kafka.GroupID = paceGroup
	cfg.Kafka.SessionTimeout = config.Duration(6 * time.Second)
	cfg.Kafka.HeartbeatInterval = config.Duration(200 * time.Millisecond)
	cfg.Kafka.FetchMaxWait = config.Duration(100 * time.Millisecond)
	cfg.Kafka.Topics.Input = paceInput
	cfg.Kafka.Topics.Control = testenv.ControlTopic
	cfg.Kafka.DelayTiers = []config.DelayTier{{Delay: config.Duration(time.Minute), Topic: paceDelay}}
	if paced {
		cfg.Kafka.Topics.Lanes = paceLanes
	}
	cfg.Kafka.Topics.DeliveryStatus = sc.statusTopic
	if sc.masters == 1 {
		cfg.Redis.Mode, cfg.Redis.Addrs = "single", []string{testenv.StartRedis(b, testenv.RedisOptions{}).Addr()}
	} else {
		cfg.Redis.Mode, cfg.Redis.Addrs = "cluster", testenv.StartCluster(b, sc.masters).Addrs()
	}
	cfg.Segments.Source = "file://" + dir
	cfg.Worker.BatchSize = config.Default().Worker.BatchSize
	cfg.Worker.ShutdownTimeout = config.Duration(10 * time.Second)
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	// Every topic, the lanes of the policy's budget with the others, as
	// `capper topics create` makes them.
	rep, err := app.CreateTopics(context.Background(), cfg, app.TopicsOptions{ConfigPath: "capper.yaml", Partitions: sc.partitions}, nil)
	if err == nil {
		err = rep.Err()
	}
	if err != nil {
		b.Fatalf("create topics: %v", err)
	}
	s.cfg = cfg
	engineCfg := *cfg
	return s, &engineCfg
}

// produceIntents writes n records (key and value of record i from rec) to
// the input with acks=all, from writers goroutines; each record's
// timestamp is when its batch was made.
func produceIntents(ctx context.Context, addrs []string, n, writers int, rec func(i int) (key, value string)) error {
	const chunk = 5000
	var next atomic.Int64
	errs := make(chan error, writers)
	for range writers {
		go func() {
			w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: paceInput, RequiredAcks: kafka.RequireAll,
				BatchTimeout: time.Millisecond, BatchSize: 1000, Balancer: &kafka.Murmur2Balancer{}}
			defer w.Close()
			msgs := make([]kafka.Message, 0, chunk)
			for {
				lo := int(next.Add(chunk)) - chunk
				if lo >= n {
					errs <- nil
					return
				}
				msgs, now := msgs[:0], time.Now()
				for i := lo; i < min(lo+chunk, n); i++ {
					k, v := rec(i)
					msgs = append(msgs, kafka.Message{Key: []byte(k), Value: []byte(v), Time: now})
				}
				if err := w.WriteMessages(ctx, msgs...); err != nil {
					errs <- fmt.Errorf("produce intents %d-%d: %w", lo, lo+len(msgs), err)
					return
				}
			}
		}()
	}
	var err error
	for range writers {
		err = errors.Join(err, <-errs)
	}
	return err
}

// produceTransactional writes transactional pushes at sc.txnRate until
// ctx ends, each stamped (record timestamp) when it is written; times[i]
// is txn-i's.
func produceTransactional(ctx context.Context, addrs []string, sc pacingScale, times []time.Time, sent *atomic.Int64) error {
	w := &kafka.Writer{Addr: kafka.TCP(addrs...), Topic: paceInput, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, Balancer: &kafka.Murmur2Balancer{}}
	defer w.Close()
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		due := min(int(sc.txnRate*time.Since(start).Seconds()), len(times))
		if due <= n {
			continue
		}
		now := time.Now()
		msgs := make([]kafka.Message, 0, due-n)
		for i := n; i < due; i++ {
			u := 1000 + sc.blast + sc.campaign + i
			times[i] = now
			msgs = append(msgs, kafka.Message{Key: []byte(strconv.Itoa(u)), Time: now,
				Value: fmt.Appendf(nil, `{"id":"%s-%d","user_id":%d,"campaign_id":%q,"channel":"push","category":"transactional"}`, paceReceipts, i, u, paceReceipts)})
		}
		if err := w.WriteMessages(context.Background(), msgs...); err != nil {
			return fmt.Errorf("produce transactional: %w", err)
		}
		n = due
		sent.Store(int64(n))
	}
}

// waitPacingDrained waits until nothing waits in the lanes (the delay
// group committed every lane record) and, with inputs >= 0, the group
// committed that many input records.
func waitPacingDrained(b *testing.B, s *stack, sc pacingScale, lanes []string, inputs int, ws []*pacingWorker) {
	b.Helper()
	deadline := time.Now().Add(time.Duration(float64(sc.blast+sc.campaign)/sc.rate*float64(time.Second)) + 5*time.Minute)
	c := &kafka.Client{Addr: kafka.TCP(s.kafka.Addrs...), Timeout: 10 * time.Second}
	for {
		done := true
		if inputs >= 0 {
			sum := int64(0)
			for _, off := range s.kafka.Committed(b, paceGroup, paceInput, sc.partitions) {
				sum += max(off, 0)
			}
			done = sum >= int64(inputs)
		}
		for _, topic := range lanes {
			req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
			for p := range sc.partitions {
				req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p))
			}
			resp, err := c.ListOffsets(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			committed := s.kafka.Committed(b, s.cfg.Kafka.DelayGroup(), topic, sc.partitions)
			for _, po := range resp.Topics[topic] {
				if po.LastOffset > max(committed[po.Partition], 0) {
					done = false
				}
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, w := range ws {
				fmt.Fprintf(&logs, "--- %s\n%s\n", w.addr, tailString(w.p.logs.String(), 3000))
			}
			b.Fatalf("not drained by %s\n%s", deadline.Format(time.TimeOnly), logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tailString(s string, n int) string { return s[max(0, len(s)-n):] }

// scrapeWorker reads a worker's /metrics: each sample by its full name
// (labels included), and each metric's sum over its labels by its name.
func scrapeWorker(b *testing.B, addr string) map[string]float64 {
	b.Helper()
	_, body := httpBody(b, "http://"+addr+"/metrics")
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		sp := strings.LastIndexByte(line, ' ')
		if line == "" || line[0] == '#' || sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		name := line[:sp]
		out[name] += v
		if i := strings.IndexByte(name, '{'); i >= 0 {
			out[name[:i]] += v
		}
	}
	return out
}

// pacingOutputs is what the output topics say, reduced to what the
// figures need.
type pacingOutputs struct {
	laneRel      []int64 // released-at (Unix ms) of every delivery that waited in a lane
	exemptDec    []int64 // decided-at of the transactional deliveries
	normalRel    []int64 // released-at of the normal lane's deliveries
	high         []heldSpan
	lastLaneRec  int64             // the last released-at of any lane record (delivered or not)
	lastTokenRel int64             // ... of a lane delivery
	txnIn        []time.Time       // each transactional input's record timestamp
	txnLatency   []time.Duration   // first delivery's record timestamp - its input's
	txnLatencyIn []time.Time       // ... of the input written then
	deliveries   []providerArrival // every delivery, by record timestamp
	blastDel     []bool            // per blast intent: delivered
	blastCanc    []bool            // per blast intent: cancelled
	blastRel     []int64           // released-at of each blast delivery
	blastOther   int               // blast outcomes neither delivered nor cancelled
	duplicates   int
	deadLetters  int
	urgentDel    int
	handedBack   int // deliveries of intents a throttled status handed back
}

type heldSpan struct{ held, rel int64 }

type providerArrival struct {
	at  int64 // record timestamp, Unix ms
	txn int   // transactional: its index, else -1
}

func readPacingOutputs(b *testing.B, addrs []string, sc pacingScale, txnIn []time.Time) pacingOutputs {
	b.Helper()
	o := pacingOutputs{blastDel: make([]bool, sc.blast), blastCanc: make([]bool, sc.blast), txnIn: txnIn}
	txnSeen := make([]bool, len(txnIn))
	ms := func(m *kafka.Message, key string) int64 {
		v := headerOf(m, key)
		if v == "" {
			return 0
		}
		t, err := time.Parse(dispatch.TimeLayout, v)
		if err != nil {
			b.Fatalf("%s %q: %v", key, v, err)
		}
		return t.UnixMilli()
	}
	scanTopic(b, addrs, "deliveries", func(m *kafka.Message) {
		campaign, i := intentOf(b, m)
		if headerOf(m, "capper-duplicate") == "true" {
			o.duplicates++
		}
		if headerOf(m, dispatch.HeaderHandedBack) != "" {
			o.handedBack++
		}
		o.deliveries = append(o.deliveries, providerArrival{at: m.Time.UnixMilli(), txn: -1})
		if lane := headerOf(m, dispatch.HeaderLane); lane != "" {
			rel := ms(m, dispatch.HeaderReleasedAt)
			o.laneRel = append(o.laneRel, rel)
			o.lastLaneRec, o.lastTokenRel = max(o.lastLaneRec, rel), max(o.lastTokenRel, rel)
			waited, err := strconv.ParseInt(headerOf(m, dispatch.HeaderWaited), 10, 64)
			if err != nil {
				b.Fatalf("%s: %v", dispatch.HeaderWaited, err)
			}
			switch lane {
			case paceBudget + "/high":
				o.high = append(o.high, heldSpan{held: rel - waited, rel: rel})
			case paceBudget + "/normal":
				o.normalRel = append(o.normalRel, rel)
			default:
				b.Fatalf("delivery from lane %q", lane)
			}
		}
		switch campaign {
		case paceBlast:
			o.blastDel[i] = true
			if rel := ms(m, dispatch.HeaderReleasedAt); rel > 0 {
				o.blastRel = append(o.blastRel, rel)
			}
		case paceUrgent:
			o.urgentDel++
		case paceReceipts:
			o.exemptDec = append(o.exemptDec, ms(m, "capper-decided-at"))
			o.deliveries[len(o.deliveries)-1].txn = i
			if !txnSeen[i] {
				txnSeen[i] = true
				o.txnLatency = append(o.txnLatency, m.Time.Sub(txnIn[i]))
				o.txnLatencyIn = append(o.txnLatencyIn, txnIn[i])
			}
		}
	})
	scanTopic(b, addrs, "suppressed", func(m *kafka.Message) {
		if headerOf(m, dispatch.HeaderLane) != "" {
			o.lastLaneRec = max(o.lastLaneRec, ms(m, dispatch.HeaderReleasedAt))
		}
		if campaign, i := intentOf(b, m); campaign == paceBlast {
			if headerOf(m, "capper-decision") == dispatch.DecisionCancelled {
				o.blastCanc[i] = true
			} else {
				o.blastOther++
			}
		}
	})
	scanTopic(b, addrs, "send-intents-dlq", func(*kafka.Message) { o.deadLetters++ })
	slices.SortStableFunc(o.deliveries, func(x, y providerArrival) int { return cmp.Compare(x.at, y.at) })
	return o
}

// intentOf reads an intent's campaign and index from its id
// (<campaign>-<i>).
func intentOf(b *testing.B, m *kafka.Message) (string, int) {
	v := string(m.Value)
	i := strings.Index(v, `"id":"`)
	if i < 0 {
		b.Fatalf("no id in %q", v)
	}
	v = v[i+len(`"id":"`):]
	id := v[:strings.IndexByte(v, '"')]
	dash := strings.LastIndexByte(id, '-')
	n, err := strconv.Atoi(id[dash+1:])
	if err != nil {
		b.Fatalf("id %q", id)
	}
	return id[:dash], n
}

func headerOf(m *kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// scanTopic calls f with every record of topic, partition by partition,
// up to the high watermark as of the call (without a group).
func scanTopic(b *testing.B, addrs []string, topic string, f func(m *kafka.Message)) {
	b.Helper()
	ctx := context.Background()
	conn, err := kafka.Dial("tcp", addrs[0])
	if err != nil {
		b.Fatal(err)
	}
	parts, err := conn.ReadPartitions(topic)
	conn.Close()
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range parts {
		c, err := kafka.DialLeader(ctx, "tcp", addrs[0], topic, p.ID)
		if err != nil {
			b.Fatal(err)
		}
		first, last, err := c.ReadOffsets()
		if err != nil {
			b.Fatal(err)
		}
		for next := first; next < last; {
			if _, err := c.Seek(next, kafka.SeekAbsolute); err != nil {
				b.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			batch := c.ReadBatch(1, 16<<20)
			for next < last {
				m, err := batch.ReadMessage()
				if err != nil {
					if !errors.Is(err, io.EOF) {
						b.Fatalf("read %s/%d: %v", topic, p.ID, err)
					}
					break
				}
				f(&m)
				next = m.Offset + 1
			}
			_ = batch.Close()
		}
		c.Close()
	}
}

// redisCheck: cancelled blast intents' users, read back from Redis with
// the engine's inspect API (their records count every delivered intent);
// delivered ones as a control.
type redisCheck struct {
	cancelled, cancelledCounted int
	delivered, deliveredCounted int
}

func checkCancelledUncounted(b *testing.B, cfg *config.Config, sc pacingScale, o *pacingOutputs) redisCheck {
	b.Helper()
	ctx := context.Background()
	rdb, err := app.NewRedisClient(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer rdb.Close()
	pol, err := app.LoadPolicy(ctx, cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	eng, err := app.NewEngine(ctx, cfg, pol, rdb, prometheus.NewRegistry(), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	var canc, del []int
	for i := range sc.blast {
		switch {
		case o.blastDel[i]:
			del = append(del, i)
		case o.blastCanc[i]:
			canc = append(canc, i)
		}
	}
	var r redisCheck
	count := func(i int) int {
		states, err := eng.Inspect(ctx, uint64(1000+i), "none", capping.InspectOptions{At: time.Now()})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for _, s := range states {
			n += s.Count
		}
		return n
	}
	for k := range min(sc.sample, len(canc)) {
		r.cancelled++
		if count(canc[k*len(canc)/min(sc.sample, len(canc))]) > 0 {
			r.cancelledCounted++
		}
	}
	for k := range min(sc.sample/10, len(del)) {
		r.delivered++
		if count(del[k*len(del)/min(sc.sample/10, len(del))]) > 0 {
			r.deliveredCounted++
		}
	}
	return r
}

// mostInOneSecond is the most of times (ms) within any 1 s.
func mostInOneSecond(ts []int64) int {
	most, _ := audit.BusiestSecond(audit.UnixMillis(ts))
	return most
}

func sortedInts(parts ...[]int64) []int64 {
	var all []int64
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.Sort(all)
	return all
}

// overtaken counts, over the normal lane's releases at r, the high-lane
// intents held before r - 100 ms and released after r (pairs), and the
// releases with at least one. spans not counted: skip reports one to leave
// out.
func overtaken(normal []int64, high []heldSpan, skip func(heldSpan) bool) (pairs, releases int) {
	// Each high intent is "waiting too long" over (held+100ms, rel).
	var from, to []int64
	for _, h := range high {
		if skip != nil && skip(h) {
			continue
		}
		if s := h.held + goalOvertake.Milliseconds(); s < h.rel {
			from, to = append(from, s), append(to, h.rel)
		}
	}
	slices.Sort(from)
	slices.Sort(to)
	for _, r := range normal {
		// started before r, not yet released at r
		started, _ := slices.BinarySearch(from, r) // from < r
		ended, found := slices.BinarySearch(to, r+1)
		_ = found // to <= r
		if n := started - ended; n > 0 {
			pairs += n
			releases++
		}
	}
	return pairs, releases
}

// secondsTable prints, with CAPPER_BENCH_PACING_SECONDS=1, the paced
// run second by second from t0: releases of each lane, exempt sends, and
// p50 releases while a p75 had waited longer than goalOvertake, and the
// slowest transactional push written in that second (input to delivery).
func secondsTable(line func(string, ...any), r *pacingRun) {
	o := &r.out
	var from, to []int64
	for _, h := range o.high {
		if s := h.held + goalOvertake.Milliseconds(); s < h.rel {
			from, to = append(from, s), append(to, h.rel)
		}
	}
	slices.Sort(from)
	slices.Sort(to)
	t0 := r.t0.UnixMilli()
	type row struct {
		high, normal, exempt, bad int
		txnMax                    time.Duration
	}
	rows := map[int64]*row{}
	at := func(ms int64) *row {
		k := (ms - t0) / 1000
		if rows[k] == nil {
			rows[k] = &row{}
		}
		return rows[k]
	}
	for _, h := range o.high {
		at(h.rel).high++
	}
	for _, n := range o.normalRel {
		at(n).normal++
		started, _ := slices.BinarySearch(from, n)
		ended, _ := slices.BinarySearch(to, n+1)
		if started > ended {
			at(n).bad++
		}
	}
	for _, e := range o.exemptDec {
		at(e).exempt++
	}
	for i, in := range o.txnLatencyIn {
		x := at(in.UnixMilli())
		x.txnMax = max(x.txnMax, o.txnLatency[i])
	}
	keys := slices.Sorted(maps.Keys(rows))
	line("   second  high  normal  exempt  p50-while-p75-waited  slowest transactional written then")
	for _, k := range keys {
		x := rows[k]
		line("   %6d  %4d  %6d  %6d  %20d  %s", k, x.high, x.normal, x.exempt, x.bad, x.txnMax.Round(time.Millisecond))
	}
}

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]
}

// providerLatency models a provider that takes deliveries in the order
// they were written, at rate/s: a delivery goes at its arrival or one
// interval after the one before it, whichever is later. It returns each
// transactional delivery's wait from its input's timestamp.
func providerLatency(o *pacingOutputs, rate float64) []time.Duration {
	step := 1000 / rate
	next := math.Inf(-1)
	seen := map[int]bool{}
	var out []time.Duration
	for _, d := range o.deliveries {
		at := math.Max(float64(d.at), next)
		next = at + step
		if d.txn >= 0 && !seen[d.txn] {
			seen[d.txn] = true
			out = append(out, time.UnixMilli(int64(at)).Sub(o.txnIn[d.txn]))
		}
	}
	return out
}

// pacingReport prints the figures of a paced run p and an unpaced run u.
type pacingReport struct {
	sc   pacingScale
	p, u *pacingRun
	w    strings.Builder
}

func (rp *pacingReport) line(format string, args ...any) { fmt.Fprintf(&rp.w, format+"\n", args...) }

// rel is a time of the paced run from its t0.
func (rp *pacingReport) rel(t time.Time) string {
	return fmt.Sprintf("t=%.1fs", t.Sub(rp.p.t0).Seconds())
}

func paceRatio(v, goal float64) string { return fmt.Sprintf("%.3fx", v/goal) }

func paceAt(ms int64) time.Time { return time.UnixMilli(ms) }

func reportPacing(b *testing.B, sc pacingScale, p, u *pacingRun) {
	b.Helper()
	rp := &pacingReport{sc: sc, p: p, u: u}
	rp.header()
	most, mean := rp.rate()
	rp.latency()
	overtakes := rp.lanes()
	stopViolations := rp.stop()
	perRelease, cpuDelta, allocDelta := rp.cost()
	if os.Getenv("CAPPER_BENCH_PACING_SECONDS") == "1" {
		secondsTable(rp.line, p)
	}
	rp.line("   duplicates delivered: paced %d, unpaced %d; dead letters %d / %d", p.out.duplicates, u.out.duplicates, p.out.deadLetters, u.out.deadLetters)
	rp.line("   batches decided (all workers, the killed one until its last scrape): paced %.0f of %.1f records on average, unpaced %.0f of %.1f",
		p.metrics["capper_batch_size_count"], p.metrics["capper_batch_size_sum"]/p.metrics["capper_batch_size_count"],
		u.metrics["capper_batch_size_count"], u.metrics["capper_batch_size_sum"]/u.metrics["capper_batch_size_count"])
	// Printed, not logged: a benchmark's log is cut to its first lines.
	fmt.Print(rp.w.String())

	b.ReportMetric(most, "x-of-rate-goal")
	b.ReportMetric(mean, "x-of-mean-rate-goal")
	b.ReportMetric(quantile(p.out.txnLatency, .99).Seconds(), "txn-p99-s")
	b.ReportMetric(float64(overtakes), "overtake-violations")
	b.ReportMetric(float64(stopViolations), "stop-violations")
	b.ReportMetric(perRelease, "lease-calls/intent")
	b.ReportMetric(cpuDelta, "cpu-us/intent-over-unpaced")
	b.ReportMetric(allocDelta, "alloc-B/intent-over-unpaced")
}

func (rp *pacingReport) header() {
	sc, p := rp.sc, rp.p
	rp.line("send pacing: %d workers, %d partitions, %s; budget %v/s burst %d (lanes high >= 75, normal)",
		sc.workers, sc.partitions, map[bool]string{true: "one redis-server", false: fmt.Sprintf("a %d-master Redis Cluster", sc.masters)}[sc.masters == 1], sc.rate, sc.burst)
	restart := "not restarted"
	if !p.restarted.IsZero() {
		restart = fmt.Sprintf("restarted, ready at %s", rp.rel(p.restarted))
	}
	rp.line("workload: blast %d (p50) at t=0 (written in %.1fs), campaign %d (p75) at t=%s, transactional %v/s (exempt) until %s: %d; worker killed (SIGKILL) at %s, %s; blast stopped (ack) at %s; drained at %s",
		sc.blast, p.blastIn.Seconds(), sc.campaign, sc.campaignAt, sc.txnRate, rp.rel(p.txnStopped), len(p.out.txnIn), rp.rel(p.killed), restart, rp.rel(p.stopAck), rp.rel(p.drained))
}

// rate prints figures 1 and 2 and returns their ratios to their goals.
func (rp *pacingReport) rate() (most, mean float64) {
	sc, o := rp.sc, &rp.p.out
	limit := goalMostPerSecond*sc.rate + float64(sc.burst)
	n := mostInOneSecond(sortedInts(o.laneRel))
	all := mostInOneSecond(sortedInts(o.laneRel, o.exemptDec))
	rp.line("1. most released in any 1 s (capper-released-at of %d lane deliveries): %d = %.3f x rate; goal <= %.0f (1.01 x rate + burst): %s",
		len(o.laneRel), n, float64(n)/sc.rate, limit, paceRatio(float64(n), limit))
	rp.line("   with the %d exempt sends (capper-decided-at) added: %d = %.3f x rate: %s of the same goal",
		len(o.exemptDec), all, float64(all)/sc.rate, paceRatio(float64(all), limit))

	// While anything waits: from the first release to the last.
	laneSorted := sortedInts(o.laneRel)
	var first int64
	if len(laneSorted) > 0 {
		first = laneSorted[0]
	}
	span := float64(o.lastTokenRel-first) / 1000
	exemptIn := 0
	for _, t := range o.exemptDec {
		if t >= first && t <= o.lastTokenRel {
			exemptIn++
		}
	}
	rate := float64(len(o.laneRel)) / span
	withExempt := float64(len(o.laneRel)+exemptIn) / span
	gap, gapAt := int64(0), first
	for i := 1; i < len(laneSorted); i++ {
		if d := laneSorted[i] - laneSorted[i-1]; d > gap {
			gap, gapAt = d, laneSorted[i-1]
		}
	}
	rp.line("2. mean release rate from the first release (%s) to the last (%s; after it only the stopped blast's cancellations, lanes empty at %s): %.0f/s = %.3f x rate; goal >= %.2f: %s",
		rp.rel(paceAt(first)), rp.rel(paceAt(o.lastTokenRel)), rp.rel(paceAt(o.lastLaneRec)), rate, rate/sc.rate, goalMeanRate, paceRatio(rate/sc.rate, goalMeanRate))
	rp.line("   with the exempt sends of that span (they take the budget's tokens first): %.0f/s = %.3f x rate: %s; longest pause between two releases %.2fs, from %s",
		withExempt, withExempt/sc.rate, paceRatio(withExempt/sc.rate, goalMeanRate), float64(gap)/1000, rp.rel(paceAt(gapAt)))
	return float64(n) / limit, rate / sc.rate / goalMeanRate
}

// latency prints figure 3, for both runs.
func (rp *pacingReport) latency() {
	name := map[bool]string{true: "paced  ", false: "unpaced"}
	for _, r := range []*pacingRun{rp.p, rp.u} {
		lat := r.out.txnLatency
		prov := providerLatency(&r.out, rp.sc.rate)
		rp.line("3. transactional, %s: input to delivery record p50 %s, p99 %s, max %s; with the provider taking deliveries in order at %v/s: p50 %s, p99 %s, max %s (goal p99 <= 1s: %s delivered, %s provider)",
			name[r.paced], quantile(lat, .5).Round(time.Millisecond), quantile(lat, .99).Round(time.Millisecond), quantile(lat, 1).Round(time.Millisecond), rp.sc.rate,
			quantile(prov, .5).Round(time.Millisecond), quantile(prov, .99).Round(time.Millisecond), quantile(prov, 1).Round(time.Millisecond),
			paceRatio(quantile(lat, .99).Seconds(), goalTxnP99.Seconds()), paceRatio(quantile(prov, .99).Seconds(), goalTxnP99.Seconds()))
	}
	for _, r := range []*pacingRun{rp.p, rp.u} {
		var kept []time.Duration
		until := r.killed.Add(10 * time.Second)
		if r.restarted.After(r.killed) {
			until = r.restarted.Add(10 * time.Second)
		}
		for i, in := range r.out.txnLatencyIn {
			if in.Before(r.killed.Add(-time.Second)) || in.After(until) {
				kept = append(kept, r.out.txnLatency[i])
			}
		}
		rp.line("   %s, leaving out the pushes written from 1 s before the kill to 10 s after it (or the restart): p50 %s, p99 %s (%d of %d)",
			name[r.paced], quantile(kept, .5).Round(time.Millisecond), quantile(kept, .99).Round(time.Millisecond), len(kept), len(r.out.txnLatency))
	}
}

// lanes prints figure 4 and returns its (release, p75) pairs.
func (rp *pacingReport) lanes() int {
	o, killed := &rp.p.out, rp.p.killed.UnixMilli()
	var before, after []int64
	for _, r := range o.normalRel {
		if r < killed {
			before = append(before, r)
		} else {
			after = append(after, r)
		}
	}
	throughKill := func(h heldSpan) bool { return h.held <= killed && h.rel > killed }
	pairs, releases := overtaken(o.normalRel, o.high, nil)
	pairsB, releasesB := overtaken(before, o.high, nil)
	pairsA, releasesA := overtaken(after, o.high, nil)
	pairsK, releasesK := overtaken(after, o.high, throughKill)
	longest, through := int64(0), 0
	for _, h := range o.high {
		longest = max(longest, h.rel-h.held)
		if throughKill(h) {
			through++
		}
	}
	rp.line("4. p50 released while a p75 had waited > 100 ms: %d (p50 release, p75) pairs over %d p50 releases; goal 0 (%d p75 delivered of %d, longest wait %s)",
		pairs, releases, o.urgentDel, rp.sc.campaign, time.Duration(longest)*time.Millisecond)
	rp.line("   p50 releases before the kill: %d pairs over %d releases; after it: %d over %d, and without the %d p75 intents held before the kill and released after it: %d over %d",
		pairsB, releasesB, pairsA, releasesA, through, pairsK, releasesK)
	return pairs
}

// stop prints figure 5 and returns its violations.
func (rp *pacingReport) stop() int {
	p, o := rp.p, &rp.p.out
	grace := p.stopAck.Add(goalStopGrace).UnixMilli()
	late, lastBlast := 0, int64(0)
	for _, r := range o.blastRel {
		if r > grace {
			late++
		}
		lastBlast = max(lastBlast, r)
	}
	delivered, cancelled, neither := 0, 0, 0
	for i := range rp.sc.blast {
		switch {
		case o.blastDel[i]:
			delivered++
		case o.blastCanc[i]:
			cancelled++
		default:
			neither++
		}
	}
	rp.line("5. blast: %d delivered, %d cancelled; released after the stop's ack + 2 s: %d (goal 0; last blast release %+.3fs from the ack); neither delivered nor cancelled: %d (goal 0; %d other outcomes); lanes empty %.2fs after the ack",
		delivered, cancelled, late, paceAt(lastBlast).Sub(p.stopAck).Seconds(), neither, o.blastOther, paceAt(o.lastLaneRec).Sub(p.stopAck).Seconds())
	rp.line("   Redis (engine inspect): %d of %d sampled cancelled blast users counted (goal 0); control: %d of %d delivered blast users counted (want all)",
		p.redis.cancelledCounted, p.redis.cancelled, p.redis.deliveredCounted, p.redis.delivered)
	return late + neither + p.redis.cancelledCounted
}

// cost prints figure 6 and returns the lease calls per released intent
// and the worker CPU (us) and bytes allocated per intent over the unpaced
// run's.
func (rp *pacingReport) cost() (perRelease, cpuDelta, allocDelta float64) {
	p, u, m := rp.p, rp.u, rp.p.metrics
	calls := m["capper_pacing_lease_calls_total"]
	perRelease = calls / m["capper_pacing_released_total"]
	rp.line("6. lease calls %.0f (granted %.0f, waited %.0f, error %.0f) for %.0f released intents (%.0f held, %.0f tokens granted, %.0f unused): %.4f calls per released intent, goal <= %.2f: %s; per held intent %.4f",
		calls, m[`capper_pacing_lease_calls_total{budget="push",result="granted"}`], m[`capper_pacing_lease_calls_total{budget="push",result="waited"}`],
		m[`capper_pacing_lease_calls_total{budget="push",result="error"}`], m["capper_pacing_released_total"], m["capper_pacing_held_total"], m["capper_pacing_tokens_granted_total"],
		m["capper_pacing_tokens_unused_total"], perRelease, goalLeaseCalls, paceRatio(perRelease, goalLeaseCalls), calls/m["capper_pacing_held_total"])
	cpuP, cpuU := p.cpu/float64(p.intents)*1e6, u.cpu/float64(u.intents)*1e6
	rp.line("   worker CPU per intent (process_cpu_seconds_total, all workers, t=0 to drained): paced %.2f us (%.1f s over %d intents, %.0fs), unpaced %.2f us (%.1f s over %d, %.0fs); difference %+.2f us, goal within %.0f us: %s; idle workers burn %.3f / %.3f CPU-s/s",
		cpuP, p.cpu, p.intents, p.drained.Sub(p.t0).Seconds(), cpuU, u.cpu, u.intents, u.drained.Sub(u.t0).Seconds(), cpuP-cpuU, goalCPUDelta,
		paceRatio(math.Abs(cpuP-cpuU), goalCPUDelta), p.cpuIdle, u.cpuIdle)
	preP := (p.cpuPhase[0] + p.cpuPhase[1] + p.cpuPhase[2]) / float64(p.intents) * 1e6
	preU := (u.cpuPhase[0] + u.cpuPhase[1] + u.cpuPhase[2]) / float64(u.intents) * 1e6
	rp.line("   t=0 to the stop only, over the same intents: paced %.2f us, unpaced %.2f us; difference %+.2f us: %s",
		preP, preU, preP-preU, paceRatio(math.Abs(preP-preU), goalCPUDelta))
	allocP, allocU := p.alloc/float64(p.intents), u.alloc/float64(u.intents)
	rp.line("   bytes the workers allocated per intent (go_memstats_alloc_bytes_total, t=0 to drained): paced %.0f, unpaced %.0f; difference %+.0f",
		allocP, allocU, allocP-allocU)
	rp.line("   worker CPU-s by phase, paced / unpaced: to the campaign %.1f / %.1f, to the kill %.1f / %.1f, to the stop %.1f / %.1f, to the end %.1f / %.1f",
		p.cpuPhase[0], u.cpuPhase[0], p.cpuPhase[1], u.cpuPhase[1], p.cpuPhase[2], u.cpuPhase[2], p.cpuPhase[3], u.cpuPhase[3])
	return perRelease, cpuP - cpuU, allocP - allocU
}
