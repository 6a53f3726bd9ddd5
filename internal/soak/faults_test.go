package soak

// The faults: a schedule the seed chooses, printed at the start, and what
// each one does. A Redis fault that leaves some intents undecidable is an
// outage: from its start until just before the soak repairs it, every
// worker that has counted a Redis error must answer /readyz 503.

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/clip"
	"github.com/capper-dev/capper/internal/testenv"
)

// fault is one scheduled fault: what, when (from the start of traffic),
// for how long, and on what (a worker's or a node's index, picked then).
type fault struct {
	kind   string
	at     time.Duration
	length time.Duration
	target int
}

func (f fault) String() string {
	return fmt.Sprintf("%6.1fs  %-16s for %.1fs (target %d)", f.at.Seconds(), f.kind, f.length.Seconds(), f.target)
}

// Kinds of faults, by topology; outages are those Redis cannot decide in.
var (
	singleFaults  = []string{"redis-shutdown", "redis-kill", "redis-pause", "script-flush", "worker-kill", "worker-term", "worker-scale", "policy-swap", "broker-restart", "campaign-stop", "campaign-pause"}
	clusterFaults = []string{"master-kill", "replica-pause", "manual-failover", "slot-migration", "script-flush", "worker-kill", "worker-term", "worker-scale", "policy-swap", "broker-restart", "campaign-stop", "campaign-pause"}
	outages       = map[string]bool{"redis-shutdown": true, "redis-kill": true, "redis-pause": true, "master-kill": true, "replica-pause": true}
)

// The control faults beside a stop or pause: a foreign record under a
// stopped campaign's key, then a compaction of the control topic and a
// worker restarted on what it left; a stop written while Redis stalls in
// the middle of a blast of that campaign.
var controlFaults = []string{"control-compaction", "stop-in-stall"}

// schedule draws the faults of a run: about one every 7 seconds of
// traffic, the first and every other one a Redis outage (4-9 s: long
// enough for a worker's first failed attempts to end, as a restart's
// would), a policy swap second, a campaign stopped (or paused) fourth,
// and the two control faults (in an order the seed draws) sixth and
// eighth, when the traffic is long enough for them (50 s); a worker
// killed or stopped and restarted tenth, and a worker added and removed
// twelfth (80 s).
func schedule(rng *rand.Rand, cluster bool, traffic time.Duration) []fault {
	kinds := singleFaults
	if cluster {
		kinds = clusterFaults
	}
	var outageKinds []string
	for _, k := range kinds {
		if outages[k] {
			outageKinds = append(outageKinds, k)
		}
	}
	n := max(4, int(traffic/(7*time.Second)))
	slot := (traffic - 4*time.Second) / time.Duration(n)
	var out []fault
	first := 0 // the control fault drawn sixth
	for i := range n {
		kind := kinds[rng.IntN(len(kinds))]
		switch {
		case i%2 == 0:
			kind = outageKinds[rng.IntN(len(outageKinds))]
		case i == 1:
			kind = "policy-swap"
		case i == 3:
			kind = []string{"campaign-stop", "campaign-pause"}[rng.IntN(2)]
		case i == 5:
			first = rng.IntN(2)
			kind = controlFaults[first]
		case i == 7:
			kind = controlFaults[1-first]
		case i == 9:
			kind = []string{"worker-kill", "worker-term"}[rng.IntN(2)]
		case i == 11:
			kind = "worker-scale"
		}
		f := fault{kind: kind, at: 2*time.Second + time.Duration(i)*slot + time.Duration(rng.Int64N(int64(slot/4))),
			length: time.Duration(1500+rng.IntN(2500)) * time.Millisecond, target: rng.IntN(1 << 16)}
		if outages[kind] || kind == "stop-in-stall" { // a stall long enough for the batch's attempt to time out
			f.length = time.Duration(4000+rng.IntN(5000)) * time.Millisecond
		}
		out = append(out, f)
	}
	return out
}

