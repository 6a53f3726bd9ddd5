package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/policy"
	"github.com/capper-dev/capper/internal/testenv"
)

// The soak's settings, from the environment (make soak sets them):
// CAPPER_SOAK_SEED (default 8, what make test runs: a cluster with
// replicas, a master killed, a replica paused, a failover) and
// CAPPER_SOAK_DURATION (seconds of traffic, default 30).
func settings(t *testing.T) (seed uint64, traffic time.Duration) {
	t.Helper()
	seed, traffic = 8, 30*time.Second
	if v := os.Getenv("CAPPER_SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("CAPPER_SOAK_SEED=%q: %v", v, err)
		}
		seed = n
	}
	if v := os.Getenv("CAPPER_SOAK_DURATION"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 10 {
			t.Fatalf("CAPPER_SOAK_DURATION=%q: want whole seconds, at least 10", v)
		}
		traffic = time.Duration(n) * time.Second
	}
	return seed, traffic
}

// users is how many users the workload sends to (ids 1..users-1): the
// skewed traffic mostly to the lower half, fresh users in the upper one.
const users = 1000

// workers is how many `capper run` processes share the input.
const workers = 3

// TestMain: the soak's processes (workers, redis-servers) die with it,
// however it ends; go test killed with SIGKILL takes the test binary along.
func TestMain(m *testing.M) {
	testenv.ExitWithParent()
	testenv.GuardMemory(6 << 30)
	os.Exit(m.Run())
}

// persists chooses, by seed, how a cluster keeps what it acknowledged:
// masters with an append-only file, or none and a killed master restarted
// only after its replica took over. Its own draw, so that the schedules
// the seeds drew before stay the same.
func persists(seed uint64) bool { return rand.New(rand.NewPCG(seed, 0xa0f)).IntN(2) == 0 }

