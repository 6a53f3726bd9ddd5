package main

// BenchmarkPacing's driver: the workers, the workload and its timeline,
// the CPU and allocation marks and the profiles of one run.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/control"
	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/testenv"
)

func runPacing(b *testing.B, sc pacingScale, paced bool) *pacingRun {
	b.Helper()
	d := &pacingDriver{b: b, sc: sc, r: &pacingRun{paced: paced}, profile: os.Getenv("CAPPER_BENCH_PACING_PROFILE"),
		txnTimes: make([]time.Time, int(sc.txnRate*(sc.txnUntil.Seconds()+600))+16)}
	if d.profile != "" {
		if err := os.MkdirAll(d.profile, 0o755); err != nil {
			b.Fatalf("CAPPER_BENCH_PACING_PROFILE: %v", err)
		}
	}
	d.s, d.engineCfg = pacingStack(b, sc, paced)
	reqs := countRequests(d.s.kafka.Cluster)
	d.s.cfg.HTTP.Pprof = d.profile != ""
	d.startWorkers()
	d.idle()
	r := d.r
	r.t0 = time.Now()
	reqsT0 := reqs.since([96]int64{})
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
	r.requests = reqs.since(reqsT0)
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
	d.profileIdle(3 * time.Second)
	d.mark(markT0)
	after := 0.0
	for _, w := range d.ws {
		after += w.cpu[markT0]
	}
	d.r.cpuIdle = (after - before) / time.Since(from).Seconds()
}

// blastIntent is the blast's push i (priority 50, user 1000+i).
func blastIntent(i int) (key, value string) {
	u := 1000 + i
	return strconv.Itoa(u), fmt.Sprintf(`{"id":"%s-%d","user_id":%d,"campaign_id":%q,"channel":"push","category":"marketing","priority":50}`, paceBlast, i, u, paceBlast)
}

func (d *pacingDriver) produceBlast() chan error {
	done := make(chan error, 1)
	go func() {
		start := time.Now()
		err := produceIntents(context.Background(), d.s.kafka.Addrs, d.sc.blast, d.sc.workers, blastIntent)
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
			file := profileFile(d.profile, fmt.Sprintf("%s-%s-%d", map[bool]string{true: "paced", false: "unpaced"}[d.r.paced], name, i+1))
			if err := saveProfile(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", w.addr, int(secs.Seconds())), file); err != nil {
				d.b.Error(err)
			}
		})
	}
}

// profileIdle waits secs, saving with CAPPER_BENCH_PACING_PROFILE=dir a CPU
// profile of each worker meanwhile (<paced|unpaced>-idle-<i>.pprof): what
// a worker burns with nothing to do.
func (d *pacingDriver) profileIdle(secs time.Duration) {
	if d.profile == "" {
		time.Sleep(secs)
		return
	}
	var wg sync.WaitGroup
	for i, w := range d.ws {
		wg.Go(func() {
			file := profileFile(d.profile, fmt.Sprintf("%s-idle-%d", map[bool]string{true: "paced", false: "unpaced"}[d.r.paced], i+1))
			if err := saveProfile(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", w.addr, int(secs.Seconds())), file); err != nil {
				d.b.Error(err)
			}
		})
	}
	wg.Wait()
}

// profileFile is dir's file for the profile base: base.pprof, or, when a
// round before (-benchtime Nx) saved that one, base-r2.pprof, base-r3.pprof
// and so on: every round's profiles are kept (pprof merges them).
func profileFile(dir, base string) string {
	file := filepath.Join(dir, base+".pprof")
	for r := 2; ; r++ {
		if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
			return file
		}
		file = filepath.Join(dir, fmt.Sprintf("%s-r%d.pprof", base, r))
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
		file := profileFile(d.profile, fmt.Sprintf("%s-allocs-%d", map[bool]string{true: "paced", false: "unpaced"}[d.r.paced], i+1))
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
