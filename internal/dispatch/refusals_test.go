package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
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

// TestTakeoverMarksRedelivered: the records a previous owner of their
// partition may have decided without committing them (within two batches
// after the offset committed when the worker took the partition over)
// reach the engine marked Redelivered, so its refusal cache does not
// answer them; later records do not.
func TestTakeoverMarksRedelivered(t *testing.T) {
	e := newEnv(t)
	fr := &flagRecorder{Decider: e.engine, redelivered: map[string]bool{}}
	in := intents(400, 7, "a")
	e.kafka.Produce(t, tIn, in)
	e.start(func(o *Options) { o.Decider = fr })
	o := e.waitOutcomes(len(in))
	fr.mu.Lock()
	defer fr.mu.Unlock()
	window := int64(2 * testKafkaOptions(nil, "").BatchSize)
	marked := 0
	for _, m := range append(o.del, o.sup...) {
		var offset int64
		src := headerValue(m, HeaderSource)
		if _, err := fmt.Sscanf(src[strings.LastIndexByte(src, '/')+1:], "%d", &offset); err != nil {
			t.Fatalf("capper-source %q: %v", src, err)
		}
		var id struct{ ID string }
		if err := json.Unmarshal(m.Value, &id); err != nil {
			t.Fatal(err)
		}
		if want := offset < window; fr.redelivered[id.ID] != want {
			t.Errorf("intent %s at offset %d: Redelivered %v, want %v", id.ID, offset, fr.redelivered[id.ID], want)
		}
		if fr.redelivered[id.ID] {
			marked++
		}
	}
	if marked == 0 || marked == len(in) {
		t.Fatalf("%d of %d intents marked: the test needs both kinds", marked, len(in))
	}
}
