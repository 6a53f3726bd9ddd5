package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	kafkago "github.com/segmentio/kafka-go"
)

// TestGroupLeaveCLI: `capper group leave` removes a static worker that
// stopped (and so stayed in the group) from its group on its behalf; an
// instance no member has is skipped.
func TestGroupLeaveCLI(t *testing.T) {
	s := newStack(t)
	s.writeConfig(t)
	g, err := kafka.JoinGroup(kafka.GroupOptions{Transport: &kafkago.Transport{}, Brokers: s.kafka.Addrs, GroupID: s.cfg.Kafka.GroupID,
		Topics: []string{s.cfg.Kafka.Topics.Input}, InstanceID: "capper-2", Protocols: kafka.Protocols(kafka.ProtocolCooperative),
		SessionTimeout: time.Minute, RebalanceTimeout: time.Minute, HeartbeatInterval: 100 * time.Millisecond, StartOffset: kafkago.FirstOffset,
		Read: func(ctx context.Context, _ *kafka.Claim, _ int64) { <-ctx.Done() }})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(g.Assigned(s.cfg.Kafka.Topics.Input)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the static member got no partition")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = g.Close() // static: still a member
	out, errOut, code := capper(t, nil, "group", "leave", "--config", s.path, "--instance", "capper-2", "--instance", "capper-9")
	if code != 0 || !strings.Contains(out, s.cfg.Kafka.GroupID+": capper-2: removed") || !strings.Contains(out, s.cfg.Kafka.GroupID+": capper-9: no member") {
		t.Fatalf("group leave: exit %d\n%s%s", code, out, errOut)
	}
	out, _, _ = capper(t, nil, "group", "leave", "--config", s.path, "--instance", "capper-2")
	if !strings.Contains(out, "capper-2: no member") {
		t.Fatalf("a second leave: %s, want no member", out)
	}
}