// outage is the state the readiness watcher checks against.
type outage struct {
	mu     sync.Mutex
	active bool
	kind   string
	id     int
	// base: each worker process's Redis error count when the outage began
	// (or when the watcher first saw the process in it), then when it was
	// last seen not ready: an error turns /readyz 503 first, and the 503
	// lasts until the master that failed answers (which may be another
	// master than the outage's, recovering from the fault before).
	base map[string]float64
	// master: the outage's master, which cannot answer until it ends (a
	// paused replica's); named: the processes whose /readyz named it (a
	// WAIT on it failed): they stay not ready to the end.
	master string
	named  map[string]bool
	// windows: every outage, from its start to its end (before the
	// repair), on this machine's clock.
	windows []downWindow
}

func (o *outage) begin(kind, master string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.active, o.kind, o.id, o.base = true, kind, o.id+1, map[string]float64{}
	o.master, o.named = master, map[string]bool{}
	o.windows = append(o.windows, downWindow{from: time.Now()})
}

// end marks the outage over; call it before repairing, so that a worker
// that recovers is never judged inside it.
func (o *outage) end() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.active = false
	if n := len(o.windows); n > 0 {
		o.windows[n-1].to = time.Now()
	}
}

// spans are the outages' windows.
func (o *outage) spans() []downWindow {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.windows)
}

// readiness is what the watcher found: samples taken in outages, how many
// answered 503, and the violations (a Redis error counted, yet ready).
type readiness struct {
	mu                 sync.Mutex
	samples, notReady  int
	violations         []string
	withErrors, in503s int
}

// watchReadiness polls every live worker's /metrics and /readyz while an
// outage is active, until ctx ends.
func watchReadiness(ctx context.Context, workers []*worker, o *outage, r *readiness) {
	for ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		o.mu.Lock()
		active, id := o.active, o.id
		o.mu.Unlock()
		if !active {
			continue
		}
		for _, w := range workers {
			cmd := w.running()
			if cmd == nil {
				continue
			}
			proc := fmt.Sprintf("%s/%d", w.name, cmd.Process.Pid)
			errs, err := redisErrors(w)
			if err != nil {
				continue // not up yet, or going down
			}
			code, body, err := w.get("/readyz")
			if err != nil {
				continue
			}
			o.mu.Lock()
			still := o.active && o.id == id
			base, seen := o.base[proc]
			if still && (!seen || code == 503) {
				o.base[proc] = errs
			}
			if !seen {
				base = errs
			}
			named := o.named[proc]
			if still && code == 503 && o.master != "" && strings.Contains(body, "WAIT on "+o.master+" ") {
				o.named[proc] = true
			}
			master := o.master
			o.mu.Unlock()
			if !still {
				break
			}
			r.judge(proc, o.kind, master, code, body, errs-base, named)
		}
	}
}

// judge takes one sample of a worker in an outage: errs Redis errors
// counted since it was last seen not ready (or the outage began), named
// whether it said since the outage began that a WAIT on the outage's
// master failed.
func (r *readiness) judge(proc, kind, master string, code int, body string, errs float64, named bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples++
	if code == 503 {
		r.notReady++
	}
	if errs > 0 {
		r.withErrors++
		if code == 503 {
			r.in503s++
		}
	}
	if code == 503 || len(r.violations) >= 20 {
		return
	}
	switch {
	case named:
		r.violations = append(r.violations, fmt.Sprintf("%s during %s: a WAIT on %s failed (its /readyz said so), yet /readyz = %d %q before the outage ended",
			proc, kind, master, code, strings.TrimSpace(body)))
	case errs > 0:
		r.violations = append(r.violations, fmt.Sprintf("%s during %s: %v Redis errors counted since it was last seen not ready (or the outage began), yet /readyz = %d %q",
			proc, kind, errs, code, strings.TrimSpace(body)))
	}
}

