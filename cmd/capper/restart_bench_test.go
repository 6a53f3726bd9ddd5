package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/demo"
	capkafka "github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/testenv"
)

// BenchmarkRestarts: three `capper run` workers on a steady stream (200
// intents every 100 ms over 4 partitions, the default session timeout and
// heartbeat), and what each membership change costs the partitions'
// decisions (a partition's committed offset, sampled every 50 ms, is its
// progress). For each of: the eager protocol with dynamic members (how
// earlier versions ran), the eager protocol with static members, and the
// cooperative protocol with static members (the default in the chart):
//
//   - kill: one worker SIGKILLed and started again at once: the longest
//     pause of the other workers' partitions (goal <= 1 s) and how long
//     after the restarted worker was ready its own partitions moved
//     again (goal <= 1 s);
//
//   - rolling: each worker in turn stopped (SIGTERM), started, and waited
//     for: the longest pause of any partition (goal <= 2 s);
//
//   - scale: a fourth worker started, then stopped (and removed from the
//     group: `capper group leave`): the longest pause of the partitions
//     that stayed where they were (goal 0: no pause beyond the stream's
//     own gaps, about 0.3 s).
//
//     go test ./cmd/capper -run '^$' -bench Restarts -benchtime 1x -v
func BenchmarkRestarts(b *testing.B) {
	modes := []struct {
		name     string
		protocol string
		static   bool
	}{{"eager, dynamic", "eager", false}, {"eager, static", "eager", true}, {"cooperative, static", "cooperative", true}}
	for range b.N {
		for _, m := range modes {
			kill, resume := restartKill(b, m.protocol, m.static)
			gone := restartGone(b, m.protocol, m.static)
			roll := restartRolling(b, m.protocol, m.static)
			scale := restartScale(b, m.protocol, m.static)
			goal := config.Default().Kafka.SessionTimeout.D() + time.Second
			fmt.Printf("BenchmarkRestarts %-20s kill: others paused %5.2f s (%.2fx the 1 s goal), its own moved %5.2f s after it was ready (%.2fx); "+
				"killed for good: its partitions moved %5.2f s after (%.2fx session timeout + 1 s); rolling: %5.2f s (%.2fx the 2 s goal); scale out and in: partitions that stayed paused %5.2f s\n",
				m.name, kill.Seconds(), kill.Seconds(), resume.Seconds(), resume.Seconds(), gone.Seconds(), gone.Seconds()/goal.Seconds(),
				roll.Seconds(), roll.Seconds()/2, scale.Seconds())
		}
	}
}

// rig is a benchmark's three workers on a steady stream.
type rig struct {
	b      *testing.B
	s      *stack
	procs  []*proc
	paths  []string
	moved  map[int][]time.Time
	last   map[int]int64
	cancel context.CancelFunc
	done   chan struct{}
}

func newRig(b *testing.B, protocol string, static bool) *rig {
	r := &rig{b: b, s: newStack(b), moved: map[int][]time.Time{}, last: map[int]int64{}, done: make(chan struct{})}
	def := config.Default().Kafka
	k := &r.s.cfg.Kafka
	k.SessionTimeout, k.HeartbeatInterval, k.RebalanceTimeout, k.GroupProtocol = def.SessionTimeout, def.HeartbeatInterval, def.RebalanceTimeout, protocol
	for i := range 3 {
		r.add(static, i)
	}
	msgs := demo.Blast(demo.BlastOptions{Users: 500, Intents: 100000, Seed: 9})
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		defer close(r.done)
		w := &kafka.Writer{Addr: kafka.TCP(r.s.kafka.Addrs...), Topic: "send-intents", RequiredAcks: kafka.RequireAll,
			BatchTimeout: time.Millisecond, Balancer: &kafka.Murmur2Balancer{}}
		defer w.Close()
		for n := 0; n < len(msgs) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
			if w.WriteMessages(ctx, msgs[n:n+200]...) == nil {
				n += 200
			}
		}
	}()
	b.Cleanup(func() { cancel(); <-r.done })
	r.until(4 * time.Second)
	return r
}

// add writes worker i's config (its own HTTP port; instance w-i when
// static) and starts it.
func (r *rig) add(static bool, i int) {
	r.s.cfg.HTTP.Address = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(r.b))
	r.s.cfg.Kafka.GroupInstanceID = ""
	if static {
		r.s.cfg.Kafka.GroupInstanceID = fmt.Sprintf("w-%d", i)
	}
	r.s.path = filepath.Join(r.b.TempDir(), "capper.yaml")
	r.s.writeConfig(r.b)
	r.paths = append(r.paths, r.s.path)
	r.procs = append(r.procs, r.s.start(r.b))
}

// restart starts worker i again with its config, and returns when it is
// ready.
func (r *rig) restart(i int) time.Time {
	r.s.path = r.paths[i]
	cfg, err := config.Load(r.paths[i])
	if err != nil {
		r.b.Fatal(err)
	}
	r.s.cfg.HTTP.Address = cfg.HTTP.Address
	r.procs[i] = r.s.start(r.b)
	return time.Now()
}

// until samples the partitions' committed offsets every 50 ms for d.
func (r *rig) until(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		now := time.Now()
		for p, off := range r.s.kafka.Committed(r.b, r.s.cfg.Kafka.GroupID, "send-intents", 4) {
			if off > r.last[p] {
				r.moved[p] = append(r.moved[p], now)
				r.last[p] = off
			}
		}
	}
}

