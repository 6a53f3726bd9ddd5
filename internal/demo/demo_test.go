package demo

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestDemo runs the whole demo, small, as `capper demo` does: embedded
// Kafka and Redis, the real worker, and the audit must pass.
func TestDemo(t *testing.T) {
	var out, progress bytes.Buffer
	err := Run(context.Background(), Options{Users: 1500, Intents: 3000, Seed: 3, Out: &out, Progress: &progress})
	if err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, progress.String(), out.String())
	}
	report := out.String()
	for _, want := range []string{"capper demo: 3000 send-intents", "segment", "new", "active", "dormant", "(malformed)",
		"throughput:", "decision latency per batch", "audit: ok, no user above any limit"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if !strings.Contains(progress.String(), "produced 3000 send-intents") {
		t.Errorf("no progress lines:\n%s", progress.String())
	}
}

// TestDemoRefusalCache: on the default blast (skewed: most intents go to
// users already at a cap), the refusal cache answers enough of them that
// Redis sees at most half a call per intent, and the audit still passes.
func TestDemoRefusalCache(t *testing.T) {
	var out bytes.Buffer
	if err := Run(context.Background(), Options{Users: DefaultUsers, Intents: DefaultIntents, Out: &out}); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	m := regexp.MustCompile(`Redis calls per intent ([0-9.]+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no calls per intent in the report:\n%s", out.String())
	}
	if calls, _ := strconv.ParseFloat(m[1], 64); calls > 0.5 || calls <= 0 {
		t.Fatalf("Redis calls per intent %v, want at most 0.5:\n%s", calls, out.String())
	}
	if !strings.Contains(out.String(), "audit: ok") {
		t.Fatalf("report:\n%s", out.String())
	}
}

// TestDemoRealRedis: --redis-addr runs the same pipeline on a real
// redis-server.
func TestDemoRealRedis(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	var out bytes.Buffer
	if err := Run(context.Background(), Options{Users: 1000, Intents: 2000, RedisAddr: r.Addr(), Out: &out}); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "audit: ok") {
		t.Fatalf("report:\n%s", out.String())
	}
	// Every key is under the demo's prefix, never production's "capper".
	keys, err := r.Client().Keys(context.Background(), "*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("the real Redis holds %d keys (%v): the demo did not use it", len(keys), err)
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, "capper-demo:") {
			t.Fatalf("key %q is not under the demo's prefix capper-demo", k)
		}
	}
}

// TestDemoAuditCatchesViolations: the verdict the demo prints comes from the
// deliveries; two sends of a "new" user within a day (max 1) fail it.
func TestDemoAuditCatchesViolations(t *testing.T) {
	cfg, err := demoConfig([]string{"127.0.0.1:9092"}, "127.0.0.1:6379", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rec := func(id, at string) kafka.Message {
		return kafka.Message{Value: []byte(`{"id":"` + id + `","user_id":7,"channel":"push"}`), Headers: []kafka.Header{
			{Key: "capper-decision", Value: []byte("allowed")},
			{Key: "capper-segment", Value: []byte("new")},
			{Key: "capper-decided-at", Value: []byte(at)},
		}}
	}
	var out bytes.Buffer
	at := time.Date(2026, 11, 21, 16, 0, 0, 0, time.UTC)
	ok := []kafka.Message{rec("a", at.Format(time.RFC3339)), rec("b", at.Add(24*time.Hour).Format(time.RFC3339))}
	if err := auditDeliveries(&out, cfg, ok); err != nil {
		t.Fatalf("a clean delivery log failed the audit: %v\n%s", err, out.String())
	}
	out.Reset()
	bad := append(ok, rec("c", at.Add(25*time.Hour).Format(time.RFC3339)))
	err = auditDeliveries(&out, cfg, bad)
	if !errors.Is(err, ErrAudit) {
		t.Fatalf("audit error = %v, want ErrAudit", err)
	}
	if !strings.Contains(out.String(), `user 7 (segment new): 2 sends in the 24h0m0s window`) {
		t.Fatalf("violation not reported:\n%s", out.String())
	}
}
