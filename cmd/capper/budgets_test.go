package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/pacing"
)

// pacedPolicy writes configs/policy.yaml with budgets in place of its
// empty list, and returns its path.
func pacedPolicy(t *testing.T, budgets string) string {
	t.Helper()
	data, err := os.ReadFile("../../configs/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(string(data), "\nbudgets: []\n", "\nbudgets:\n"+budgets, 1)
	if doc == string(data) {
		t.Fatal("configs/policy.yaml has no `budgets: []` line")
	}
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// twoBudgets: push-fcm, 100/s, lanes urgent (high and up) and bulk;
// email, 0.5/s, the one default lane.
const twoBudgets = `  - name: push-fcm
    rate: 100
    burst: 10
    channels: [push]
    routes: [fcm]
    lanes:
      - {name: urgent, min_priority: high}
      - {name: bulk}
  - name: email
    rate: 0.5
    channels: [email]
`

// produceTo writes n records to one partition of topic.
func (s *stack) produceTo(t *testing.T, topic string, partition, n int) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(s.kafka.Addrs...), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond,
		Balancer: kafka.BalancerFunc(func(kafka.Message, ...int) int { return partition })}
	defer w.Close()
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: []byte(fmt.Sprint(i)), Value: []byte(`{}`)}
	}
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatalf("write %s[%d]: %v", topic, partition, err)
	}
}

// commitDelay commits offset on a partition of topic for the delay group,
// as a worker does once the records before it are decided.
func (s *stack) commitDelay(t *testing.T, topic string, partition int, offset int64) {
	t.Helper()
	c := &kafka.Client{Addr: kafka.TCP(s.kafka.Addrs...), Timeout: 10 * time.Second}
	resp, err := c.OffsetCommit(context.Background(), &kafka.OffsetCommitRequest{GroupID: s.cfg.Kafka.DelayGroup(), GenerationID: -1,
		Topics: map[string][]kafka.OffsetCommit{topic: {{Partition: partition, Offset: offset}}}})
	if err == nil {
		for _, p := range resp.Topics[topic] {
			err = p.Error
		}
	}
	if err != nil {
		t.Fatalf("commit %s[%d]@%d: %v", topic, partition, offset, err)
	}
}

