package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/demo"
)

// TestRedisFreezeWarns: a worker whose Redis freezes (SIGSTOP) while it has
// intents to decide says so in its log while the freeze lasts, in one WARN
// line that names redis.addrs (before, a freeze of a few seconds logged
// nothing); once Redis answers again it says so, and every intent has its
// outcome.
func TestRedisFreezeWarns(t *testing.T) {
	s := newStack(t)
	p := s.start(t)
	s.redis.Pause()
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			s.redis.Resume()
		}
	})
	msgs := demo.Blast(demo.BlastOptions{Users: 100, Intents: 200, Seed: 5})
	s.kafka.Produce(t, "send-intents", msgs)

	// The line comes while Redis is still frozen: the test resumes it only
	// after seeing the line.
	waitLog := func(level, msg string) map[string]any {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			for _, l := range jsonLines(t, p.logs.String()) {
				if m, _ := l["msg"].(string); l["level"] == level && strings.Contains(m, msg) {
					return l
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s line %q:\n%s", level, msg, p.logs)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	l := waitLog("WARN", "Redis cannot decide")
	if got, want := fmt.Sprint(l["redis.addrs"]), fmt.Sprint([]any{s.redis.Addr()}); got != want {
		t.Fatalf("the warning names redis.addrs %s, want %s: %v", got, want, l)
	}
	if e, _ := l["error"].(string); e == "" {
		t.Fatalf("the warning says no reason: %v", l)
	}
	s.redis.Resume()
	resumed = true
	waitLog("INFO", "Redis answers again")
	s.waitOutcomes(t, len(msgs), p.logs)
	s.audit(t)
	n := strings.Count(p.logs.String(), `"msg":"Redis cannot decide`)
	if n != 1 {
		t.Fatalf("%d warnings for one freeze, want 1 (then at most one per 10 s, as \"still cannot decide\"):\n%s", n, p.logs)
	}
}
