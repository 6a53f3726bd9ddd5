package pacing_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/testenv"
)

// TestGateStampsTokensAndShowsOnlyWaits: the gate gives its Stamp what
// took a token, with the release time, and not what passed without one;
// capper_pacing_oldest_wait_seconds has a series while a record waits for
// its tokens and none once nothing waits (a free record last at the head
// included).
func TestGateStampsTokensAndShowsOnlyWaits(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	set := budgetSet(t, 1000, 500)
	reg := prometheus.NewRegistry()
	p := newPacer(t, r, set, 0, reg)
	other := newPacer(t, r, set, 700*time.Millisecond, nil) // another worker's urgent lane
	free := func(m *kafka.Message, _ time.Time) bool { return string(m.Key) == "free" }
	stamped := map[string]time.Time{}
	stamp := func(msgs []kafka.Message, at time.Time) {
		for _, m := range msgs {
			stamped[string(m.Key)] = at
		}
	}
	g := &pacing.Gate{Pacer: p, Prefix: "lanes", Free: free, Stamp: stamp, Held: heldSince}
	topic := pacing.Topic("lanes", "push", "bulk")
	held := time.Now().Add(-time.Minute).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	rec := func(key string, off int64) kafka.Message {
		return kafka.Message{Topic: topic, Key: []byte(key), Offset: off,
			Headers: []kafka.Header{{Key: "capper-held-since", Value: []byte(held)}}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := other.Acquire(ctx, "push", 0, 1); err != nil {
		t.Fatal(err)
	}
	msgs := []kafka.Message{rec("a", 0), rec("free", 1)}
	done := make(chan int, 1)
	go func() {
		n, err := g.Pass(ctx, topic, msgs, 2)
		if err != nil {
			t.Error(err)
		}
		done <- n
	}()
	waitSeries := func(want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for testutil.CollectAndCount(reg, "capper_pacing_oldest_wait_seconds") != want {
			if time.Now().After(deadline) {
				t.Fatalf("capper_pacing_oldest_wait_seconds has %d series, want %d", testutil.CollectAndCount(reg, "capper_pacing_oldest_wait_seconds"), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitSeries(1) // "a" waits behind the other worker's urgent lane
	if n := <-done; n != 1 {
		t.Fatalf("the gate let %d records go, want 1 (the next is free, not leased for)", n)
	}
	if n, err := g.Pass(ctx, topic, msgs[1:], 2); err != nil || n != 1 {
		t.Fatalf("the free record: %d, %v", n, err)
	}
	waitSeries(0)
	if at, ok := stamped["a"]; !ok || at.IsZero() || len(stamped) != 1 {
		t.Fatalf("stamped %v; want the released record only, with its release time", stamped)
	}
}

// heldSince reads the test records' capper-held-since (the Gate's Held).
func heldSince(m *kafka.Message) time.Time {
	for _, h := range m.Headers {
		if h.Key == "capper-held-since" {
			if t, err := time.Parse(kafka.TimeLayout, string(h.Value)); err == nil {
				return t
			}
		}
	}
	return time.Time{}
}