// pause is the longest stop of partitions ps during [t0, t1].
func (r *rig) pause(ps []int, t0, t1 time.Time) time.Duration {
	var worst time.Duration
	for _, p := range ps {
		prev := t0
		for _, at := range r.moved[p] {
			switch {
			case at.Before(t0):
				prev = at
			case !at.After(t1):
				worst, prev = max(worst, at.Sub(prev)), at
			}
		}
		worst = max(worst, t1.Sub(prev))
	}
	return worst
}

// firstMove is how long after t partition p moved first (the rest of the
// sampling window when it never did).
func (r *rig) firstMove(ps []int, t, end time.Time) time.Duration {
	var worst time.Duration
	for _, p := range ps {
		i := slices.IndexFunc(r.moved[p], func(at time.Time) bool { return at.After(t) })
		if i < 0 {
			worst = max(worst, end.Sub(t))
			continue
		}
		worst = max(worst, r.moved[p][i].Sub(t))
	}
	return worst
}

// owners is which worker owns each input partition (by instance id, or
// member id).
// (A group in a rebalance shows no assignment: it asks again until every
// partition has an owner.)
func (r *rig) owners() map[int]string {
	deadline := time.Now().Add(20 * time.Second)
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	for {
		o, err := capkafka.Owners(context.Background(), tr, r.s.kafka.Addrs, r.s.cfg.Kafka.GroupID)
		if err != nil {
			r.b.Fatal(err)
		}
		out := map[int]string{}
		for tp, who := range o {
			if tp.Topic == "send-intents" {
				out[tp.Partition] = who
			}
		}
		if len(out) == 4 {
			return out
		}
		if time.Now().After(deadline) {
			r.b.Fatalf("the group's partitions have no owner for 20 s: %v", out)
		}
		r.until(100 * time.Millisecond)
	}
}

func restartKill(b *testing.B, protocol string, static bool) (others, resume time.Duration) {
	r := newRig(b, protocol, static)
	before := r.owners()
	victim := 1
	var mine, theirs []int
	for p := range 4 {
		if static && before[p] == fmt.Sprintf("w-%d", victim) {
			mine = append(mine, p)
		} else if static {
			theirs = append(theirs, p)
		}
	}
	killed := time.Now()
	if err := r.procs[victim].cmd.Process.Kill(); err != nil {
		b.Fatal(err)
	}
	_ = r.procs[victim].wait(b, 10*time.Second)
	ready := r.restart(victim)
	r.until(12 * time.Second)
	end := time.Now()
	if !static { // a new member id: every partition may move
		after := r.owners()
		for p := range 4 {
			if after[p] == before[p] {
				theirs = append(theirs, p)
			} else {
				mine = append(mine, p)
			}
		}
	}
	if len(mine) == 0 || len(theirs) == 0 {
		b.Fatalf("the killed worker owned %v, the others %v: owners %v", mine, theirs, before)
	}
	return r.pause(theirs, killed, end), r.firstMove(mine, ready, end)
}

// restartGone kills a worker and starts none: how long until its
// partitions move again (the others take them once its session ends).
func restartGone(b *testing.B, protocol string, static bool) time.Duration {
	r := newRig(b, protocol, static)
	before := r.owners()
	victim := r.procs[1]
	var mine []int
	for p, who := range before {
		if who == "w-1" { // static: its own partitions
			mine = append(mine, p)
		}
	}
	killed := time.Now()
	if err := victim.cmd.Process.Kill(); err != nil {
		b.Fatal(err)
	}
	_ = victim.wait(b, 10*time.Second)
	r.until(15 * time.Second)
	if !static { // a member id: the partitions whose owner changed
		after := r.owners()
		for p := range 4 {
			if after[p] != before[p] {
				mine = append(mine, p)
			}
		}
	}
	if len(mine) == 0 {
		b.Fatalf("the killed worker owned no partition: owners %v", before)
	}
	return r.firstMove(mine, killed, time.Now())
}

func restartRolling(b *testing.B, protocol string, static bool) time.Duration {
	r := newRig(b, protocol, static)
	began := time.Now()
	for i := range r.procs {
		if err := r.procs[i].cmd.Process.Signal(syscall.SIGTERM); err != nil {
			b.Fatal(err)
		}
		_ = r.procs[i].wait(b, 30*time.Second)
		r.restart(i)
		r.until(time.Second)
	}
	r.until(5 * time.Second)
	return r.pause([]int{0, 1, 2, 3}, began, time.Now())
}

func restartScale(b *testing.B, protocol string, static bool) time.Duration {
	return restartScaleOn(b, newRig(b, protocol, static))
}

func restartScaleOn(b *testing.B, r *rig) time.Duration {
	static := r.s.cfg.Kafka.GroupInstanceID != ""
	before := r.owners()
	began := time.Now()
	r.add(static, 3)
	r.until(5 * time.Second)
	mid := r.owners()
	if err := r.procs[3].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		b.Fatal(err)
	}
	_ = r.procs[3].wait(b, 30*time.Second)
	if static {
		if out, errOut, code := capper(b, nil, "group", "leave", "--config", r.paths[0], "--instance", "w-3"); code != 0 {
			b.Fatalf("group leave: %s%s", out, errOut)
		}
	}
	r.until(5 * time.Second)
	after := r.owners()
	var stayed []int
	for p := range 4 {
		if before[p] == mid[p] && mid[p] == after[p] {
			stayed = append(stayed, p)
		}
	}
	return r.pause(stayed, began, time.Now())
}
