package app_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/policy"
)

// Policies of TestPolicySwitchesWithoutRestart: one scope (every send), so
// the counts of the first carry over to the second. No segment has a policy
// of its own: the snapshot's segments get default_policy.
const (
	loosePolicy  = "default_policy:\n  limits:\n    - {name: month, window: 31d, max: 100}\n"
	strictPolicy = "default_policy:\n  limits:\n    - {name: month-strict, window: 31d, max: 8}\n"
	brokenPolicy = "default_policy:\n  limits:\n    - {name: month, window: 31d}\n" // no max
)

// policyIntents are n intents for each of users, ids unique per wave.
func policyIntents(wave string, users, n int) []kafka.Message {
	var msgs []kafka.Message
	for i := range n {
		for u := range users {
			msgs = append(msgs, kafka.Message{Key: fmt.Appendf(nil, "%d", u),
				Value: fmt.Appendf(nil, `{"id":"%s-%d-%d","user_id":%d,"campaign_id":"c","channel":"push"}`, wave, u, i, u)})
		}
	}
	return msgs
}

// fileSourceConfig is the e2e worker config with its policy read from file
// (polled every 50ms) instead of the config.
func (e *e2e) fileSourceConfig(file string) *config.Config {
	e.t.Helper()
	cfg := e.config()
	cfg.Capping.Document = config.Default().Capping.Document
	cfg.Capping.InlinePolicy, cfg.Deprecations = nil, nil
	cfg.Policy.Source = "file://" + file
	cfg.Policy.PollInterval = config.Duration(50 * time.Millisecond)
	if err := cfg.Validate(); err != nil {
		e.t.Fatal(err)
	}
	return cfg
}

// TestPolicySwitchesWithoutRestart: a running worker reads its policy from a
// file (as a Kubernetes ConfigMap mounts it) and follows it. A policy with a
// problem is refused and counted, and the one in use keeps deciding; a
// valid new one decides from the next batch on, with the counts the old one
// made (same scope). Every input has exactly one outcome, each names the
// policy that decided it, and /readyz and capper_policy_info show the
// version in use.
func TestPolicySwitchesWithoutRestart(t *testing.T) {
	e := newE2E(t, "single")
	e.publish(200, 3)
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.yaml")
	write := func(s string) string {
		t.Helper()
		// As kubelet does: a new file renamed over the old one.
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
		return policy.ContentHash([]byte(s))
	}
	loose := write(loosePolicy)
	cfg := e.fileSourceConfig(file)
	w := e.start("w1", cfg)
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not after 20s", what)
			}
		}
	}
	if v := metric(t, w, "capper_policy_info", "version", loose); v != 1 {
		t.Fatalf("capper_policy_info{version=%s} = %v", loose, v)
	}
	// The snapshot's segments have no policy: their users get
	// default_policy, and the metric says how many.
	if v := metric(t, w, "capper_segment_default_policy_users", "segment", "active"); v == 0 {
		t.Fatalf("capper_segment_default_policy_users{segment=active} = %v", v)
	}

	// 1. Loose: 7 per user, all allowed.
	e.produce(policyIntents("a", 40, 7))
	e.waitDrained(60*time.Second, w)

	// 2. A policy with a problem is refused; the loose one keeps deciding.
	write(brokenPolicy)
	waitFor("broken policy counted", func() bool { return metric(t, w, "capper_policy_load_failures_total") >= 1 })
	if !strings.Contains(w.log.String(), "policy refused") || !strings.Contains(w.log.String(), "max: is required") {
		t.Fatalf("the refusal is not logged with its problem:\n%s", tail(w.log.String(), 3000))
	}
	if _, body := w.get("/readyz"); !strings.Contains(body, "policy "+loose) {
		t.Fatalf("/readyz: %q, want the loose policy %s", body, loose)
	}

	// 3. Strict (max 8 in the same scope): each user has 7 sends, so one
	// more is allowed and the next capped.
	strict := write(strictPolicy)
	waitFor("strict policy in use", func() bool { return metric(t, w, "capper_policy_info", "version", strict) == 1 })
	if _, body := w.get("/readyz"); !strings.Contains(body, "policy "+strict) {
		t.Fatalf("/readyz: %q, want the strict policy %s", body, strict)
	}
	e.produce(policyIntents("b", 40, 2))
	o := e.waitDrained(60*time.Second, w)
	e.verifyOutcomes(o, false)
	for _, m := range o.dlq {
		t.Fatalf("dead-lettered: %s: %s", m.Value, header(m, "capper-error"))
	}

	byPolicy := map[string]map[string]int{} // policy -> decision -> count
	for _, m := range append(append([]kafka.Message{}, o.deliveries...), o.suppressed...) {
		p, d := header(m, "capper-policy"), header(m, "capper-decision")
		if byPolicy[p] == nil {
			byPolicy[p] = map[string]int{}
		}
		byPolicy[p][d]++
		wave := strings.SplitN(strings.TrimPrefix(string(m.Value), `{"id":"`), "-", 2)[0]
		if want := map[string]string{"a": loose, "b": strict}[wave]; p != want {
			t.Fatalf("intent %s decided by policy %q, want %q", m.Value, p, want)
		}
		if d == "capped" && header(m, "capper-limit") != "month-strict" {
			t.Fatalf("capped by %q: %s", header(m, "capper-limit"), m.Value)
		}
	}
	if got := byPolicy[loose]["allowed"]; got != 40*7 || len(byPolicy[loose]) != 1 {
		t.Errorf("loose policy: %v, want 280 allowed", byPolicy[loose])
	}
	if got := byPolicy[strict]; got["allowed"] != 40 || got["capped"] != 40 {
		t.Errorf("strict policy: %v, want 40 allowed and 40 capped", got)
	}
	if v := metric(t, w, "capper_policy_loads_total"); v != 2 {
		t.Errorf("capper_policy_loads_total = %v, want 2", v)
	}
	if err := w.stop(t); err != nil {
		t.Fatalf("worker stopped with %v", err)
	}
}

