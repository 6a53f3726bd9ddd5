package app

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRedisWarnerRateLimit: the first failure is logged at once, naming
// redis.addrs; failures that follow within redisWarnEvery are counted, not
// logged, and the next line says how many; a failure that lasts is
// repeated at most once per redisWarnEvery; recovery is logged once per
// failure that was logged.
func TestRedisWarnerRateLimit(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	w := newRedisWarner([]string{"redis-1:6379"}, log)
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	w.now = func() time.Time { return now }
	down := errors.New("redis cannot decide: connect to redis-1:6379: connection refused")
	step := func(d time.Duration, err error) {
		now = now.Add(d)
		w.observe(err)
	}
	lines := func() []string { return strings.Split(strings.TrimSpace(buf.String()), "\n") }

	step(0, down)
	if l := lines(); len(l) != 1 || !strings.Contains(l[0], "level=WARN") || !strings.Contains(l[0], "redis.addrs=[redis-1:6379]") ||
		!strings.Contains(l[0], "connection refused") {
		t.Fatalf("first failure:\n%s", buf.String())
	}
	step(time.Second, nil) // answers again: logged
	step(time.Second, down)
	step(time.Second, nil)
	step(time.Second, down)
	step(time.Second, nil)
	if l := lines(); len(l) != 2 || !strings.Contains(l[1], "Redis answers again") {
		t.Fatalf("failures within 10 s must be counted, not logged:\n%s", buf.String())
	}
	step(10*time.Second, down)
	if l := lines(); len(l) != 3 || !strings.Contains(l[2], "suppressed=2") {
		t.Fatalf("the next warning must count the 2 left out:\n%s", buf.String())
	}
	step(5*time.Second, down)
	step(5*time.Second, down)
	if l := lines(); len(l) != 4 || !strings.Contains(l[3], "Redis still cannot decide") || !strings.Contains(l[3], "for=10s") {
		t.Fatalf("a lasting failure repeats every 10 s:\n%s", buf.String())
	}
}
