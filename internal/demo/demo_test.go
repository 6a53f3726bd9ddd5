package demo

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestDemo runs the whole demo, small, as `capper-demo` does: embedded
// Kafka and Redis, the real worker, the blast's table, the sections
// (campaign plans, deferral and quiet hours, refunds, campaign control)
// with the numbers their set-up implies, and every audit check passing.
func TestDemo(t *testing.T) {
	var out, progress bytes.Buffer
	err := Run(context.Background(), Options{Users: 1500, Intents: 3000, Seed: 3, Out: &out, Progress: &progress})
	if err != nil {
		t.Fatalf("demo: %v\n%s\n%s", err, progress.String(), out.String())
	}
	report := out.String()
	for _, want := range []string{"capper demo: 3000 send-intents", "segment", "new", "active", "dormant", "(malformed)",
		"throughput:", "decision latency per batch",
		"\ncampaign plans: shoppers 1500-1573 ", "\ndeferral and quiet hours: subscribers ", "\nrefunds: shoppers ", "\ncampaign control: flash-sale ",
		"  caps           ok: no user above any limit", "  refusals       ok: ", "  quiet hours    ok: ", "  plan holds     ok: ", "  one outcome    ok: 3393 inputs, each with exactly one outcome",
		"  campaign stop  ok: no delivery of flash-sale decided after ", "\naudit: ok, "} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	for _, want := range []string{"produced 3000 send-intents", "flash-sale stopped (record capper-control/0/0)", "the clock moves on to 2026-11-24T18:00:00.000Z"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress lacks %q:\n%s", want, progress.String())
		}
	}
	// The sections' users: 37 a section (1500/40).
	row := func(re string) []int {
		t.Helper()
		m := regexp.MustCompile(re).FindStringSubmatch(report)
		if m == nil {
			t.Fatalf("report lacks %s:\n%s", re, report)
		}
		var n []int
		for _, s := range m[1:] {
			v, _ := strconv.Atoi(s)
			n = append(n, v)
		}
		return n
	}
	// Campaign plans: every planned push delivered, none first come, first
	// served; the newsletter held for the audience (29 users).
	if p := row(`planned sends delivered: (\d+) of (\d+); first come, first served: (\d+) of (\d+) \(capper replay --plans on the same (\d+) intents, in memory; with the plan: (\d+)\)`); p[0] != 23 || p[1] != 23 || p[2] != 0 || p[3] != 23 || p[4] != 74+23 || p[5] != 23 {
		t.Errorf("campaign plans: %v, want 23 of 23 delivered, 0 of 23 first come, first served", p)
	}
	if n := row(`newsletter\s+low\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)`); n[0] != 74 || n[1] != 45 || n[2] != 29 || n[3] != 0 {
		t.Errorf("newsletter: %v, want 74 intents, 45 delivered, 29 held for the plan", n)
	}
	// Deferral: each user's 2nd and 3rd reminder wait; the 2nd comes back
	// delivered, the 3rd expires. Quiet hours: New York's half waits.
	if n := row(`reminders\s+(\d+)\s+(\d+)\s+(\d+)\s+push-gap (\d+)\s+(\d+)\s+(\d+)`); n[0] != 111 || n[1] != 37 || n[2] != 74 || n[3] != 74 || n[4] != 37 || n[5] != 37 {
		t.Errorf("reminders: %v, want 111 intents, 37 at once, 74 waited (push-gap), 37 delivered after, 37 expired", n)
	}
	if n := row(`app-update\s+(\d+)\s+(\d+)\s+(\d+)\s+quiet-hours (\d+)\s+(\d+)\s+(\d+)`); n[0] != 37 || n[1] != 18 || n[2] != 19 || n[3] != 19 || n[4] != 19 || n[5] != 0 {
		t.Errorf("app-update: %v, want 37 intents, 18 at once, 19 waited for quiet hours and delivered after", n)
	}
	// Refunds: every tenth welcome email fails; the tips email gets the
	// freed slots, and only those.
	if n := row(`refunds applied: (\d+) \(capper_refunds_total\{result="applied"\}\); (\d+) of the (\d+) tips delivered went to refunded users`); n[0] != 4 || n[1] != 4 || n[2] != 4 {
		t.Errorf("refunds: %v, want 4 applied, the 4 tips delivered all to refunded users", n)
	}
	// Campaign control: nothing delivered after the stop; what waited in
	// the tiers cancelled; delivered and cancelled are every intent.
	f := row(`flash-sale\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\n`)
	if f[0] != 74 || f[2] != 0 || f[1]+f[3] != 74 || f[4]+f[5] != f[3] || f[5] == 0 {
		t.Errorf("flash-sale: %v, want 74 intents, delivered + cancelled = 74, none after the stop, some cancelled from the tiers", f)
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
