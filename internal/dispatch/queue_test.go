package dispatch

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
)

// waitingInPut reports whether a goroutine is parked in queue.put's wait.
func waitingInPut() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "[select") && strings.Contains(g, "(*queue).put") {
			return true
		}
	}
	return false
}

// A queue full of an ended generation's records, with the next
// generation's reader waiting to put: take drops the old records and the
// reader's put goes through (soak seed 14: both waited on each other for
// ever, and the partition's records were never decided).
func TestQueueDropWakesPut(t *testing.T) {
	q := newQueue(4)
	old := newPartState(topicPartition{"in", 2})
	next := newPartState(topicPartition{"in", 2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msgs := func(from int64, n int) []kafka.Message {
		out := make([]kafka.Message, n)
		for i := range out {
			out[i] = kafka.Message{Topic: "in", Partition: 2, Offset: from + int64(i)}
		}
		return out
	}
	if err := q.put(ctx, chunk{old, msgs(0, 4)}); err != nil {
		t.Fatal(err)
	}
	old.closed.Store(true) // a rebalance ended its generation
	put := make(chan error, 1)
	go func() { put <- q.put(ctx, chunk{next, msgs(0, 2)}) }()
	for !waitingInPut() { // the new reader waits for room
		if ctx.Err() != nil {
			t.Fatal("put never waited")
		}
		runtime.Gosched()
	}
	got, err := q.take(ctx, nil, 10)
	if err != nil {
		t.Fatalf("take: %v (the reader waiting in put was never woken)", err)
	}
	if len(got) != 2 || got[0].Offset != 0 || got[1].Offset != 1 {
		t.Fatalf("take returned %v, want offsets 0 and 1 of the new generation", got)
	}
	if err := <-put; err != nil {
		t.Fatalf("put: %v", err)
	}
	if h := next.handed.Load(); h != 2 {
		t.Fatalf("handed = %d, want 2", h)
	}
}

// newPartState is a partState of its own (no claim behind it: tests).
func newPartState(tp topicPartition) *partState {
	return &partState{tp: tp, start: new(atomic.Int64), handed: new(atomic.Int64), committed: new(atomic.Int64), closed: new(atomic.Bool)}
}
