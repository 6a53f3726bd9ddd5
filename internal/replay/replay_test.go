package replay_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	file := filepath.Join(t.TempDir(), "intents.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := replay.Open(context.Background(), file, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
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
