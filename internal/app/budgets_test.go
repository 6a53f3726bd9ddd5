package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/testenv"
	"github.com/capper-dev/capper/internal/topics"
)

// threeLanes: one budget of 40 a second with three lanes.
const threeLanes = `
default_policy:
  limits:
    - {name: per-minute, window: 1m, max: 5}
budgets:
  - name: push-fcm
    rate: 40
    channels: [push]
    lanes:
      - {name: urgent, min_priority: high}
      - {name: normal, min_priority: normal}
      - {name: bulk}
`

func writePolicy(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBudgets: a lane's waiting is the delay group's lag on its topic
// (past the committed offset; from the start without a commit); lane i
// drains when the lanes up to it are released at the budget's rate; a
// missing lane topic or retry topic is reported, and named with its fix
// by Err; an
// unknown budget names the known ones; budgets without kafka.topics.lanes
// exit 2 naming it.
func TestBudgets(t *testing.T) {
	k := testenv.StartKafka(t, 1, []string{"capper-lanes.push-fcm.urgent", "capper-lanes.push-fcm.urgent.retry", "capper-lanes.push-fcm.bulk"})
	cfg := config.Default()
	cfg.Kafka.Brokers = k.Addrs
	cfg.Kafka.Topics.Lanes = "capper-lanes"
	policy := writePolicy(t, threeLanes)
	msgs := func(n int) []kafka.Message {
		m := make([]kafka.Message, n)
		for i := range m {
			m[i] = kafka.Message{Key: []byte(fmt.Sprint(i)), Value: []byte("{}")}
		}
		return m
	}
	k.Produce(t, "capper-lanes.push-fcm.urgent", msgs(10))
	k.Produce(t, "capper-lanes.push-fcm.bulk", msgs(100))
	c := &kafka.Client{Addr: kafka.TCP(k.Addrs...), Timeout: 10 * time.Second}
	if _, err := c.OffsetCommit(context.Background(), &kafka.OffsetCommitRequest{GroupID: cfg.Kafka.DelayGroup(), GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{"capper-lanes.push-fcm.urgent": {{Partition: 0, Offset: 6}}}}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)

	r, err := app.Budgets(context.Background(), &cfg, app.BudgetsOptions{ConfigPath: "capper.yaml", PolicyFile: policy, Budget: "push-fcm"}, log)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Budgets) != 1 || r.Policy != policy {
		t.Fatalf("report: %+v", r)
	}
	b := r.Budgets[0]
	type lane struct {
		waiting int64
		drain   time.Duration
		missing bool
		retry   bool // its retry topic missing
	}
	want := []lane{{4, 100 * time.Millisecond, false, false}, {0, 100 * time.Millisecond, true, true}, {100, 2600 * time.Millisecond, false, true}}
	for i, l := range b.LaneStates {
		if got := (lane{l.Waiting, l.DrainIn, l.Missing, l.RetryMissing}); got != want[i] {
			t.Errorf("lane %s: %+v, want %+v", l.Name, got, want[i])
		}
	}
	if b.Waiting != 104 || b.DrainIn != 2600*time.Millisecond {
		t.Errorf("budget: %d waiting, drains in %s; want 104 and 2.6s", b.Waiting, b.DrainIn)
	}
	var out bytes.Buffer
	if err := r.WriteShow(&out); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`normal +normal and up +capper-lanes\.push-fcm\.normal +topic missing +-\n`).MatchString(out.String()) ||
		!regexp.MustCompile(`bulk +the rest +capper-lanes\.push-fcm\.bulk +100 \(retry topic missing\) +2\.6s\n`).MatchString(out.String()) {
		t.Errorf("show:\n%s", out.String())
	}
	err = r.Err()
	if err == nil || err.Error() != `3 lane topics missing: capper-lanes.push-fcm.normal (budget "push-fcm" lane "normal"), `+
		`capper-lanes.push-fcm.normal.retry (budget "push-fcm" lane "normal", its retry topic), `+
		`capper-lanes.push-fcm.bulk.retry (budget "push-fcm" lane "bulk", its retry topic); create them: capper topics create --config capper.yaml --policy `+policy {
		t.Fatalf("Err: %v", err)
	}
	out.Reset()
	if err := r.WriteJSON(&out, true); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Budget struct {
			Lanes []struct {
				Exists      bool `json:"exists"`
				RetryExists bool `json:"retry_exists"`
			} `json:"lanes"`
		} `json:"budget"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if l := doc.Budget.Lanes; len(l) != 3 || !l[0].Exists || !l[0].RetryExists || l[1].Exists || l[1].RetryExists || !l[2].Exists || l[2].RetryExists {
		t.Errorf("JSON lanes: %+v, want urgent with its retry topic, normal without either, bulk without its retry topic", l)
	}

	_, err = app.Budgets(context.Background(), &cfg, app.BudgetsOptions{PolicyFile: policy, Budget: "sms"}, log)
	if !errors.Is(err, app.ErrUnknownBudget) || !strings.HasSuffix(err.Error(), "its budgets: push-fcm") {
		t.Fatalf("unknown budget: %v", err)
	}

	cfg.Kafka.Topics.Lanes = ""
	_, err = app.Budgets(context.Background(), &cfg, app.BudgetsOptions{PolicyFile: policy}, log)
	if !errors.Is(err, topics.ErrNoLanes) || cli.Exit("capper", err, &bytes.Buffer{}) != cli.ExitUsage {
		t.Fatalf("no kafka.topics.lanes: %v", err)
	}
}

// TestTopicsPolicyUnread: without kafka.topics.lanes, a policy in force
// that cannot be read leaves the config's topics checked, with a warning;
// with lanes, it is an error that says --policy.
func TestTopicsPolicyUnread(t *testing.T) {
	k := testenv.StartKafka(t, 1, []string{"send-intents", "deliveries", "suppressed", "send-intents-dlq"})
	cfg := config.Default()
	cfg.Kafka.Brokers = k.Addrs
	cfg.Policy.Source = "file://" + filepath.Join(t.TempDir(), "gone.yaml")
	var logged bytes.Buffer
	log, err := cli.NewLogger(&logged, "warn", cli.LogText)
	if err != nil {
		t.Fatal(err)
	}
	r, err := app.CheckTopics(context.Background(), &cfg, app.TopicsOptions{ConfigPath: "capper.yaml"}, log)
	if err != nil || r.Err() != nil {
		t.Fatalf("check: %v %v", err, r.Err())
	}
	if !strings.Contains(logged.String(), "the policy in force was not read") {
		t.Fatalf("no warning:\n%s", logged.String())
	}
	cfg.Kafka.Topics.Lanes = "capper-lanes"
	if _, err := app.CheckTopics(context.Background(), &cfg, app.TopicsOptions{ConfigPath: "capper.yaml"}, log); err == nil || !strings.Contains(err.Error(), "--policy FILE") {
		t.Fatalf("with lanes: %v", err)
	}
}