// TestPolicyNamesChannelsAndCategories: the channels and categories intents
// may name are the policy's, and follow it when a new version is swapped
// in. (They were once taken from the config's defaults: a category only the
// policy named was dead-lettered, and a channel the policy did not name
// stalled the worker in endless retries.)
func TestPolicyNamesChannelsAndCategories(t *testing.T) {
	e := newE2E(t, "single")
	e.publish(50, 3)
	const v1 = "channels: [email, push]\ncategories: [marketing, lifecycle, transactional]\nexempt_categories: [transactional]\n" +
		"default_policy:\n  limits:\n    - {name: month, window: 31d, max: 100}\n"
	const v2 = "channels: [email, push, sms]\ncategories: [marketing, lifecycle, transactional]\nexempt_categories: [transactional]\n" +
		"default_policy:\n  limits:\n    - {name: month, window: 31d, max: 100}\n"
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(v1), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := e.fileSourceConfig(file)
	w := e.start("w1", cfg)
	intent := func(id string, user int, fields string) kafka.Message {
		return kafka.Message{Key: fmt.Appendf(nil, "%d", user),
			Value: fmt.Appendf(nil, `{"id":"%s","user_id":%d,"campaign_id":"c",%s}`, id, user, fields)}
	}
	e.produce([]kafka.Message{
		intent("lifecycle", 1, `"channel":"push","category":"lifecycle"`),
		intent("sms-1", 2, `"channel":"sms"`),
		intent("inapp", 3, `"channel":"inapp"`),
		intent("email", 4, `"channel":"email"`),
	})
	o := e.waitDrained(60*time.Second, w)
	got := func(o outputs) map[string]string { // intent id -> topic (or the DLQ's error)
		m := map[string]string{}
		for _, x := range []struct {
			name string
			msgs []kafka.Message
		}{{"deliveries", o.deliveries}, {"suppressed", o.suppressed}, {"dlq", o.dlq}} {
			for _, r := range x.msgs {
				id := strings.SplitN(strings.TrimPrefix(string(r.Value), `{"id":"`), `"`, 2)[0]
				m[id] = x.name
				if x.name == "dlq" {
					m[id] = header(r, "capper-error")
				}
			}
		}
		return m
	}
	want := map[string]string{
		"lifecycle": "deliveries",
		"sms-1":     `channel: "sms" is not a configured channel (email, push)`,
		"inapp":     `channel: "inapp" is not a configured channel (email, push)`,
		"email":     "deliveries",
	}
	if g := got(o); !maps.Equal(g, want) {
		t.Fatalf("outcomes under the first policy:\n got %v\nwant %v", g, want)
	}

	// The second version adds sms: from the swap on, sms intents are
	// decided (and inapp still is not a channel).
	if err := os.WriteFile(file, []byte(v2), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool { return metric(t, w, "capper_policy_info", "version", policy.ContentHash([]byte(v2))) == 1 })
	e.produce([]kafka.Message{intent("sms-2", 2, `"channel":"sms"`), intent("inapp-2", 3, `"channel":"inapp"`)})
	o = e.waitDrained(60*time.Second, w)
	want["sms-2"] = "deliveries"
	want["inapp-2"] = `channel: "inapp" is not a configured channel (email, push, sms)`
	if g := got(o); !maps.Equal(g, want) {
		t.Fatalf("outcomes after the swap:\n got %v\nwant %v", g, want)
	}
	e.verifyOutcomes(o, false)
	if v := metric(t, w, "capper_redis_retries_total"); v != 0 {
		t.Fatalf("capper_redis_retries_total = %v", v)
	}
	if err := w.stop(t); err != nil {
		t.Fatalf("worker stopped with %v", err)
	}
}
