package dispatch

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/capping"
)

// hangingDecider hangs its worker's decision loop at its first batch
// until release is closed (a deadlock, as far as the worker can tell).
type hangingDecider struct {
	Decider
	hung    chan struct{} // closed once it hangs
	release chan struct{}
}

func (h *hangingDecider) Decide(ctx context.Context, reqs []capping.Request) ([]capping.Decision, error) {
	select {
	case <-h.hung:
	default:
		close(h.hung)
		<-h.release
	}
	return h.Decider.Decide(ctx, reqs)
}

// TestStuckWorkerLeaves: two workers share the input; one's decision loop
// hangs on its first batch while its process goes on heartbeating. After
// worker.stuck_timeout it leaves the group: the other reads its
// partitions and decides every intent, and the stuck one answers /healthz
// and /readyz with why. Without it the hung worker keeps its partitions
// for ever.
func TestStuckWorkerLeaves(t *testing.T) {
	e := newEnv(t)
	e.engine = e.newEngine(t)
	h := &hangingDecider{Decider: e.engine, hung: make(chan struct{}), release: make(chan struct{})}
	stuck := e.start(func(o *Options) { o.Decider, o.StuckTimeout = h, 2*time.Second })
	t.Cleanup(func() { close(h.release) }) // before the worker is stopped
	waitFor(t, "the first worker to own the input", func() bool { return len(stuck.reader.input.assigned(tIn)) == 4 })
	other := e.start(func(o *Options) { o.StuckTimeout = 2 * time.Second })
	waitFor(t, "the two workers to share the input", func() bool { return len(other.reader.input.assigned(tIn)) == 2 })
	in := intents(200, 40, "s")
	e.kafka.Produce(t, tIn, in)
	<-h.hung
	o := e.waitOutcomes(len(in))
	for src, n := range o.sources() {
		if n != 1 {
			t.Errorf("input %s has %d outcomes", src, n)
		}
	}
	if err := stuck.w.Live(); err == nil {
		t.Error("the stuck worker says it is live")
	}
	if err := stuck.w.Ready(); err == nil {
		t.Error("the stuck worker says it is ready")
	}
	if err := other.w.Live(); err != nil {
		t.Errorf("the other worker: %v", err)
	}
}

// BenchmarkStuck prints how long after a worker's decision loop hung (its
// process heartbeating on) the other worker had decided every intent of
// the hung one's batch, against worker.stuck_timeout (2 s here) + 1 s.
//
//	go test ./internal/dispatch -run '^$' -bench Stuck -benchtime 1x
func BenchmarkStuck(b *testing.B) {
	for range b.N {
		e := newEnv(b)
		e.engine = e.newEngine(b)
		h := &hangingDecider{Decider: e.engine, hung: make(chan struct{}), release: make(chan struct{})}
		stuck := e.start(func(o *Options) { o.Decider, o.StuckTimeout = h, 2*time.Second })
		b.Cleanup(func() { close(h.release) })
		deadline := time.Now().Add(30 * time.Second)
		for len(stuck.reader.input.assigned(tIn)) < 4 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		other := e.start(func(o *Options) { o.StuckTimeout = 2 * time.Second })
		for len(other.reader.input.assigned(tIn)) < 2 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		in := intents(200, 40, "s")
		e.kafka.Produce(b, tIn, in)
		<-h.hung
		hung := time.Now()
		e.waitOutcomes(len(in))
		took := time.Since(hung)
		b.ReportMetric(took.Seconds(), "s")
		fmt.Printf("BenchmarkStuck: every intent decided %.2f s after a worker's loop hung: %.2fx worker.stuck_timeout (2 s) + 1 s\n", took.Seconds(), took.Seconds()/3)
	}
}