// TestSoak runs the fault soak (see the package comment).
func TestSoak(t *testing.T) {
	seed, traffic := settings(t)
	rng := rand.New(rand.NewPCG(seed, 0xfa17))
	cluster := rng.IntN(2) == 0
	faults := schedule(rng, cluster, traffic)
	t.Logf("soak: seed %d, %s of traffic, %d workers; replay with: make soak SEED=%d DURATION=%d", seed, traffic, workers, seed, int(traffic.Seconds()))
	dir := t.TempDir()
	logs := logDir(t)
	tp := startRedis(t, cluster, persists(seed))
	t.Logf("soak: redis: %s", tp.name())
	var sched []string
	for _, f := range faults {
		sched = append(sched, "  "+f.String())
	}
	t.Logf("soak: fault schedule (from the start of traffic):\n%s", strings.Join(sched, "\n"))

	b := startBroker(t)
	bin := buildBinary(t)
	publishSegments(t, dir, users, seed)
	start := time.Now()
	p := publishPlan(t, dir, users, start.Add(3*time.Second), start.Add(traffic*2/3))
	// Quiet hours (v1, dormant users in UTC) from this minute to the next
	// (or the one after, when this one is nearly over): some traffic falls
	// in them, and they end within the run.
	now := start.UTC()
	from := now.Truncate(time.Minute)
	to := from.Add(time.Minute)
	if to.Sub(now) < 20*time.Second {
		to = to.Add(time.Minute)
	}
	ownLimits := hasUsers(bin)
	if !ownLimits {
		t.Logf("soak: %s has no users' own limits: the policies have no user_limits, no records are written, and their check is skipped", bin)
	}
	v1, v2 := policies(from.Format("15:04"), to.Format("15:04"), true, true, ownLimits)
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, v1, 0o644); err != nil {
		t.Fatal(err)
	}
	// A build without throttle feedback refuses min_rate; one without
	// send pacing, budgets.
	paced, throttles := true, hasPacing(bin, policyFile)
	if !throttles {
		v1, v2 = policies(from.Format("15:04"), to.Format("15:04"), true, false, ownLimits)
		if err := os.WriteFile(policyFile, v1, 0o644); err != nil {
			t.Fatal(err)
		}
		paced = hasPacing(bin, policyFile)
		t.Logf("soak: %s has no throttle feedback: no throttled statuses", bin)
	}
	if !paced {
		v1, v2 = policies(from.Format("15:04"), to.Format("15:04"), false, false, ownLimits)
		t.Logf("soak: %s has no send pacing: the policies have no budget, and its checks are skipped", bin)
	}
	versions := map[string]capping.Rules{}
	for _, data := range [][]byte{v1, v2} {
		v := policy.ContentHash(data)
		l, err := policy.Load(data, v)
		if err != nil {
			t.Fatalf("soak policy: %v", err)
		}
		versions[v] = l.Rules
	}
	if err := os.WriteFile(policyFile, v1, 0o644); err != nil {
		t.Fatal(err)
	}

	cfg := workerConfig(t, b, tp, dir)
	if !paced {
		cfg.Kafka.Topics.Lanes = ""
	}
	// Compact lane records for odd seeds (an older build, CAPPER_SOAK_BIN,
	// writes its one form).
	if paced && seed%2 == 1 && os.Getenv("CAPPER_SOAK_BIN") == "" {
		cfg.Kafka.LaneRecords = "compact"
	}
	t.Logf("soak: lane records in %s", cfg.Kafka.LaneRecords)
	if !ownLimits {
		cfg.Kafka.Topics.UserLimits = ""
	}
	noControl := !hasControl(bin)
	if noControl {
		cfg.Kafka.Topics.Control = ""
		t.Logf("soak: %s has no campaign control: its faults are skipped", bin)
	}
	// Static members (each worker's name its kafka.group_instance_id, as
	// the chart's pods) for two seeds in three; the binary of an older
	// build (CAPPER_SOAK_BIN) knows neither that nor capper group leave.
	groups := hasGroups(bin)
	static := groups && seed%3 != 0
	t.Logf("soak: workers are %s members of their groups", map[bool]string{true: "static", false: "dynamic"}[static])
	newWorker := func(name string) *worker {
		w := &worker{name: name, config: filepath.Join(dir, name+".yaml"), http: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))}
		c := *cfg
		if static {
			c.Kafka.GroupInstanceID = name
		}
		writeConfig(t, &c, w.http, w.config, !groups)
		return w
	}
	var ws []*worker
	workersStart := time.Now()
	for i := range workers {
		w := newWorker(fmt.Sprintf("w%d", i+1))
		w.start(t, bin, logs)
		ws = append(ws, w)
	}
	t.Cleanup(func() {
		for _, w := range ws {
			w.signal(syscall.SIGKILL, 5*time.Second)
		}
	})
	waitReady(t, ws)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out outage
	var ready readiness
	go watchReadiness(ctx, ws, &out, &ready)
	ch := &chaos{t: t, bin: bin, dir: logs, workers: ws, tp: tp, broker: b, outage: &out, policy: policyFile, versions: [2][]byte{v1, v2},
		noControl: noControl, static: static}
	if groups {
		ch.scale = func(name string) *worker {
			w := newWorker(name)
			w.start(t, bin, logs)
			t.Cleanup(func() { w.signal(syscall.SIGKILL, 5*time.Second) })
			waitReady(t, []*worker{w})
			return w
		}
	}

	// Traffic, and the faults beside it.
	g := newWorkload(seed, users, p)
	if throttles {
		g.throttles = rand.New(rand.NewPCG(seed, 0x7407))
	}
	prod := newProducer(b.addr)
	defer prod.w.Close()
	ch.prod = prod
	// The sender hands a share of the paced deliveries back (throttled),
	// while the traffic runs.
	var hand *hander
	handCtx, stopHand := context.WithCancel(ctx)
	defer stopHand()
	var handDone sync.WaitGroup
	if throttles && hasHandBack(bin) {
		hand = &hander{rng: rand.New(rand.NewPCG(seed, 0x4a4d)), prod: prod, until: time.Now().Add(traffic + time.Minute)}
		handDone.Go(func() {
			if err := hand.run(handCtx, b.addr); err != nil {
				t.Errorf("soak: follow the deliveries to hand some back: %v", err)
			}
		})
	} else if throttles {
		t.Logf("soak: %s takes no throttled send back: none is handed back", bin)
	}
	uw := &userWriter{addr: b.addr, group: cfg.Kafka.UserLimitsGroup()}
	var steps []userStep
	if ownLimits {
		steps = userPlan(seed, traffic)
	}
	t0 := time.Now()
	t.Logf("soak: traffic starts at %s (the faults' times are from it)", t0.UTC().Format(timeLayout))
	var wg sync.WaitGroup
	if ownLimits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uw.run(ctx, t0, steps)
		}()
		go uw.follow(ctx)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, f := range faults {
			sleep(ctx, time.Until(t0.Add(f.at)))
			ch.apply(ctx, f)
		}
	}()
	for time.Since(t0) < traffic {
		intents, statuses := g.tick(time.Now())
		if err := prod.write(ctx, tIn, intents); err != nil {
			t.Fatal(err)
		}
		if err := prod.write(ctx, tStatus, statuses); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	for _, w := range ws {
		w.start(t, bin, logs) // any worker a fault left down
	}
	t.Logf("soak: %d intents produced (%d bad, %d retries of an earlier id among them, %d paced by budget %s), %d delivery statuses (%d throttled); faults done:\n  %s",
		g.intents, g.bad, g.intents-g.n, g.paced, paceBudget, g.statuses, g.throttled, strings.Join(ch.log, "\n  "))
	if ownLimits {
		var lines []string
		for _, w := range uw.writes() {
			lines = append(lines, fmt.Sprintf("user %d: %s", w.user, w))
		}
		t.Logf("soak: %d of %d user-limits records written:\n  %s", len(lines), len(steps), strings.Join(lines, "\n  "))
	}

	// Drain: deferred intents come back within max_defer (1m) and quiet
	// hours end within two minutes of the start; the budget releases what
	// its lanes hold at its rate, which the traffic outran (the time its
	// releases need past the traffic's end is added).
	var o outputs
	deadline := time.Now().Add(3 * time.Minute)
	drainRate := float64(paceRate)
	if throttles {
		drainRate = paceMinRate // throttled statuses may hold it there
	}
	if behind := time.Duration(float64(g.paced)/drainRate*float64(time.Second)) - traffic; paced && behind > 0 {
		deadline = deadline.Add(behind)
	}
	for {
		var err error
		if o, err = readAll(ctx, b.addr); err != nil {
			t.Logf("read the topics: %v", err)
		} else if len(o.missing()) == 0 && (hand == nil || time.Now().After(hand.until)) {
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	stopHand()
	handDone.Wait()
	if hand != nil {
		// (Statuses written after the last read are not checked.)
		t.Logf("soak: the sender handed %d throttled sends back", hand.handedBack())
	}
	if miss := o.missing(); len(miss) > 0 {
		stuck(ctx, t, b.addr, miss, ws, logs)
	}
	var shown map[uint64]userShown
	var deferred []kafka.Message
	if ownLimits {
		var us []uint64
		for _, s := range steps {
			if !slices.Contains(us, s.user) {
				us = append(us, s.user)
			}
		}
		shown = showUsers(bin, ws[0].config, us)
		for _, topic := range []string{tTier1, tTier2} {
			msgs, err := audit.ReadTopic(ctx, []string{b.addr}, topic)
			if err != nil {
				t.Logf("soak: read %s: %v", topic, err)
			}
			deferred = append(deferred, msgs...)
		}
	}
	cancel()
	rep := check(o, versions, g.refunded, p, ch.held)
	if ownLimits {
		// The applier may lag while its group forms (the workers' start,
		// until shortly after the traffic starts), and in every fault and
		// the recovery after it; a decision's script may run late in a
		// Redis outage and while it recovers.
		lagging := []downWindow{{workersStart, t0.Add(5 * time.Second)}}
		var stalls []downWindow
		for _, w := range slices.Concat(ch.outage.spans(), ch.brokerDown, ch.workerDown) {
			lagging = append(lagging, downWindow{w.from, w.to.Add(userFaultGlow)})
		}
		for _, w := range ch.outage.spans() {
			stalls = append(stalls, downWindow{w.from, w.to.Add(userFaultGlow)})
		}
		checkUserLimits(rep, o, versions, g.refunded, uw.writes(), shown, deferred, lagging, stalls)
	}
	if paced {
		checkPacing(rep, o, budget{name: paceBudget, rate: paceRate, burst: paceBurst}, ch.brokerDown, ch.outage.spans())
	}
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	if recs, err := readRecords(rctx, tp, cfg.Capping.KeyPrefix); err != nil {
		rep.add("counted", "read the users' records from Redis: %v", err)
	} else {
		checkCounted(rep, o, recs)
	}
	rcancel()
	ready.mu.Lock()
	for _, v := range ready.violations {
		rep.add("readiness", "%s", v)
	}
	rep.counts["readiness samples in outages"] = ready.samples
	rep.counts["... not ready"] = ready.notReady
	rep.counts["... with a Redis error counted since last seen not ready"] = ready.withErrors
	ready.mu.Unlock()
	var counts []string
	for k, v := range rep.counts {
		counts = append(counts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(counts)
	t.Logf("soak: %s", strings.Join(counts, ", "))
	var checks []string
	for c := range rep.problems {
		checks = append(checks, c)
	}
	slices.Sort(checks)
	for _, c := range checks {
		ps := rep.problems[c]
		for i, p := range ps {
			if i == 15 {
				t.Errorf("%s: ... %d more", c, len(ps)-15)
				break
			}
			t.Errorf("%s: %s", c, p)
		}
	}
	if rep.problems["readiness"] != nil {
		t.Logf("soak: the workers' logs:\n%s", redisLines(logs))
	}
	if len(checks) > 0 && os.Getenv("CAPPER_SOAK_LOGS") != "" {
		dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := dump(dctx, b.addr, logs, []string{group, cfg.Kafka.DelayGroup()}); err != nil {
			t.Logf("soak: keep the records: %v", err)
		} else {
			t.Logf("soak: every record in %s, the groups' offsets in %s", filepath.Join(logs, "topics.jsonl"), filepath.Join(logs, "offsets.txt"))
		}
		dcancel()
	}
	if len(checks) > 0 {
		t.Errorf("soak seed %d failed (%s); replay: make soak SEED=%d DURATION=%d (CAPPER_SOAK_LOGS=DIR keeps the worker logs)",
			seed, strings.Join(checks, ", "), seed, int(traffic.Seconds()))
	}
}

// stuck logs, when inputs are still without an outcome at the end of the
// drain, where they are (per partition: how many, from which offset; those
// held in a lane, per lane partition) and what each worker says of itself
// (/readyz, its consumer lag, its lanes' waiting and releases), so that a
// partition no worker decides shows as one; with CAPPER_SOAK_LOGS set,
// every worker's goroutines go to DIR/<worker>-goroutines.txt.
func stuck(ctx context.Context, t *testing.T, addr string, missing []string, ws []*worker, dir string) {
	t.Helper()
	type part struct {
		n     int
		first int64
	}
	parts := map[string]*part{}
	for _, src := range missing {
		i := strings.LastIndexByte(src, '/')
		off, _ := strconv.ParseInt(src[i+1:], 10, 64)
		pp := parts[src[:i]]
		if pp == nil {
			pp = &part{first: off}
			parts[src[:i]] = pp
		}
		pp.n++
		pp.first = min(pp.first, off)
	}
	var lines []string
	for k, pp := range parts {
		lines = append(lines, fmt.Sprintf("%s: %d, from offset %d", k, pp.n, pp.first))
	}
	sort.Strings(lines)
	t.Logf("soak: %d inputs without an outcome at the end of the drain:\n  %s", len(missing), strings.Join(lines, "\n  "))
	if held := inLanes(ctx, addr, missing); len(held) > 0 {
		t.Logf("soak: of them, held in a lane:\n  %s", strings.Join(held, "\n  "))
	}
	for _, w := range ws {
		code, ready, err := w.get("/readyz")
		_, metrics, _ := w.get("/metrics")
		var lag []string
		for _, l := range strings.Split(metrics, "\n") {
			for _, m := range []string{"capper_kafka_consumer_lag{", "capper_pacing_waiting{", "capper_pacing_released_total{", "capper_pacing_lease_calls_total{"} {
				if strings.HasPrefix(l, m) {
					lag = append(lag, l)
				}
			}
		}
		t.Logf("soak: worker %s: /readyz %d %q (%v); %s", w.name, code, strings.TrimSpace(ready), err, strings.Join(lag, "; "))
		if os.Getenv("CAPPER_SOAK_LOGS") != "" {
			if _, stacks, err := w.get("/debug/pprof/goroutine?debug=2"); err == nil {
				_ = os.WriteFile(filepath.Join(dir, w.name+"-goroutines.txt"), []byte(stacks), 0o644)
			}
		}
	}
}

// inLanes lists, per lane partition, how many of the missing inputs its
// topic holds (by their capper-source) and the offset of the first.
func inLanes(ctx context.Context, addr string, missing []string) []string {
	miss := map[string]bool{}
	for _, m := range missing {
		miss[m] = true
	}
	var out []string
	for _, topic := range laneTopics() {
		msgs, err := audit.ReadTopic(ctx, []string{addr}, topic)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", topic, err))
			continue
		}
		type part struct{ n, total, first int }
		parts := map[int]*part{}
		for _, m := range msgs {
			pp := parts[m.Partition]
			if pp == nil {
				pp = &part{first: -1}
				parts[m.Partition] = pp
			}
			pp.total++
			if miss[header(m, hSource)] {
				pp.n++
				if pp.first < 0 {
					pp.first = int(m.Offset)
				}
			}
		}
		for id, pp := range parts {
			if pp.n > 0 {
				out = append(out, fmt.Sprintf("%s/%d: %d of its %d records, from offset %d", topic, id, pp.n, pp.total, pp.first))
			}
		}
	}
	sort.Strings(out)
	return out
}

// waitReady waits until every worker answers /readyz 200 (a minute at
// most).
func waitReady(t *testing.T, ws []*worker) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for _, w := range ws {
		for {
			if code, _, _ := w.get("/readyz"); code == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("worker %s did not become ready in a minute", w.name)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
