package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/testenv"
)

// TestRedisLoggerRateLimits: a go-redis message repeated during an outage
// is logged at most once per interval and kind; the next line of its kind
// carries how many repeats were left out. Other kinds are not held back.
func TestRedisLoggerRateLimits(t *testing.T) {
	var buf bytes.Buffer
	log, err := app.NewLogger(&buf, config.Log{Level: "info", Format: "json"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 21, 16, 0, 0, 0, time.UTC)
	r := app.RedisLogger(log, 10*time.Second, func() time.Time { return now })
	ctx := context.Background()
	const dial = "redis: connection pool: failed to dial after %d attempts: %v"
	// A 25-second outage: go-redis complains twice a second.
	for i := 0; i < 50; i++ {
		r.Printf(ctx, dial, 5, "dial tcp 127.0.0.1:6379: connect: connection refused")
		if i == 3 {
			r.Printf(ctx, "redis: failed to close connection: %v", "use of closed network connection")
		}
		now = now.Add(500 * time.Millisecond)
	}
	// After a quiet spell, one more.
	now = now.Add(time.Minute)
	r.Printf(ctx, dial, 5, "dial tcp 127.0.0.1:6379: connect: connection refused")

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %q", l)
		}
		lines = append(lines, m)
	}
	// Dial lines at 0s, 10s, 20s and after the quiet spell; the close
	// message once.
	var dials []map[string]any
	closes := 0
	for _, l := range lines {
		if l["level"] != "WARN" || l["component"] != "go-redis" {
			t.Errorf("line %v: want a go-redis warning", l)
		}
		switch msg := l["msg"].(string); {
		case strings.HasPrefix(msg, "redis: connection pool: failed to dial after 5 attempts: dial tcp"):
			dials = append(dials, l)
		case strings.HasPrefix(msg, "redis: failed to close connection"):
			closes++
		default:
			t.Errorf("unexpected line %v", l)
		}
	}
	if closes != 1 || len(dials) != 4 {
		t.Fatalf("%d dial lines (want 4) and %d close lines (want 1):\n%s", len(dials), closes, buf.String())
	}
	for i, want := range []float64{0, 19, 19, 9} {
		got, _ := dials[i]["suppressed"].(float64)
		if got != want {
			t.Errorf("dial line %d: suppressed %v, want %v", i, dials[i]["suppressed"], want)
		}
		if _, ok := dials[i]["every"]; ok != (want > 0) {
			t.Errorf("dial line %d: every %v", i, dials[i]["every"])
		}
	}
	if dials[1]["every"] != "10s" {
		t.Errorf("every = %v, want \"10s\"", dials[1]["every"])
	}
}

// TestRedisLoggerVerbOnlyFormats: messages whose format is only verbs
// ("%s") are told apart by their text, numbers aside.
func TestRedisLoggerVerbOnlyFormats(t *testing.T) {
	var buf bytes.Buffer
	log, err := app.NewLogger(&buf, config.Log{Level: "info", Format: "text"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	r := app.RedisLogger(log, time.Minute, func() time.Time { return now })
	ctx := context.Background()
	r.Printf(ctx, "%s", "conn[1] marked for handoff")
	r.Printf(ctx, "%s", "conn[2] marked for handoff") // same kind: suppressed
	r.Printf(ctx, "%s", "circuit breaker opened for 10.0.0.1:6379")
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Fatalf("%d lines, want 2:\n%s", n, buf.String())
	}
	if !strings.Contains(buf.String(), "circuit breaker opened") {
		t.Fatalf("another kind was held back:\n%s", buf.String())
	}
}

// TestLoggerDurations: durations print as Go durations in JSON logs.
func TestLoggerDurations(t *testing.T) {
	var buf bytes.Buffer
	log, err := app.NewLogger(&buf, config.Log{Level: "info", Format: "json"})
	if err != nil {
		t.Fatal(err)
	}
	log.Info("batch", "took", 100*time.Millisecond)
	if !strings.Contains(buf.String(), `"took":"100ms"`) {
		t.Fatalf("duration not printed as 100ms: %s", buf.String())
	}
	if _, err := app.NewLogger(&buf, config.Log{Level: "loud", Format: "json"}); err == nil || !strings.Contains(err.Error(), "log") {
		t.Fatalf("bad level: %v", err)
	}
}

// TestRedisLoggerConcurrent: go-redis logs from many goroutines; a burst of
// one kind still gives one line.
func TestRedisLoggerConcurrent(t *testing.T) {
	var buf testenv.SyncBuffer
	log, err := app.NewLogger(&buf, config.Log{Level: "info", Format: "json"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(0, 0)
	r := app.RedisLogger(log, time.Second, func() time.Time { return now })
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				r.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 5, "refused")
			}
		}()
	}
	wg.Wait()
	if n := strings.Count(buf.String(), "\n"); n != 1 {
		t.Fatalf("%d lines, want 1:\n%s", n, buf.String())
	}
}
