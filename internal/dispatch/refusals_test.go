package dispatch

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/capping"
)

// forgetCounter is the engine, counting ForgetRefusals calls.
type forgetCounter struct {
	Decider
	forgot atomic.Int32
}

func (f *forgetCounter) ForgetRefusals() { f.forgot.Add(1) }

// TestRebalanceForgetsRefusals: when the consumer group rebalances (a second
// worker joins), the worker empties the decider's refusal cache before its
// next batch: an intent another worker allowed may come back, and only Redis
// knows it is a duplicate.
func TestRebalanceForgetsRefusals(t *testing.T) {
	e := newEnv(t)
	fc := &forgetCounter{Decider: e.engine}
	e.kafka.Produce(t, tIn, intents(100, 10, "a"))
	a := e.start(func(o *Options) { o.Decider = fc })
	e.waitOutcomes(100)
	joined := fc.forgot.Load() // the first join is a rebalance too
	if joined == 0 {
		t.Fatal("the group's first join did not empty the cache")
	}
	b := e.start(nil) // a second worker: the group rebalances
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; fc.forgot.Load() == joined; i++ {
		if time.Now().After(deadline) {
			t.Fatal("no ForgetRefusals after the group rebalanced")
		}
		// Batches reach the worker only when there is something to fetch.
		e.kafka.Produce(t, tIn, intents(20, 10, "b"+string(rune('a'+i%26))))
		time.Sleep(200 * time.Millisecond)
	}
	_, _ = a, b
}

// flagRecorder is the engine, noting which intents came marked Redelivered.
type flagRecorder struct {
	Decider
	mu          sync.Mutex
	redelivered map[string]bool
}

func (f *flagRecorder) Decide(ctx context.Context, reqs []capping.Request) ([]capping.Decision, error) {
	f.mu.Lock()
	for _, r := range reqs {
		f.redelivered[r.IntentID] = r.Redelivered
	}
	f.mu.Unlock()
	return f.Decider.Decide(ctx, reqs)
}

// TestTakeoverMarksRedelivered: the records that were in a partition when
// the worker took it over (a previous owner may have decided them) reach
// the engine marked Redelivered, so its refusal cache does not answer them;
// records produced afterwards do not.
func TestTakeoverMarksRedelivered(t *testing.T) {
	e := newEnv(t)
	fr := &flagRecorder{Decider: e.engine, redelivered: map[string]bool{}}
	e.kafka.Produce(t, tIn, intents(100, 10, "before"))
	e.start(func(o *Options) { o.Decider = fr })
	e.waitOutcomes(100)
	e.kafka.Produce(t, tIn, intents(40, 10, "after"))
	e.waitOutcomes(140)
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if len(fr.redelivered) != 140 {
		t.Fatalf("%d intents decided, want 140", len(fr.redelivered))
	}
	for id, marked := range fr.redelivered {
		if want := strings.HasPrefix(id, "before"); marked != want {
			t.Errorf("intent %s: Redelivered %v, want %v", id, marked, want)
		}
	}
}
