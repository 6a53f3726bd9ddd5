package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/config"
)

// createPlain creates a topic with partitions and no configs, as a
// `kafka-topics.sh --create` without --config would.
func (s *stack) createPlain(t *testing.T, topic string, partitions int) {
	t.Helper()
	c := &kafka.Client{Addr: kafka.TCP(s.kafka.Addrs...), Timeout: 10 * time.Second}
	resp, err := c.CreateTopics(context.Background(), &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}}})
	if err == nil {
		err = resp.Errors[topic]
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// TestTopicsCLI: `capper topics check` names each missing topic (exit 1),
// `create --dry-run` creates nothing, `create` creates them right and
// `check` then says ok (exit 0); bad flags exit 2 with the usage.
func TestTopicsCLI(t *testing.T) {
	s := newStack(t) // the input and the three outputs, 4 partitions each
	s.cfg.Kafka.Topics.DeliveryStatus = "delivery-status"
	s.cfg.Kafka.Topics.Control = "ctl"
	s.cfg.Kafka.DelayTiers = []config.DelayTier{
		{Delay: config.Duration(time.Minute), Topic: "send-intents-delay-1m"},
		{Delay: config.Duration(time.Hour), Topic: "send-intents-delay-1h"},
	}
	s.writeConfig(t)

	out, errOut, code := capper(t, nil, "topics", "check", "--config", s.path)
	if code != 1 {
		t.Fatalf("check with missing topics: exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"ok       send-intents ", "missing  ctl ", "create it: capper topics create --config " + s.path} {
		if !strings.Contains(out, want) {
			t.Errorf("check's output lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{"capper: 4 topics missing or wrong: ", "delivery-status (kafka.topics.delivery_status) missing",
		"send-intents-delay-1h (kafka.delay_tiers[1].topic) missing", "ctl (kafka.topics.control) missing"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("check's error lacks %q:\n%s", want, errOut)
		}
	}

	out, errOut, code = capper(t, nil, "topics", "create", "--config", s.path, "--dry-run")
	if code != 0 || strings.Count(out, "would create") != 4 || !strings.Contains(out, "1 partition, replication factor the brokers' default, cleanup.policy=compact, min.compaction.lag.ms=604800000") {
		t.Fatalf("create --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	if _, _, code := capper(t, nil, "topics", "check", "--config", s.path); code != 1 {
		t.Fatalf("check after a dry run: exit %d, want 1 (nothing created)", code)
	}

	out, errOut, code = capper(t, nil, "topics", "create", "--config", s.path, "--replication-factor", "1")
	if code != 0 || strings.Count(out, "created") != 4 || !strings.Contains(out, "send-intents-delay-1h  kafka.delay_tiers[1].topic    4 partitions, replication factor 1, retention.ms=604800000") {
		t.Fatalf("create: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = capper(t, nil, "topics", "check", "--config", s.path)
	if code != 0 || strings.Count(out, "\n") != 8 || strings.Count("\n"+out, "\nok ") != 8 {
		t.Fatalf("check after create: exit %d, want 0 and 8 ok lines\n%s%s", code, out, errOut)
	}

	out, errOut, code = capper(t, nil, "topics", "check", "--config", s.path, "-o", "json")
	var found []struct {
		Topic, Key, State string
		Partitions        int
		Problems          []string
	}
	if err := json.Unmarshal([]byte(out), &found); code != 0 || err != nil || len(found) != 8 {
		t.Fatalf("check -o json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if f := found[7]; f.Topic != "ctl" || f.Key != "kafka.topics.control" || f.State != "ok" || f.Partitions != 1 || f.Problems == nil {
		t.Fatalf("check -o json: the control topic is %+v", f)
	}

	for _, args := range [][]string{
		{"topics", "create", "--config", s.path, "--partitions", "0"},
		{"topics", "create", "--config", s.path, "--replication-factor", "0"},
		{"topics", "check"},
	} {
		if _, errOut, code := capper(t, nil, args...); code != 2 || !strings.Contains(errOut, "Usage: capper topics") {
			t.Errorf("capper %v: exit %d, want 2 with the usage\n%s", args, code, errOut)
		}
	}
}

// TestRunRefusesWrongTopics: `capper run` does not start on a delay tier
// with fewer partitions than the input, nor on a control topic that is not
// compacted: exit 2, naming the key, the topic and the fix.
func TestRunRefusesWrongTopics(t *testing.T) {
	s := newStack(t) // send-intents has 4 partitions
	s.createPlain(t, "send-intents-delay-1m", 4)
	s.createPlain(t, "send-intents-delay-5m", 2)
	s.cfg.Kafka.DelayTiers = []config.DelayTier{
		{Delay: config.Duration(time.Minute), Topic: "send-intents-delay-1m"},
		{Delay: config.Duration(5 * time.Minute), Topic: "send-intents-delay-5m"},
	}
	s.writeConfig(t)
	_, errOut, code := capper(t, nil, "run", "--config", s.path)
	if code != 2 {
		t.Fatalf("mis-partitioned tier: exit %d, want 2:\n%s", code, errOut)
	}
	for _, want := range []string{"kafka.delay_tiers[1].topic topic send-intents-delay-5m: 2 partitions, the input send-intents has 4: delay tiers must be co-partitioned with the input",
		"--alter --topic send-intents-delay-5m --partitions 4", "capper topics check --config"} {
		if !strings.Contains(errOut, want) {
			t.Fatalf("output lacks %q:\n%s", want, errOut)
		}
	}

	s.cfg.Kafka.DelayTiers = s.cfg.Kafka.DelayTiers[:1]
	s.createPlain(t, "ctl", 1)
	s.cfg.Kafka.Topics.Control = "ctl"
	s.writeConfig(t)
	_, errOut, code = capper(t, nil, "run", "--config", s.path)
	if code != 2 {
		t.Fatalf("control topic not compacted: exit %d, want 2:\n%s", code, errOut)
	}
	for _, want := range []string{"kafka.topics.control topic ctl: cleanup.policy is delete, not compact", "--entity-name ctl --add-config cleanup.policy=compact"} {
		if !strings.Contains(errOut, want) {
			t.Fatalf("output lacks %q:\n%s", want, errOut)
		}
	}
}