// TestBudgetsCLI: `capper topics` covers the lane topics, each with its
// retry topic, of the policy in force (and of --policy FILE); `capper budgets` lists the budgets with the
// intents waiting in their lanes (the delay group's lag: past its commit,
// or from the start of a partition it never committed) and the drain times
// (lanes in precedence order, at the budget's rate); `show` the lanes of
// one. A missing lane topic exits 1 naming the fix, an unknown budget 2
// naming the known ones, budgets without kafka.topics.lanes 2 naming it.
func TestBudgetsCLI(t *testing.T) {
	s := newStack(t) // the input and the three outputs, 4 partitions each
	pol := pacedPolicy(t, twoBudgets)
	s.cfg.Policy.Source = "file://" + pol
	s.cfg.Kafka.Topics.Lanes = "capper-lanes"
	s.writeConfig(t)

	out, errOut, code := capper(t, nil, "budgets", "--config", s.path)
	if code != 1 || !strings.Contains(errOut, `capper: 6 lane topics missing: capper-lanes.push-fcm.urgent (budget "push-fcm" lane "urgent"), `+
		`capper-lanes.push-fcm.urgent.retry (budget "push-fcm" lane "urgent", its retry topic), capper-lanes.push-fcm.bulk (budget "push-fcm" lane "bulk"), `+
		`capper-lanes.push-fcm.bulk.retry (budget "push-fcm" lane "bulk", its retry topic), capper-lanes.email.marketing (budget "email" lane "marketing"), `+
		`capper-lanes.email.marketing.retry (budget "email" lane "marketing", its retry topic); create them: capper topics create --config `+s.path) {
		t.Fatalf("budgets with its lane topics missing: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = capper(t, nil, "topics", "check", "--config", s.path)
	if code != 1 || !strings.Contains(out, `missing  capper-lanes.push-fcm.urgent        budget "push-fcm" lane "urgent"`) ||
		!strings.Contains(out, `missing  capper-lanes.push-fcm.urgent.retry  budget "push-fcm" lane "urgent" retry`) ||
		!strings.Contains(errOut, `capper-lanes.email.marketing (budget "email" lane "marketing") missing`) {
		t.Fatalf("topics check: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = capper(t, nil, "topics", "create", "--config", s.path, "--replication-factor", "1")
	if code != 0 || strings.Count(out, "created") != 6 || !strings.Contains(out, "capper-lanes.push-fcm.bulk.retry") || !regexp.MustCompile(`created +capper-lanes\.push-fcm\.bulk +budget "push-fcm" lane "bulk" +4 partitions, replication factor 1, retention\.ms=604800000`).MatchString(out) {
		t.Fatalf("topics create: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code = capper(t, nil, "topics", "check", "--config", s.path); code != 0 {
		t.Fatalf("topics check after create: exit %d\n%s%s", code, out, errOut)
	}

	// urgent: 30 records on partition 0, 10 committed; bulk: 100 on
	// partition 0 (40 committed) and 70 on partition 2 (none); email: 3.
	s.produceTo(t, "capper-lanes.push-fcm.urgent", 0, 30)
	s.produceTo(t, "capper-lanes.push-fcm.bulk", 0, 100)
	s.produceTo(t, "capper-lanes.push-fcm.bulk", 2, 70)
	s.produceTo(t, "capper-lanes.email.marketing", 1, 3)
	s.commitDelay(t, "capper-lanes.push-fcm.urgent", 0, 10)
	s.commitDelay(t, "capper-lanes.push-fcm.bulk", 0, 40)

	out, errOut, code = capper(t, nil, "budgets", "--config", s.path)
	want := regexp.MustCompile(`^budget +rate/s +effective/s +burst +covers +lanes +waiting +drains in\n` +
		`push-fcm +100 +100 +10 +channels push, routes fcm +2 +150 +1\.5s\n` +
		`email +0\.5 +0\.5 +1 +channels email, any route +1 +3 +6s\n` +
		`2 budgets in policy [0-9a-f]+\n` +
		`workers: none reports a policy version \(none running\?\)\n$`)
	if code != 0 || !want.MatchString(out) {
		t.Fatalf("budgets: exit %d\n%s%s", code, out, errOut)
	}
	if out2, _, _ := capper(t, nil, "budgets", "list", "--config", s.path); out2 != out {
		t.Fatalf("budgets list is not budgets:\n%s\n%s", out2, out)
	}

	out, errOut, code = capper(t, nil, "budgets", "show", "push-fcm", "--config", s.path)
	want = regexp.MustCompile(`^budget +push-fcm\npolicy +[0-9a-f]+\nworkers +none reports a policy version \(none running\?\)\nrate +100/s, burst 10\neffective +100/s\ncovers +channels push, routes fcm\nwaiting +150, drains in 1\.5s\n\n` +
		`lane +takes +topic +waiting +drains in\n` +
		`urgent +high and up +capper-lanes\.push-fcm\.urgent +20 +200ms\n` +
		`bulk +the rest +capper-lanes\.push-fcm\.bulk +130 +1\.5s\n$`)
	if code != 0 || !want.MatchString(out) {
		t.Fatalf("budgets show push-fcm: exit %d\n%s%s", code, out, errOut)
	}

	out, errOut, code = capper(t, nil, "budgets", "show", "push-fcm", "--config", s.path, "-o", "json")
	var shown struct {
		Policy string
		Budget struct {
			Name         string
			Rate         float64
			Burst        int
			Channels     []string
			Routes       []string
			Waiting      int64
			DrainSeconds float64 `json:"drain_seconds"`
			Lanes        []struct {
				Name         string
				MinPriority  int `json:"min_priority"`
				Topic        string
				Exists       bool
				Waiting      int64
				DrainSeconds float64 `json:"drain_seconds"`
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &shown); code != 0 || err != nil {
		t.Fatalf("show -o json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	b := shown.Budget
	if b.Name != "push-fcm" || b.Rate != 100 || b.Burst != 10 || b.Waiting != 150 || b.DrainSeconds != 1.5 || len(b.Lanes) != 2 ||
		b.Lanes[0].Name != "urgent" || b.Lanes[0].MinPriority != 75 || b.Lanes[0].Waiting != 20 || b.Lanes[0].DrainSeconds != 0.2 || !b.Lanes[0].Exists ||
		b.Lanes[1].Topic != "capper-lanes.push-fcm.bulk" || b.Lanes[1].MinPriority != 0 || b.Lanes[1].Waiting != 130 || b.Lanes[1].DrainSeconds != 1.5 {
		t.Fatalf("show -o json: %+v\n%s", shown, out)
	}
	out, errOut, code = capper(t, nil, "budgets", "--config", s.path, "-o", "json")
	var listed struct {
		Budgets []struct {
			Name    string
			Waiting int64
		}
	}
	if err := json.Unmarshal([]byte(out), &listed); code != 0 || err != nil || len(listed.Budgets) != 2 || listed.Budgets[1].Waiting != 3 {
		t.Fatalf("budgets -o json: exit %d, %v\n%s%s", code, err, out, errOut)
	}

	// Its provider throttled a send: the effective rate, one in Redis,
	// shows, and the drain times are at it.
	lease := &pacing.RedisLeaser{Client: s.redis.Client(), Prefix: s.cfg.Capping.KeyPrefix}
	if _, err := lease.Throttle(context.Background(), pacing.ThrottleRequest{Budget: "push-fcm", Rate: 100, MinRate: 10, RetryAfter: time.Minute}); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = capper(t, nil, "budgets", "show", "push-fcm", "--config", s.path)
	if code != 0 || !regexp.MustCompile(`\neffective +9[0-9](\.[0-9]+)?/s \(lowered: its provider throttles sends; back at the rate by itself, 2% of it a second\), nothing released for [0-9ms.]+ more \(the provider's Retry-After\)\n`).MatchString(out) ||
		!regexp.MustCompile(`\nwaiting +150, drains in 1\.[5-7]s\n`).MatchString(out) {
		t.Fatalf("budgets show after a throttled send: exit %d\n%s%s", code, out, errOut)
	}
	out, _, _ = capper(t, nil, "budgets", "show", "push-fcm", "--config", s.path, "-o", "json")
	var eff struct {
		Budget struct {
			EffectiveRate *float64 `json:"effective_rate"`
			HeldSeconds   float64  `json:"held_seconds"`
		}
	}
	if err := json.Unmarshal([]byte(out), &eff); err != nil || eff.Budget.EffectiveRate == nil || *eff.Budget.EffectiveRate >= 100 || eff.Budget.HeldSeconds < 50 {
		t.Fatalf("show -o json after a throttled send: %v\n%s", err, out)
	}

	_, errOut, code = capper(t, nil, "budgets", "show", "sms", "--config", s.path)
	if code != 2 || !strings.Contains(errOut, `capper: budget "sms": no such budget in policy `) || !strings.Contains(errOut, "; its budgets: push-fcm, email") {
		t.Fatalf("an unknown budget: exit %d\n%s", code, errOut)
	}

	// --policy: a candidate's budgets instead of the policy in force's.
	cand := pacedPolicy(t, "  - {name: sms, rate: 20, channels: [sms]}\n")
	out, errOut, code = capper(t, nil, "topics", "check", "--config", s.path, "--policy", cand)
	if code != 1 || strings.Contains(out, "push-fcm") || !strings.Contains(out, "create it: capper topics create --config "+s.path+" --policy "+cand) {
		t.Fatalf("topics check --policy: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = capper(t, nil, "budgets", "show", "sms", "--config", s.path, "--policy", cand)
	if code != 1 || !regexp.MustCompile(`marketing +every priority +capper-lanes\.sms\.marketing +topic missing +-\n`).MatchString(out) ||
		!strings.Contains(errOut, "create them: capper topics create --config "+s.path+" --policy "+cand) {
		t.Fatalf("budgets show --policy: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = capper(t, nil, "budgets", "--config", s.path, "--policy", "../../configs/policy.yaml")
	if code != 0 || !regexp.MustCompile(`^budget .*\n0 budgets in policy .*configs/policy\.yaml\n$`).MatchString(out) {
		t.Fatalf("budgets of a policy without any: exit %d\n%s%s", code, out, errOut)
	}

	// Budgets without kafka.topics.lanes.
	s.cfg.Kafka.Topics.Lanes = ""
	s.writeConfig(t)
	for _, args := range [][]string{{"budgets"}, {"topics", "check"}, {"topics", "create", "--dry-run"}} {
		_, errOut, code := capper(t, nil, append(args, "--config", s.path)...)
		if code != 2 || !strings.Contains(errOut, "the policy has budgets (send pacing), but kafka.topics.lanes is not set") {
			t.Errorf("capper %v without kafka.topics.lanes: exit %d\n%s", args, code, errOut)
		}
	}
}
