package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestBackoffDoublesWithJitter(t *testing.T) {
	b := &Backoff{Initial: time.Millisecond, Max: 4 * time.Millisecond}
	var got []time.Duration
	for range 4 {
		got = append(got, b.Current())
		start := time.Now()
		if err := b.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if slept := time.Since(start); slept < time.Duration(float64(got[len(got)-1])*(1-Jitter)) {
			t.Fatalf("slept %s for a wait of %s", slept, got[len(got)-1])
		}
	}
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 4 * time.Millisecond}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits %v, want %v", got, want)
		}
	}
	b.Reset()
	if b.Current() != time.Millisecond {
		t.Fatalf("after Reset: %s", b.Current())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := (&Backoff{Initial: time.Hour}).Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context: %v", err)
	}
}
