package replay_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/policy"
	"github.com/capper-dev/capper/internal/replay"
)

func side(t *testing.T, name, doc string) replay.Policy {
	t.Helper()
	d, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	r, ps := d.Rules()
	if err := ps.Err(); err != nil {
		t.Fatal(err)
	}
	return replay.Policy{Name: name, Rules: r, Decoder: dispatch.DecoderOptions{Channels: d.Channels, Categories: d.Categories,
		DefaultCategory: d.DefaultCategory, MaxBytes: 64 << 10}}
}

// jsonlSource is a saved intents file of lines, opened.
func jsonlSource(t *testing.T, lines []string) replay.Source {
	t.Helper()
	file := filepath.Join(t.TempDir(), "intents.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := replay.Open(context.Background(), file, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	return src
}

// TestReportFormats: a small replay, baseline max 2 a day and candidate max
// 1; the table, JSON and CSV say the same figures (user 1: 3 intents, 2
// then 1 allowed; user 2: one intent, allowed by both).
func TestReportFormats(t *testing.T) {
	lines := []string{
		`{"id":"a","user_id":1,"campaign_id":"c1","channel":"push","created_at":"2026-11-18T10:00:00Z"}`,
		`{"id":"b","user_id":1,"campaign_id":"c1","channel":"push","created_at":"2026-11-18T10:01:00Z"}`,
		`{"id":"c","user_id":1,"campaign_id":"c2","channel":"email","created_at":"2026-11-18T10:02:00Z"}`,
		`{"id":"d","user_id":2,"campaign_id":"c2","channel":"push","created_at":"2026-11-18T10:03:00Z"}`,
	}
	src := jsonlSource(t, lines)
	base := side(t, "base.yaml", "default_policy:\n  limits: [{name: daily, window: 24h, max: 2}]\n")
	rep, err := replay.Run(context.Background(), src, replay.Options{
		Baseline: &base, Candidate: side(t, "cand.yaml", "default_policy:\n  limits: [{name: daily, window: 24h, max: 1}]\n"),
		IdempotencyWindow: 24 * time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	b, c := rep.Sides[0], rep.Sides[1]
	if b.Allowed != 3 || b.Capped != 1 || c.Allowed != 2 || c.Capped != 2 || c.CappedByLimit["none/daily"] != 2 ||
		c.CappedByChannel["email"] != 1 || c.CappedByCampaign["c1"] != 1 || rep.Change == nil || rep.Change.Fewer != 1 || rep.Change.Same != 1 {
		t.Fatalf("baseline %+v\ncandidate %+v\nchange %+v", b, c, rep.Change)
	}

	var js bytes.Buffer
	if err := rep.Write(&js, "json"); err != nil {
		t.Fatal(err)
	}
	var back replay.Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatalf("json: %v\n%s", err, js.String())
	}
	if back.Sides[1].Capped != 2 || back.Sides[1].CappedByLimit["none/daily"] != 2 || back.Change.Fewer != 1 || back.Records != 4 {
		t.Fatalf("json read back: %+v", back)
	}

	var cs bytes.Buffer
	if err := rep.Write(&cs, "csv"); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&cs).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range rows {
		if len(r) != len(rows[0]) {
			t.Fatalf("csv row %v has %d fields, header %v", r, len(r), rows[0])
		}
		found = found || strings.Join(r, ",") == "total,allowed,3,2"
	}
	if !found {
		t.Fatalf("csv has no total,allowed,3,2 row:\n%v", rows)
	}

	var tab bytes.Buffer
	if err := rep.Write(&tab, "table"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tab.String(), "1 users would get fewer sends") {
		t.Fatalf("table:\n%s", tab.String())
	}
	if err := rep.Write(&tab, "xml"); err == nil {
		t.Fatal("an unknown format was accepted")
	}
}

// TestReplayDefers: a candidate that defers (on_cap: defer, max 90m, and
// quiet hours for sms) against the same caps suppressed. Deferred intents
// are decided again when due, before later records: allowed when the
// slot frees, deferred again, expired past max_defer, or still waiting when
// the records end. Every intent ends counted once.
func TestReplayDefers(t *testing.T) {
	at := func(day int, hm string) string { return fmt.Sprintf("2026-11-%02dT%s:00Z", day, hm) }
	intents := []struct{ id, user, ch, at string }{
		{"a", "1", "push", at(18, "10:00")},
		{"m1", "7", "push", at(18, "10:00")},
		{"b", "1", "push", at(18, "10:10")}, // deferred to 11:00:01, then allowed
		{"c", "1", "push", at(18, "10:20")}, // deferred to 11:00:01, capped by b: past 90m, expired
		{"m2", "7", "push", at(18, "10:30")},
		{"m3", "7", "push", at(18, "10:40")}, // deferred, again to 12:00:02 (80m), then allowed
		{"d", "3", "push", at(18, "11:30")},
		{"e", "1", "push", at(18, "12:10")},
		{"q", "2", "sms", at(18, "23:00")}, // quiet hours until 08:00 and jitter: waiting at the end
		{"z", "8", "push", at(19, "07:00")},
		{"y", "8", "push", at(19, "07:30")}, // deferred to 08:00:01: waiting at the end
	}
	var lines []string
	for _, in := range intents {
		lines = append(lines, fmt.Sprintf(`{"id":%q,"user_id":%s,"campaign_id":"c","channel":%q,"created_at":%q}`, in.id, in.user, in.ch, in.at))
	}
	src := jsonlSource(t, lines)
	base := side(t, "base.yaml", "default_policy:\n  limits: [{name: hourly, window: 1h, max: 1}]\n")
	cand := side(t, "cand.yaml", `default_policy:
  on_cap: defer
  max_defer: 90m
  quiet_hours: {from: "22:00", to: "08:00", channels: [sms]}
  limits: [{name: hourly, window: 1h, max: 1}]
`)
	first := map[string]capping.Outcome{}
	rep, err := replay.Run(context.Background(), src, replay.Options{Baseline: &base, Candidate: cand, IdempotencyWindow: 24 * time.Hour,
		Observe: func(rec *replay.Record, ds []replay.Outcome) {
			var v struct{ ID string }
			if err := json.Unmarshal(rec.Value, &v); err != nil {
				t.Fatal(err)
			}
			first[v.ID] = ds[1].Decision.Outcome
		}})
	if err != nil {
		t.Fatal(err)
	}
	b, c := rep.Sides[0], rep.Sides[1]
	if b.Allowed != 6 || b.Capped != 5 || b.Deferred != 0 || b.Waiting != 0 {
		t.Fatalf("baseline %+v", b)
	}
	if c.Intents != 11 || c.Allowed != 8 || c.Capped != 1 || c.Deferred != 6 || c.Hops != 1 || c.DeferExpired != 1 || c.Waiting != 2 ||
		c.CappedByLimit["none/hourly"] != 1 {
		t.Fatalf("candidate %+v", c)
	}
	if c.Allowed+c.Capped+c.Duplicate+c.Exempt+c.Invalid+c.Waiting != c.Intents {
		t.Fatalf("candidate: outcomes do not add up to the intents: %+v", c)
	}
	for id, want := range map[string]capping.Outcome{"a": capping.Allowed, "b": capping.Deferred, "c": capping.Deferred, "q": capping.Deferred, "y": capping.Deferred, "e": capping.Allowed} {
		if first[id] != want {
			t.Errorf("intent %s first decided %s, want %s", id, first[id], want)
		}
	}
	// Users: 1 got a, b and e; 7 got m1, m2 and m3; 2 nothing yet.
	if rep.Change == nil || rep.Change.More != 2 || rep.Change.Fewer != 1 {
		t.Fatalf("change %+v (baseline per user %v, candidate %v)", rep.Change, b.PerUser, c.PerUser)
	}
	var tab bytes.Buffer
	if err := rep.Write(&tab, "table"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"deferred", "defer expired", "waiting at end"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table has no %q row:\n%s", want, tab.String())
		}
	}
}
