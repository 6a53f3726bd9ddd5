package dispatch

import (
	"sync/atomic"
	"testing"
	"time"
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
