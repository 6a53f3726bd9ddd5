package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/config"
)

// TestCampaignCLI: `capper campaign` refuses every bad input naming it
// (exit 2, nothing written), writes a good change with acks=all and says
// where, and lists the states (table and JSON).
func TestCampaignCLI(t *testing.T) {
	s := newStack(t)
	s.createTopic(t, "capper-control")
	s.createTopic(t, "send-intents-delay-1m")
	s.cfg.Kafka.DelayTiers = []config.DelayTier{{Delay: config.Duration(time.Minute), Topic: "send-intents-delay-1m"}}
	dir := t.TempDir()
	configWith := func(name, control string) string {
		s.path, s.cfg.Kafka.Topics.Control = filepath.Join(dir, name), control
		s.writeConfig(t)
		return s.path
	}
	off, on := configWith("off.yaml", ""), configWith("on.yaml", "capper-control")

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"no campaign", []string{"campaign", "stop", "--reason", "x", "--config", on}, "campaign: an id is required (or --all)"},
		{"campaign and --all", []string{"campaign", "pause", "c1", "--all", "--reason", "x", "--config", on}, "give a campaign id or --all, not both"},
		{"no reason", []string{"campaign", "stop", "c1", "--config", on}, "reason: is required to mark a campaign stopped"},
		{"oversize campaign", []string{"campaign", "pause", strings.Repeat("c", 257), "--reason", "x", "--config", on}, "campaign: 257 bytes, at most 256"},
		{"stop every intent", []string{"campaign", "stop", "--all", "--reason", "x", "--config", on}, "--all: every intent can be paused and resumed, not stopped"},
		{"bad send-by", []string{"campaign", "resume", "c1", "--send-by", "tonight", "--config", on}, `--send-by: "tonight" is not an RFC 3339 time`},
		{"unknown state", []string{"campaign", "halt", "c1", "--config", on}, "unexpected argument halt"},
		{"control off", []string{"campaign", "stop", "c1", "--reason", "x", "--config", off}, "kafka.topics.control is not set"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := capper(t, nil, c.args...)
			if code != 2 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 and %q", code, stderr, c.want)
			}
			// The refusal comes with the usage the CLI reference promises.
			if !strings.Contains(stderr, "Usage: capper campaign") {
				t.Fatalf("no usage after the refusal:\n%s", stderr)
			}
		})
	}
	if out, _, _ := capper(t, nil, "campaign", "list", "--config", on); !strings.Contains(out, "0 campaigns with a record") {
		t.Fatalf("bad input wrote something:\n%s", out)
	}

	out, stderr, code := capper(t, nil, "campaign", "stop", "spring-sale", "--reason", "wrong price", "--by", "alice", "--config", on)
	if code != 0 || !strings.Contains(out, `campaign "spring-sale": stopped (was active (no record))`) ||
		!strings.Contains(out, "reason: wrong price") || !strings.Contains(out, " to capper-control/0/0 ") {
		t.Fatalf("stop: exit %d\n%s%s", code, out, stderr)
	}
	out, _, code = capper(t, nil, "campaign", "pause", "--all", "--reason", "incident 4411", "--config", on)
	if code != 0 || !strings.Contains(out, "every intent (but exempt categories): paused") || !strings.Contains(out, "capper-control/0/1") {
		t.Fatalf("pause --all: exit %d\n%s", code, out)
	}
	out, _, code = capper(t, nil, "campaign", "stop", "spring-sale", "--reason", "still wrong", "--send-by", "2026-12-01T00:00:00Z", "--config", on)
	if code != 0 || !strings.Contains(out, "(was stopped since") || !strings.Contains(out, "send by: 2026-12-01T00:00:00Z") {
		t.Fatalf("stop again: exit %d\n%s", code, out)
	}

	// inspect --campaign shows the campaign's state.
	out, stderr, code = capper(t, nil, "inspect", "--user", "1", "--campaign", "spring-sale", "--config", on)
	if code != 0 || !strings.Contains(out, "campaign  spring-sale: stopped since ") || !strings.Contains(out, "still wrong") {
		t.Fatalf("inspect --campaign: exit %d\n%s%s", code, out, stderr)
	}
	out, _, code = capper(t, nil, "campaign", "list", "--config", on)
	if code != 0 || !strings.Contains(out, "(all)") || !strings.Contains(out, "spring-sale") || !strings.Contains(out, "still wrong") ||
		!strings.Contains(out, "2 campaigns with a record") {
		t.Fatalf("list: exit %d\n%s", code, out)
	}
	out, _, code = capper(t, nil, "campaign", "list", "-o", "json", "--config", on)
	var list []struct {
		Campaign, State, Reason, By, Record string
		All                                 bool
		SendBy                              *string `json:"send_by"`
		Since, At                           string
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != 0 || len(list) != 2 {
		t.Fatalf("list -o json: exit %d, %v\n%s", code, err, out)
	}
	if !list[0].All || list[0].State != "paused" || list[1].Campaign != "spring-sale" || list[1].State != "stopped" ||
		list[1].SendBy == nil || list[1].Record != "capper-control/0/2" || list[1].By == "" || list[1].Since > list[1].At {
		t.Fatalf("list -o json: %+v", list)
	}

	// Records that are not control records: a command says so once, in one
	// line, not an ERROR per record; and a command that succeeded prints
	// no warning after its write (closing its readers is no failure).
	var junk []kafka.Message
	for i := range 5 {
		junk = append(junk, kafka.Message{Key: []byte(fmt.Sprintf("campaign/junk-%d", i)), Value: []byte("not json")})
	}
	s.kafka.Produce(t, "capper-control", junk)
	for i := range 6 {
		args := []string{"campaign", "pause", "c" + strconv.Itoa(i), "--reason", "x", "--config", on}
		if i%2 == 1 {
			args = []string{"campaign", "list", "--config", on}
		}
		out, stderr, code := capper(t, nil, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, stderr)
		}
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") ||
			!strings.Contains(lines[0], "5 records of the control topic capper-control are not control records and were skipped") {
			t.Fatalf("%v: want one line about the 5 foreign records on stderr, got:\n%s", args, stderr)
		}
	}
}
