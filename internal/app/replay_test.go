package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/configs"
	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/demo"
	"github.com/capper-dev/capper/internal/replay"
)

// demoStart is the demo's clock in TestReplayDemo: a Wednesday afternoon in
// UTC, hours from any midnight of the demo users' time zones (UTC,
// Singapore, New York, Berlin, Kiritimati) and from a week's or month's
// start, so that the seconds between the blast's created_at (the replay's
// decision time) and the worker's clock cannot change an outcome.
var demoStart = time.Date(2026, 11, 18, 13, 17, 0, 0, time.UTC)

// TestReplayDemo: the demo's blast, saved, replayed with the demo's policy
// (configs/policy.yaml) and snapshot, gives exactly the demo's live counts;
// a stricter candidate allows fewer and leaves users with fewer sends.
func TestReplayDemo(t *testing.T) {
	dir := t.TempDir()
	intents, snap := filepath.Join(dir, "intents.jsonl.gz"), filepath.Join(dir, "snapshot")
	t0 := time.Now()
	var live demo.Summary
	err := demo.Run(context.Background(), demo.Options{Users: 3000, Intents: 8000, Seed: 5, SaveIntents: intents, SaveSnapshot: snap,
		Summary: &live, Now: func() time.Time { return demoStart.Add(time.Since(t0)) }})
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, configs.ExamplePolicy(), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := app.Replay(context.Background(), app.ReplayOptions{Policy: policy, Snapshot: snap, From: intents}, nil)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	got := rep.Sides[0]
	t.Logf("live %+v; replay allowed %d capped %d duplicate %d exempt %d invalid %d", live, got.Allowed, got.Capped, got.Duplicate, got.Exempt, got.Invalid)
	if got.Intents != int64(live.Intents) || got.Allowed != int64(live.Allowed) || got.Capped != int64(live.Capped) ||
		got.Duplicate != int64(live.Duplicates) || got.Exempt != int64(live.Exempt) || got.Invalid != int64(live.DeadLettered) {
		t.Fatalf("replay differs from the live demo")
	}
	if live.Allowed == 0 || live.Capped == 0 || live.DeadLettered == 0 {
		t.Fatalf("the demo did not exercise every outcome: %+v", live)
	}

	// Every maximum lowered by one (never below 1... but 0 is allowed too).
	strict := filepath.Join(dir, "strict.yaml")
	lowered := strings.NewReplacer("max: 10}", "max: 5}", "max: 3}", "max: 2}", "max: 2}", "max: 1}", "max: 4}", "max: 2}",
		"max: 3, reserve: {slots: 1, below: high}", "max: 2, reserve: {slots: 1, below: high}").Replace(string(configs.ExamplePolicy()))
	if err := os.WriteFile(strict, []byte(lowered), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err = app.Replay(context.Background(), app.ReplayOptions{Policy: strict, Baseline: policy, Snapshot: snap, From: intents}, nil)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	base, cand := rep.Sides[0], rep.Sides[1]
	if base.Allowed != int64(live.Allowed) {
		t.Fatalf("baseline allowed %d, live %d", base.Allowed, live.Allowed)
	}
	if cand.Allowed >= base.Allowed || rep.Change.Fewer == 0 || rep.Change.More != 0 {
		t.Fatalf("stricter candidate: allowed %d (baseline %d), change %+v", cand.Allowed, base.Allowed, rep.Change)
	}
	var out strings.Builder
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
}

// TestReplayBadInput: an intent that does not decode is counted as invalid
// and listed with its line number; an unreadable policy names the flag and
// the file; a malformed kafka source names the flag.
func TestReplayBadInput(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, configs.ExamplePolicy(), 0o644); err != nil {
		t.Fatal(err)
	}
	lines := []string{
		`{"id":"a","user_id":1,"campaign_id":"c","channel":"push","created_at":"2026-11-18T10:00:00Z"}`,
		`{"id":"b","user_id":1,"campaign_id":"c","channel":"fax","created_at":"2026-11-18T10:00:01Z"}`,
		`not json`,
		`{"id":"c","user_id":2,"campaign_id":"c","channel":"push"}`,
		`{"id":"a","user_id":1,"campaign_id":"c","channel":"push","created_at":"2026-11-18T10:00:02Z"}`,
	}
	intents := filepath.Join(dir, "intents.jsonl")
	if err := os.WriteFile(intents, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err := app.Replay(context.Background(), app.ReplayOptions{Policy: policy, From: intents}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := rep.Sides[0]
	if s.Intents != 5 || s.Allowed != 1 || s.Duplicate != 1 || s.Invalid != 3 {
		t.Fatalf("counts %+v", s)
	}
	want := []replay.InvalidRecord{
		{Pos: "line 2", Reason: `channel: "fax" is not a configured channel (email, push, sms, inapp)`},
		{Pos: "line 3", Reason: "value: not valid JSON: invalid character 'o' in literal null (expecting 'u') (offset 1)"},
		{Pos: "line 4", Reason: "created_at: is required to replay a saved intent (its decision time)"},
	}
	if len(rep.Invalid) != len(want) {
		t.Fatalf("invalid records %+v", rep.Invalid)
	}
	for i := range want {
		if rep.Invalid[i].Pos != want[i].Pos || !strings.HasPrefix(rep.Invalid[i].Reason, strings.SplitN(want[i].Reason, ":", 2)[0]) {
			t.Errorf("invalid record %d: %+v, want %+v", i, rep.Invalid[i], want[i])
		}
	}
	var out strings.Builder
	_ = rep.WriteTable(&out)
	if !strings.Contains(out.String(), "line 3: value: not valid JSON") {
		t.Errorf("table does not list line 3:\n%s", out.String())
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("segments:\n  - name: x\n    limits: [{name: d, window: 1d, max: }]\n  oops\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o    app.ReplayOptions
		want []string
	}{
		{app.ReplayOptions{Policy: bad, From: intents}, []string{"--policy", bad}},
		{app.ReplayOptions{Policy: filepath.Join(dir, "missing.yaml"), From: intents}, []string{"--policy", "missing.yaml"}},
		{app.ReplayOptions{Policy: policy, Baseline: bad, From: intents}, []string{"--baseline", bad}},
		{app.ReplayOptions{Policy: policy, From: filepath.Join(dir, "none.jsonl")}, []string{"--from", "none.jsonl"}},
		{app.ReplayOptions{Policy: policy, From: "kafka://send-intents@2026-11-01..x"}, []string{"--from", "TO"}},
		{app.ReplayOptions{Policy: policy, From: "kafka://send-intents@2026-11-01..2026-11-02"}, []string{"--brokers"}},
		{app.ReplayOptions{Policy: policy, From: intents, Snapshot: filepath.Join(dir, "nosnap")}, []string{"--snapshot", "nosnap"}},
	} {
		_, err := app.Replay(context.Background(), c.o, nil)
		if err == nil {
			t.Errorf("%+v: no error", c.o)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not name %q", err, w)
			}
		}
	}
}

// manualClock is a worker's decision clock the test sets: each wave of
// intents is produced with the clock's time as its record timestamp and
// decided before the clock moves on, so the worker decides every intent at
// exactly its record's timestamp, which is what replay decides it at (no
// wave straddles a window's edge: each is decided at one instant).
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// TestReplayKafka: a real worker (real Redis, kfake) decides waves of
// intents; replaying the input topic with kafka:// decides every intent
// alike (allowed or capped, and the limit), with the same counts.
func TestReplayKafka(t *testing.T) {
	e := newE2E(t, "single")
	clock := &manualClock{t: time.Date(2026, 11, 21, 16, 0, 0, 0, time.UTC)}
	e.now = clock.Now
	e.publish(400, 1)
	cfg := e.config()
	w := e.start("w1", cfg)
	msgs := demo.Blast(blast(400, 2400, 11))
	start := clock.Now()
	// Waves 40 s to 3 min apart: the e2e policy's 1m, 5m and 10m windows
	// roll over between them.
	at := start
	for i := 0; i < len(msgs); i += 200 {
		wave := msgs[i:min(i+200, len(msgs))]
		for j := range wave {
			wave[j].Time = at
		}
		clock.set(at)
		e.produce(wave)
		e.waitDrained(60*time.Second, w)
		at = at.Add(time.Duration(40+(i/200)*37%140) * time.Second)
	}
	o := e.read()
	if err := w.stop(t); err != nil {
		t.Fatalf("worker: %v", err)
	}
	live := map[string]string{} // capper-source -> decision (and limit)
	for _, x := range []struct {
		msgs []kafka.Message
	}{{o.deliveries}, {o.suppressed}, {o.dlq}} {
		for _, m := range x.msgs {
			d := header(m, "capper-decision")
			if header(m, "capper-duplicate") == "true" {
				d = "duplicate"
			}
			if d == "" {
				d = "invalid"
			}
			if l := header(m, "capper-limit"); l != "" {
				d += " " + l
			}
			live[header(m, "capper-source")] = d
		}
	}
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(e2ePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	replayed := map[string]string{}
	src := "kafka://" + tIn + "@" + start.Add(-time.Second).Format(time.RFC3339) + ".." + at.Format(time.RFC3339)
	rep, err := app.Replay(context.Background(), app.ReplayOptions{Policy: policy, Store: e.store, Snapshot: "s3://" + e2eS3 + "/prod",
		From: src, Brokers: e.kafka.Addrs,
		Observe: func(rec *replay.Record, ds []replay.Outcome) {
			d := ds[0].Decision.Outcome.String()
			if ds[0].Decision.Limit != "" {
				d += " " + ds[0].Decision.Limit
			}
			replayed[rec.Pos] = d
		}}, nil)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if len(replayed) != len(msgs) || len(live) != len(msgs) {
		t.Fatalf("%d intents produced, %d decided live, %d replayed", len(msgs), len(live), len(replayed))
	}
	counts := map[string]int{}
	for src, want := range live {
		if got := replayed[src]; got != want {
			t.Errorf("%s: live %q, replay %q", src, want, got)
		}
		counts[strings.Fields(want)[0]]++
	}
	s := rep.Sides[0]
	if s.Allowed != int64(counts["allowed"]) || s.Capped != int64(counts["capped"]) || s.Duplicate != int64(counts["duplicate"]) ||
		s.Exempt != int64(counts["exempt"]) || s.Invalid != int64(counts["invalid"]) {
		t.Errorf("replay counts %+v, live %v", s, counts)
	}
	if counts["allowed"] == 0 || counts["capped"] == 0 || counts["duplicate"] == 0 {
		t.Fatalf("the stream did not exercise every outcome: %v", counts)
	}
	t.Logf("live %v; replay of %s agrees on all %d intents", counts, src, len(live))
}

// TestReplayBudgets: the example policy with two budgets (push through
// fcm at 10 a second, burst 3, urgent and bulk lanes; sms at 5 a second)
// against the example policy as it is, on two minutes of generated
// traffic. The baseline paces nothing; the candidate releases each
// budget's intents at most rate + burst in any second, an urgent intent
// never after a bulk one that it waited beside, each lane in arrival
// order, and decides each at its release; none is delivered after its
// send-by; exempt intents never wait; every intent ends counted once.
func TestReplayBudgets(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(base, configs.ExamplePolicy(), 0o644); err != nil {
		t.Fatal(err)
	}
	cand := filepath.Join(dir, "paced.yaml")
	budgets := `budgets:
  - name: push-fcm
    rate: 10
    burst: 3
    channels: [push]
    routes: [fcm]
    lanes:
      - {name: urgent, min_priority: high}
      - {name: bulk}
  - {name: sms, rate: 5, channels: [sms]}
`
	doc := strings.Replace(string(configs.ExamplePolicy()), "budgets: []\n", budgets, 1)
	if doc == string(configs.ExamplePolicy()) {
		t.Fatal("the example policy has no `budgets: []` line to replace")
	}
	if err := os.WriteFile(cand, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	start := time.Date(2026, 11, 18, 13, 17, 0, 0, time.UTC)
	sendBy := map[string]time.Time{}
	var lines []string
	at := start
	for i := range 4000 {
		at = at.Add(time.Duration(rng.IntN(60)) * time.Millisecond)
		id := fmt.Sprintf("i%d", i)
		ch := []string{"push", "push", "push", "sms", "email"}[rng.IntN(5)]
		extra := ""
		if ch == "push" {
			extra += fmt.Sprintf(`,"route":%q`, []string{"fcm", "fcm", "apns"}[rng.IntN(3)])
		}
		extra += fmt.Sprintf(`,"priority":%q`, []string{"low", "normal", "normal", "high"}[rng.IntN(4)])
		if rng.IntN(20) == 0 {
			extra += `,"category":"transactional"`
		}
		if rng.IntN(8) == 0 {
			by := at.Add(time.Duration(1+rng.IntN(60)) * time.Second)
			sendBy[id] = by
			extra += fmt.Sprintf(`,"send_by":%q`, by.Format(time.RFC3339Nano))
		}
		lines = append(lines, fmt.Sprintf(`{"id":%q,"user_id":%d,"campaign_id":"c%d","channel":%q,"created_at":%q%s}`,
			id, 1+rng.IntN(3000), rng.IntN(4), ch, at.Format(time.RFC3339Nano), extra))
	}
	intents := filepath.Join(dir, "intents.jsonl")
	if err := os.WriteFile(intents, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	type release struct {
		*replay.Release
		n int // order of release
	}
	var rels []release
	held := map[string]string{} // intent -> budget/lane it waited in
	exempt := 0
	rep, err := app.Replay(context.Background(), app.ReplayOptions{Policy: cand, Baseline: base, From: intents,
		Observe: func(rec *replay.Record, ds []replay.Outcome) {
			var v struct{ ID, Category string }
			_ = json.Unmarshal(rec.Value, &v)
			if ds[0].Held || ds[0].Lane != "" {
				t.Errorf("%s: the baseline has no budgets: %+v", v.ID, ds[0])
			}
			switch o := ds[1]; {
			case v.Category == "transactional" && (o.Held || o.Decision.Outcome == capping.Deferred):
				t.Errorf("%s: an exempt intent waited: %+v", v.ID, o)
			case v.Category == "transactional":
				exempt++
			case o.Held:
				held[v.ID] = o.Lane
			case o.Lane != "" && (o.Decision.Outcome != capping.Cancelled || o.Decision.Reason != capping.ReasonExpired):
				t.Errorf("%s: paced but not held: %+v", v.ID, o)
			}
		},
		Released: func(side string, r *replay.Release) {
			if side != "candidate" {
				t.Errorf("side %s released %s", side, r.IntentID)
			}
			c := *r
			rels = append(rels, release{&c, len(rels)})
		}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, c := rep.Sides[0], rep.Sides[1]
	if len(b.Budgets) != 0 || len(c.Budgets) != 2 || exempt == 0 {
		t.Fatalf("budgets: baseline %d, candidate %d; %d exempt intents", len(b.Budgets), len(c.Budgets), exempt)
	}
	for _, s := range rep.Sides {
		if s.Allowed+s.Capped+s.Duplicate+s.Exempt+s.Invalid+s.Cancelled+s.Waiting != s.Intents || s.Intents != 4000 {
			t.Errorf("%s: the outcomes do not add up to the intents: %+v", s.Side, s)
		}
	}
	if len(rels) != len(held) {
		t.Errorf("%d intents held, %d released", len(held), len(rels))
	}
	rates := map[string]float64{"push-fcm": 10, "sms": 5}
	bursts := map[string]int{"push-fcm": 3, "sms": 1}
	last := map[string]time.Time{} // per lane: the last release's held-since
	var tokens = map[string][]time.Time{}
	for _, r := range rels {
		lane := r.Budget + "/" + r.Lane
		if held[r.IntentID] != lane {
			t.Errorf("%s released from %s, held in %q", r.IntentID, lane, held[r.IntentID])
		}
		if !r.Decision.At.Equal(r.ReleasedAt) || r.ReleasedAt.Before(r.HeldSince) {
			t.Errorf("%s: held %s, released %s, decided %s", r.IntentID, r.HeldSince, r.ReleasedAt, r.Decision.At)
		}
		if r.HeldSince.Before(last[lane]) {
			t.Errorf("%s: lane %s released it (held %s) after one held at %s", r.IntentID, lane, r.HeldSince, last[lane])
		}
		last[lane] = r.HeldSince
		if by, ok := sendBy[r.IntentID]; ok && r.ReleasedAt.After(by) && r.Decision.Outcome != capping.Cancelled {
			t.Errorf("%s: send-by %s, released %s as %s", r.IntentID, by, r.ReleasedAt, r.Decision.Outcome)
		}
		if r.Token {
			tokens[r.Budget] = append(tokens[r.Budget], r.ReleasedAt)
		}
		if r.Lane != "bulk" {
			continue
		}
		// No urgent intent waited while this bulk one was released.
		for _, u := range rels[r.n+1:] {
			if u.Budget == r.Budget && u.Lane == "urgent" && u.HeldSince.Before(r.ReleasedAt) {
				t.Fatalf("bulk %s released at %s before urgent %s, waiting since %s", r.IntentID, r.ReleasedAt, u.IntentID, u.HeldSince)
			}
		}
	}
	for budget, ts := range tokens {
		for i, a := range ts {
			n := 0
			for _, x := range ts[i:] {
				if x.Sub(a) < time.Second {
					n++
				}
			}
			if max := int(rates[budget]) + bursts[budget]; n > max {
				t.Fatalf("budget %s: %d releases in the second from %s (rate + burst %d)", budget, n, a, max)
			}
		}
	}
	for _, bs := range c.Budgets {
		if bs.Paced == 0 || bs.LongestWaitMs == 0 || bs.DrainEnd.Before(rep.Last) || bs.ExpiredAtArrival == 0 {
			t.Errorf("budget %+v", bs)
		}
	}
	var out strings.Builder
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"budget push-fcm", "budget sms", "lane urgent: longest wait", "drain end", "cancelled"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table has no %q", want)
		}
	}
	t.Logf("\n%s", out.String())
}
