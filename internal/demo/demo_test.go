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
// (campaign plans, deferral and quiet hours, refunds, campaign control,
// send pacing and its throttle feedback, users' own limits) with the numbers their set-up implies,
// and every audit check passing.
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
		"\nsend pacing: members 1722-4721 get their pushes through FCM", "\nusers' own limits: readers 4722-4758 ",
		"  caps           ok: no user above any limit", "  refusals       ok: ", "  quiet hours    ok: ", "  plan holds     ok: ",
		// The blast's 3000 and its 541 of the sections, the pacing section's
		// 3300, its throttle part's 3000.
		"  one outcome    ok: 9841 inputs, each with exactly one outcome",
		"  campaign stop  ok: no delivery of flash-sale decided after ", ", nor of weekly-digest after ",
		"  budget rate    ok: no budget above its rate: push-fcm at most ", "  paced release  ok: ",
		"  throttling     ok: push-fcm's effective rate followed FCM down to ", "\nthrottle feedback: then app-news, a push to each member",
		"  snooze         ok: no delivery to the 18 snoozed users decided while their snooze was in force",
		"  user tier      ok: no user above their tier: 9 users on a tier, their 9 sends since checked", "\naudit: ok, "} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	for _, want := range []string{"produced 3000 send-intents", "flash-sale stopped (record capper-control/0/0)",
		"weekly-digest stopped (record capper-control/0/1)", "the clock moves on to 2026-11-24T18:00:00.000Z"} {
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
	checkPacing(t, report)
	// Users' own limits: 9 readers a group (37/4; the last 10). Snoozed for
	// a week: nothing delivered after the snooze, the pushes that waited in
	// the delay tiers for the night cancelled when due; snoozed until 13:15:
	// what came during the snooze deferred to its end, everything delivered;
	// the tier fewer: one each; no limits: all four.
	const cols = `\s+(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\n`
	long := row(`snoozed for 7 days` + strings.ReplaceAll(cols, `(\S+)`, `(\d+)`))
	if long[0] != 9 || long[1] != 36 || long[3] != 0 || long[5]+long[2] != 36 || long[7] != 18 || long[6]+long[7] != long[5] || long[8] != 0 {
		t.Errorf("snoozed for 7 days: %v, want 9 users, 36 intents, none delivered while snoozed, the rest cancelled, 18 of them from the delay tiers", long)
	}
	short := row(`snoozed until 13:15` + strings.ReplaceAll(cols, `(\S+)`, `(\d+)`))
	if short[0] != 9 || short[2] != 36 || short[3] != 0 || short[5] != 0 {
		t.Errorf("snoozed until 13:15: %v, want 9 users, all 36 delivered, none while snoozed", short)
	}
	fewer := row(`tier fewer` + strings.ReplaceAll(cols, `(\S+)`, `-`))
	if fewer[0] != 9 || fewer[2] != 9 || fewer[7] != 27 {
		t.Errorf("tier fewer: %v, want 9 users, 9 delivered, 27 capped by the tier", fewer)
	}
	plain := row(`\n\s+none` + strings.ReplaceAll(cols, `(\S+)`, `-`))
	if plain[0] != 10 || plain[2] != 40 || plain[7] != 0 {
		t.Errorf("no limits: %v, want 10 users, all 40 delivered", plain)
	}
	if n := row(`tier fewer: at most (\d+) delivered to a user \((\d+) capped by user-tier/fewer/daily\), against (\d+) to a reader without limits of their own`); n[0] != 1 || n[1] != 27 || n[2] != 4 {
		t.Errorf("tier fewer: %v, want at most 1 a user, 27 capped, 4 without limits", n)
	}
}

// checkPacing checks the send pacing section of a report: the same 3000
// members at every size. The digest waits in the bulk lane and is stopped
// with most of it held (each held one cancelled, none delivered after the
// stop); breaking news is all delivered, overtaking the digest; receipts
// are never held; no second of releases above the budget.
func checkPacing(t *testing.T, report string) {
	t.Helper()
	row := func(re string) []float64 {
		t.Helper()
		m := regexp.MustCompile(re).FindStringSubmatch(report)
		if m == nil {
			t.Fatalf("report lacks %s:\n%s", re, report)
		}
		var n []float64
		for _, s := range m[1:] {
			v, _ := strconv.ParseFloat(s, 64)
			n = append(n, v)
		}
		return n
	}
	const num = `(\d+(?:\.\d+)?)`
	// intents, held, delivered, cancelled, longest wait, most in 1 s
	cols := `\s+` + num + `\s+` + num + `\s+` + num + `\s+` + num + `\s+` + num + ` s\s+`
	d := row(`weekly-digest\s+normal\s+bulk` + cols + num)
	// The stop is written once the bulk lane has released
	// paceBreakingAfter+paceStopAfter; those released last may be decided
	// after it took effect (cancelled: a stop reaches what was released and
	// not yet decided), the first paceBreakingAfter were decided long before.
	if d[0] != 3000 || d[1] != 3000 || d[2]+d[3] != 3000 || d[2] < paceBreakingAfter || d[3] < 2000 || d[5] > 222 {
		t.Errorf("weekly-digest: %v, want 3000 intents, all held, at least %d delivered before its stop, most cancelled, at most 222 releases in a second", d, paceBreakingAfter)
	}
	b := row(`breaking-news\s+high\s+urgent` + cols + num)
	if b[0] != 200 || b[1] != 200 || b[2] != 200 || b[3] != 0 || b[4] >= d[4] || b[5] > 222 {
		t.Errorf("breaking-news: %v, want 200 intents, all held and delivered, waiting less than the digest (%v s)", b, d[4])
	}
	r := row(`receipts\s+transactional\s+\(none\)` + cols + `-`)
	if r[0] != 100 || r[1] != 0 || r[2] != 100 || r[3] != 0 || r[4] != 0 {
		t.Errorf("receipts: %v, want 100 intents, none held, all delivered, no wait", r)
	}
	// Strict precedence: the bulk lane waits while the urgent one has
	// pushes (a lease granted just before it asked is still released).
	if o := row(`breaking-news overtook: its 200 pushes were released from \+` + num + ` s to \+` + num + ` s, while the bulk lane, (\d+) digest pushes still held, released (\d+)\n`); o[3] > 50 {
		t.Errorf("the bulk lane released %v while breaking-news was released: it did not overtake", o[3])
	}
	if s := row(`weekly-digest stopped \(capper campaign stop: record capper-control/0/1\), applied by the worker at [0-9:.]+ \(\+[0-9.]+ s\): the (\d+) pushes still held in its lane cancelled, (\d+) delivered after the stop`); s[0] != d[3] || s[1] != 0 {
		t.Errorf("the digest's stop: %v, want all %v cancelled ones cancelled from the lane, none delivered after it", s, d[3])
	}
	if m := row(`the budget: at most (\d+) releases in any one second`); m[0] > 222 || m[0] < 50 {
		t.Errorf("the budget: at most %v releases in a second, want at most 222 (and the budget in use)", m[0])
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
