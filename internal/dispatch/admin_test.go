package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	capkafka "github.com/capper-dev/capper/internal/kafka"
)

// TestLagReporter: the lag comes from the brokers (high watermark minus the
// group's committed offset), so it is right while no worker consumes at all,
// and follows commits.
func TestLagReporter(t *testing.T) {
	e := newEnv(t)
	in := intents(100, 20, "l")
	e.kafka.Produce(t, tIn, in)
	c, err := capkafka.NewAdmin(testKafkaOptions(e.kafka.Addrs, e.group))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	l, err := NewLagReporter(LagOptions{Admin: c, Group: e.group, Topic: tIn, Interval: time.Hour, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := l.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sumLag(t, l); got != 100 {
		t.Fatalf("lag before any commit = %v, want 100", got)
	}
	r := e.start(nil)
	e.waitOutcomes(len(in))
	waitCommitted(t, e, len(in))
	r.cancel()
	_ = r.wait(t)
	if err := l.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sumLag(t, l); got != 0 {
		t.Fatalf("lag after the commits = %v, want 0", got)
	}
	e.kafka.Produce(t, tIn, intents(7, 7, "m"))
	if err := l.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sumLag(t, l); got != 7 {
		t.Fatalf("lag with no worker running = %v, want 7", got)
	}

	// Run refreshes on its timer alone: with no worker (no batch moves),
	// the gauge still follows what producers add.
	timed, err := NewLagReporter(LagOptions{Admin: c, Group: e.group, Topic: tIn, Interval: 50 * time.Millisecond,
		Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- timed.Run(rctx) }()
	e.kafka.Produce(t, tIn, intents(5, 5, "n"))
	for deadline := time.Now().Add(20 * time.Second); sumLag(t, timed) != 12; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("lag from the timer = %v, want 12", sumLag(t, timed))
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

func sumLag(t *testing.T, l *LagReporter) float64 {
	t.Helper()
	var sum float64
	for _, p := range []string{"0", "1", "2", "3"} {
		sum += testutil.ToFloat64(l.lag.WithLabelValues(p))
	}
	return sum
}