// redisErrors is capper_redis_errors_total summed over its kinds.
func redisErrors(w *worker) (float64, error) {
	code, body, err := w.get("/metrics")
	if err != nil || code != 200 {
		return 0, fmt.Errorf("metrics: %d %v", code, err)
	}
	sum := 0.0
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "capper_redis_errors_total{") {
			continue
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// chaos applies faults.
type chaos struct {
	t        *testing.T
	bin, dir string
	workers  []*worker
	tp       *topology
	broker   *broker
	outage   *outage
	policy   string    // the policy file
	versions [2][]byte // v1, v2
	current  int
	log      []string // what was done, for the report
	// held: while a campaign was stopped or paused, from when every
	// running worker had applied it to when its resume was written: no
	// delivery of it may be decided in between.
	held []heldWindow
	// noControl: the binary has no campaign control (CAPPER_SOAK_BIN of
	// an older build); its faults are skipped.
	noControl bool
	// scale starts a worker more (a scale-out, worker-scale), on the
	// workers' config; nil: the binary cannot leave a group on a worker's
	// behalf (an older build), and the fault is skipped. static: the
	// workers are static members (kafka.group_instance_id).
	scale  func(name string) *worker
	static bool
	scales int       // workers added so far
	prod   *producer // the workload's, for a blast
	// brokerDown: when the broker was down (a broker-restart), from its
	// stop to its start: no write could reach a topic in between.
	brokerDown []downWindow
	// workerDown: when a worker was stopped (killed, or stopped and
	// restarted by a fault), from the signal to its restart.
	workerDown []downWindow
}

// downWindow is a span a server was down, on this machine's clock.
type downWindow struct{ from, to time.Time }

// heldWindow is a campaign stopped or paused, on the workers' clock.
type heldWindow struct {
	campaign, state string
	from, to        time.Time
}

func (c *chaos) note(format string, args ...any) {
	c.log = append(c.log, fmt.Sprintf(format, args...))
}

// apply runs one fault to its end (it repairs what it broke).
func (c *chaos) apply(ctx context.Context, f fault) {
	t := c.t
	switch f.kind {
	case "worker-kill", "worker-term":
		w := c.workers[f.target%len(c.workers)]
		from := time.Now()
		if f.kind == "worker-kill" {
			w.signal(syscall.SIGKILL, 10*time.Second)
		} else {
			w.signal(syscall.SIGTERM, 20*time.Second)
		}
		sleep(ctx, f.length)
		w.start(t, c.bin, c.dir)
		c.workerDown = append(c.workerDown, downWindow{from, time.Now()})
		c.note("%s %s, restarted after %.1fs", f.kind, w.name, f.length.Seconds())
	case "worker-scale":
		c.scaleOut(ctx, f)
	case "redis-shutdown", "redis-kill", "redis-pause":
		r := c.tp.single
		c.outage.begin(f.kind, "")
		switch f.kind {
		case "redis-shutdown":
			r.Shutdown()
		case "redis-kill":
			r.Kill()
		default:
			r.Pause()
		}
		sleep(ctx, f.length)
		c.outage.end()
		if f.kind == "redis-pause" {
			r.Resume()
		} else {
			r.Restart()
		}
		c.note("%s for %.1fs", f.kind, f.length.Seconds())
	case "master-kill":
		m := c.pick(ctx, f, "master")
		if m == nil {
			return
		}
		// Without persistence a master may come back only once its
		// replica has taken over: back empty before, it would still own
		// its slots, and its replica would resync from it (every record
		// of them lost: Redis's hazard, not capper's).
		var replica *testenv.Redis
		if !c.tp.persist {
			if replica = c.tp.replicaOf(ctx, m); replica == nil {
				c.note("master-kill %s: no replica in sync, and no persistence; skipped", m.Addr())
				return
			}
		}
		c.outage.begin(f.kind, "")
		m.Kill()
		// Its replica takes over after cluster-node-timeout; without a
		// replica of its own the new master cannot acknowledge WAIT, so
		// the outage lasts until the killed node is back as its replica.
		sleep(ctx, f.length)
		c.outage.end()
		how := "with its append-only file"
		if replica != nil {
			waited := c.waitRole(ctx, replica, "master")
			how = fmt.Sprintf("empty, once its replica %s had taken over (%.1fs after the kill)", replica.Addr(), waited.Seconds()+f.length.Seconds())
		}
		m.Restart()
		c.waitHealthy(ctx, f.kind)
		c.note("master-kill %s, restarted after %.1fs %s", m.Addr(), f.length.Seconds(), how)
	case "replica-pause":
		r := c.pick(ctx, f, "slave")
		if r == nil {
			return
		}
		c.outage.begin(f.kind, masterOf(ctx, r))
		r.Pause()
		sleep(ctx, f.length)
		c.outage.end()
		r.Resume()
		c.note("replica-pause %s for %.1fs", r.Addr(), f.length.Seconds())
	case "manual-failover":
		r := c.pick(ctx, f, "slave")
		if r == nil {
			return
		}
		err := r.Client().Do(ctx, "CLUSTER", "FAILOVER").Err()
		c.waitHealthy(ctx, f.kind)
		c.note("manual-failover to %s (%v)", r.Addr(), err)
	case "slot-migration":
		c.migrateSlot(ctx, f)
	case "script-flush":
		for _, n := range c.tp.nodes() {
			_ = n.Client().ScriptFlush(ctx).Err()
		}
		c.note("script-flush on every node")
	case "policy-swap":
		c.current = 1 - c.current
		tmp := c.policy + ".tmp"
		if err := os.WriteFile(tmp, c.versions[c.current], 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, c.policy); err != nil {
			t.Fatal(err)
		}
		c.note("policy-swap to v%d", c.current+1)
	case "campaign-stop", "campaign-pause":
		if c.noControl {
			c.note("%s: skipped, this build of capper has no campaign control", f.kind)
			return
		}
		campaign := fmt.Sprintf("c%d", 1+f.target%5)
		state := strings.TrimPrefix(f.kind, "campaign-")
		pos := c.campaign(state, campaign, "--reason", "soak: "+f.kind)
		from := c.appliedAt(ctx, pos)
		sleep(ctx, f.length)
		to := time.Now()
		c.campaign("resume", campaign)
		c.held = append(c.held, heldWindow{campaign: campaign, state: state, from: from, to: to})
		c.note("%s %s (record %s), resumed after %.1fs", f.kind, campaign, pos, f.length.Seconds())
	case "control-compaction":
		if c.noControl {
			c.note("%s: skipped, this build of capper has no campaign control", f.kind)
			return
		}
		c.compaction(ctx, f)
	case "stop-in-stall":
		if c.noControl {
			c.note("%s: skipped, this build of capper has no campaign control", f.kind)
			return
		}
		c.stopInStall(ctx, f)
	case "broker-restart":
		from := time.Now()
		c.broker.stop()
		sleep(ctx, f.length)
		if err := c.broker.start(); err != nil {
			t.Fatal(err)
		}
		c.brokerDown = append(c.brokerDown, downWindow{from, time.Now()})
		c.note("broker-restart after %.1fs", f.length.Seconds())
	default:
		t.Fatalf("unknown fault %q", f.kind)
	}
}

// waitRole waits (a minute at most) until node n reports role, and
// returns how long that took.
func (c *chaos) waitRole(ctx context.Context, n *testenv.Redis, want string) time.Duration {
	start := time.Now()
	for role(ctx, n) != want {
		if time.Since(start) > time.Minute || ctx.Err() != nil {
			c.t.Errorf("%s did not become %s within a minute", n.Addr(), want)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start)
}

// pick is the node of a role (master, slave) a fault hits, by its target;
// nil (noted) when there is none.
func (c *chaos) pick(ctx context.Context, f fault, role string) *testenv.Redis {
	nodes := c.tp.byRole(ctx, role)
	if len(nodes) == 0 {
		c.note("%s: no %s found; skipped", f.kind, role)
		return nil
	}
	return nodes[f.target%len(nodes)]
}

// campaign runs `capper campaign STATE CAMPAIGN ARGS...` (the real
// binary, with a worker's config) and returns where it wrote, as it
// printed ("... to <topic>/<partition>/<offset> ...").
func (c *chaos) campaign(state, campaign string, args ...string) string {
	c.t.Helper()
	cmd := exec.Command(c.bin, append([]string{"campaign", state, campaign, "--by", "soak", "--config", c.workers[0].config}, args...)...)
	out, err := cmd.CombinedOutput()
	m := writtenRE.FindSubmatch(out)
	if err != nil || m == nil {
		c.t.Fatalf("capper campaign %s %s: %v\n%s", state, campaign, err, out)
	}
	return string(m[1])
}

var writtenRE = regexp.MustCompile(` to (\S+/\d+/\d+) `)

// appliedAt waits until every running worker applied the control record at
// pos and returns the latest time one did (its clock: this machine's).
func (c *chaos) appliedAt(ctx context.Context, pos string) time.Time {
	c.t.Helper()
	parts := strings.Split(pos, "/")
	partition, off := parts[len(parts)-2], parts[len(parts)-1]
	want, _ := strconv.ParseFloat(off, 64)
	offRE := regexp.MustCompile(`(?m)^capper_control_applied_offset\{partition="` + partition + `"\} (\S+)$`)
	atRE := regexp.MustCompile(`(?m)^capper_control_applied_timestamp_seconds (\S+)$`)
	var latest time.Time
	for _, w := range c.workers {
		deadline := time.Now().Add(30 * time.Second)
		for w.running() != nil && ctx.Err() == nil {
			code, body, err := w.get("/metrics")
			if err == nil && code == 200 {
				if m := offRE.FindStringSubmatch(body); m != nil {
					if v, _ := strconv.ParseFloat(m[1], 64); v >= want {
						// The time from the next scrape: one scrape reads
						// the two gauges at different moments, and may
						// read the time from before the publish whose
						// offset it reads.
						if code, next, err := w.get("/metrics"); err == nil && code == 200 {
							body = next
						}
						if a := atRE.FindStringSubmatch(body); a != nil {
							sec, _ := strconv.ParseFloat(a[1], 64)
							if t := time.UnixMilli(int64(sec * 1000)); t.After(latest) {
								latest = t
							}
						}
						break
					}
				}
			}
			if time.Now().After(deadline) {
				c.t.Errorf("worker %s did not apply control record %s in 30s", w.name, pos)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return latest
}

// waitHealthy waits (up to a minute) until every slot is served and every
// master has a replica in sync again.
func (c *chaos) waitHealthy(ctx context.Context, after string) {
	deadline := time.Now().Add(time.Minute)
	for !c.tp.healthy(ctx) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.t.Errorf("Redis did not recover within a minute after %s", after)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// migrateSlot moves the slot of a busy bucket from its master to another,
// the way redis-cli --cluster reshard does (IMPORTING, MIGRATING, MIGRATE
// a few keys at a time, SETSLOT NODE on every master).
func (c *chaos) migrateSlot(ctx context.Context, f fault) {
	masters := c.tp.byRole(ctx, "master")
	if len(masters) < 2 {
		c.note("slot-migration: fewer than 2 masters; skipped")
		return
	}
	// Users 1-31 share bucket 0, the busiest (low ids get most intents).
	slot := int(masters[0].Client().ClusterKeySlot(ctx, "capper:{b0}").Val())
	src := ownerOf(ctx, masters, slot)
	if src < 0 {
		c.note("slot-migration: no owner of slot %d; skipped", slot)
		return
	}
	dst := (src + 1 + f.target%(len(masters)-1)) % len(masters)
	id := func(n *testenv.Redis) string { return n.Client().Do(ctx, "CLUSTER", "MYID").Val().(string) }
	s, d := masters[src], masters[dst]
	err := d.Client().Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", id(s)).Err()
	if err == nil {
		err = s.Client().Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", id(d)).Err()
	}
	moved := 0
	for err == nil {
		keys, kerr := s.Client().ClusterGetKeysInSlot(ctx, slot, 2).Result()
		if kerr != nil || len(keys) == 0 {
			err = kerr
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", d.Port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err = s.Client().Do(ctx, args...).Err(); err == nil {
			moved += len(keys)
		}
		sleep(ctx, 300*time.Millisecond) // batches run while the slot is half moved
	}
	for _, n := range masters {
		if e := n.Client().Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", id(d)).Err(); e != nil && err == nil {
			err = e
		}
	}
	c.waitHealthy(ctx, "slot-migration")
	c.note("slot-migration of slot %d (%d keys) from %s to %s (%v)", slot, moved, s.Addr(), d.Addr(), err)
}

// ownerOf is the index in masters of the one that serves slot.
func ownerOf(ctx context.Context, masters []*testenv.Redis, slot int) int {
	shards, err := masters[0].Client().ClusterShards(ctx).Result()
	if err != nil {
		return -1
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if int64(slot) < r.Start || int64(slot) > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				for i, m := range masters {
					if n.Role == "master" && n.Port == int64(m.Port) {
						return i
					}
				}
			}
		}
	}
	return -1
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// redisLines is what each worker's log says of Redis (its warnings that
// Redis cannot decide, when it answers again, failed clock checks, the
// decisions it retries and why; not the users' limits applier's): how a
// worker judged ready in an outage came to be, without CAPPER_SOAK_LOGS
// (CI keeps no files).
func redisLines(dir string) string {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var out strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var lines []string
		for l := range strings.Lines(string(b)) {
			if low := strings.ToLower(l); strings.Contains(low, "redis") && !strings.Contains(low, "user's limits") && !strings.Contains(low, "policy version not reported") {
				lines = append(lines, strings.TrimSpace(clip.String(l, 400)))
			}
		}
		if n := len(lines); n > 60 {
			lines = append(lines[:30:30], append([]string{fmt.Sprintf("... %d more ...", n-60)}, lines[n-30:]...)...)
		}
		fmt.Fprintf(&out, "%s says of Redis:\n  %s\n", filepath.Base(f), strings.Join(lines, "\n  "))
	}
	return out.String()
}

// logDir is where worker logs go: kept under CAPPER_SOAK_LOGS when set
// (to read after a failure), else in the test's temporary directory.
func logDir(t *testing.T) string {
	if d := os.Getenv("CAPPER_SOAK_LOGS"); d != "" {
		dir := filepath.Join(d, time.Now().Format("20060102T150405"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

// scaleOut runs a worker more for the fault's length (5-9 s): the group
// shares the partitions out again, then the worker stops (SIGTERM) and,
// static, is removed from its groups as the chart's hook does (`capper
// group leave`): its partitions move back at once.
func (c *chaos) scaleOut(ctx context.Context, f fault) {
	if c.scale == nil {
		c.note("worker-scale skipped: the binary has no capper group leave")
		return
	}
	c.scales++
	name := fmt.Sprintf("w%d", len(c.workers)+c.scales)
	w := c.scale(name)
	sleep(ctx, f.length+4*time.Second)
	w.signal(syscall.SIGTERM, 20*time.Second)
	how := "it left its groups"
	if c.static {
		out, err := exec.Command(c.bin, "group", "leave", "--config", c.workers[0].config, "--instance", name).CombinedOutput()
		if err != nil {
			c.t.Errorf("capper group leave --instance %s: %v\n%s", name, err, out)
		}
		how = "removed with capper group leave"
	}
	c.note("worker-scale %s for %.1fs, stopped, %s", name, (f.length + 4*time.Second).Seconds(), how)
}
