package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/capper-dev/capper/internal/userlimits"
)

// userPolicy is the user_limits section put in place of configs/policy.yaml's
// user_limits: null.
const userPolicy = `user_limits:
  tiers:
    - name: fewer
      limits:
        - {name: daily, window: 24h, max: 1}
  channels: [push, sms]
`

// TestUserCLI: `capper user` against a running worker: set and snooze
// are written, applied and shown; what the policy refuses and bad flags
// exit 2 naming them, writing nothing; forget says what it erased.
func TestUserCLI(t *testing.T) {
	s := newStack(t)
	if err := s.kafka.Cluster.CreateTopic("capper-user-limits", 4, map[string]string{"cleanup.policy": "compact"}); err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("../../configs/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte(strings.Replace(string(example), "user_limits: null\n", userPolicy, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	s.cfg.Policy.Source = "file://" + pol
	off := s.path
	s.writeConfig(t)
	s.path = filepath.Join(t.TempDir(), "on.yaml")
	s.cfg.Kafka.Topics.UserLimits = "capper-user-limits"
	s.writeConfig(t)
	on := s.path

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"topic off", []string{"user", "set", "42", "--tier", "fewer", "--config", off}, "kafka.topics.user_limits is not set"},
		{"nothing", []string{"user", "set", "42", "--config", on}, "nothing to change"},
		{"tier both", []string{"user", "set", "42", "--tier", "fewer", "--no-tier", "--config", on}, "--tier and --no-tier"},
		{"bad channel", []string{"user", "set", "42", "--channel", "sms", "--config", on}, `--channel "sms": want CHANNEL=MAX`},
		{"bad quiet", []string{"user", "set", "42", "--quiet", "25:00-07:00", "--config", on}, `--quiet "25:00-07:00": want HH:MM-HH:MM`},
		{"unknown tier", []string{"user", "set", "42", "--tier", "most", "--config", on}, `tier: "most" is not one of the policy's tiers (fewer)`},
		{"channel not allowed", []string{"user", "set", "42", "--channel", "email=0", "--config", on}, `channels.email: "email" is not one of the channels users may turn down`},
		{"limit kind", []string{"user", "set", "42", "--limit", `mood="calm"`, "--config", on}, `--limit mood: "mood" is not a kind of user limit`},
		{"limit value", []string{"user", "set", "42", "--limit", `quiet_hours={"from":"25:00"}`, "--config", on}, `quiet_hours.from: "25:00" is not HH:MM`},
		{"limit missing", []string{"user", "set", "42", "--limit", `quiet_hours={"from":"22:00"}`, "--config", on}, `quiet_hours.to: is required`},
		{"limit form", []string{"user", "set", "42", "--limit", "tier", "--config", on}, `--limit "tier": want KIND=JSON`},
		{"no limit kind", []string{"user", "set", "42", "--no-limit", "mood", "--config", on}, `--no-limit "mood": not a kind of limit`},
		{"snooze nothing", []string{"user", "snooze", "42", "--config", on}, "give one of --until, --for and --off"},
		{"snooze past", []string{"user", "snooze", "42", "--until", "2020-01-01T00:00:00Z", "--config", on}, "is not in the future"},
		{"snooze for", []string{"user", "snooze", "42", "--for", "a week", "--config", on}, `--for: "a week" is not a duration`},
		{"snooze channel", []string{"user", "snooze", "42", "--for", "1h", "--channels", "fax", "--config", on}, `snooze.channels[0]: "fax" is not one of the policy's channels`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, stderr, code := capper(t, nil, c.args...)
			if code != 2 || !strings.Contains(stderr, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 and %q", code, stderr, c.want)
			}
		})
	}
	if out, _, code := capper(t, nil, "user", "show", "42", "--config", on); code != 0 || !strings.Contains(out, "no limits of their own") {
		t.Fatalf("bad input wrote something: exit %d\n%s", code, out)
	}

	s.start(t)
	out, stderr, code := capper(t, nil, "user", "set", "42", "--tier", "fewer", "--channel", "sms=0", "--channel", "push=2", "--quiet", "22:00-07:00", "--config", on)
	for _, want := range []string{"user 42:\n  tier fewer\n  channel push at most 2 per 7d\n  channel sms off\n  quiet hours 22:00-07:00 (their time zone)\n",
		"was: no limits of their own\n", "written to capper-user-limits/", "applied in "} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("set: exit %d, want %q in\n%s%s", code, want, out, stderr)
		}
	}
	// capper inspect shows them: a line, and the tier's and channels' rows
	// after the segment's; in JSON as the topic's record.
	out, stderr, code = capper(t, nil, "inspect", "--user", "42", "--config", on)
	for _, want := range []string{"own       tier fewer; channel push at most 2 per 7d; channel sms off; quiet hours 22:00-07:00 (their time zone)\n"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("inspect: exit %d, want %q in\n%s%s", code, want, out, stderr)
		}
	}
	for _, row := range []string{`(?m)^user-tier/fewer/daily\s+every intent\s+1d rolling\s.*\s0\s+1\s`, `(?m)^user-channel/push\s+channels push\s+1w rolling\s.*\s0\s+2\s`, `(?m)^user-channel/sms\s+channels sms\s+1w rolling\s.*\s0\s+0\s`} {
		if !regexp.MustCompile(row).MatchString(out) {
			t.Fatalf("inspect: no row %s in\n%s", row, out)
		}
	}
	out, _, code = capper(t, nil, "inspect", "--user", "42", "-o", "json", "--config", on)
	var in struct {
		UserLimits json.RawMessage `json:"user_limits"`
	}
	if err := json.Unmarshal([]byte(out), &in); code != 0 || err != nil {
		t.Fatalf("inspect -o json: exit %d, %v\n%s", code, err, out)
	}
	if r, err := userlimits.DecodeValue(in.UserLimits); err != nil || r.Limits.Tier != "fewer" || r.Limits.Channels["sms"] != 0 || len(r.Limits.Channels) != 2 {
		t.Fatalf("inspect -o json: user_limits %s: %+v %v", in.UserLimits, r, err)
	}
	out, stderr, code = capper(t, nil, "user", "snooze", "42", "--for", "7d", "--channels", "push,sms", "--config", on)
	if code != 0 || !strings.Contains(out, "  snoozed until ") || !strings.Contains(out, "(push, sms)") || !strings.Contains(out, "applied in ") {
		t.Fatalf("snooze: exit %d\n%s%s", code, out, stderr)
	}
	out, _, code = capper(t, nil, "user", "set", "42", "--clear-channels", "--no-quiet", "--config", on)
	now, _, _ := strings.Cut(out, "was: ")
	if code != 0 || strings.Contains(now, "channel ") || strings.Contains(now, "quiet") || !strings.Contains(now, "tier fewer") || !strings.Contains(now, "snoozed until") {
		t.Fatalf("set --clear-channels --no-quiet: exit %d\n%s", code, out)
	}
	// Any kind through --limit (the record's field) and --no-limit.
	out, stderr, code = capper(t, nil, "user", "set", "42", "--limit", `quiet_hours={"from":"21:30","to":"06:00"}`, "--no-limit", "tier", "--config", on)
	now, _, _ = strings.Cut(out, "was: ")
	if code != 0 || !strings.Contains(now, "quiet hours 21:30-06:00") || strings.Contains(now, "tier") || !strings.Contains(now, "snoozed until") {
		t.Fatalf("set --limit quiet_hours --no-limit tier: exit %d\n%s%s", code, out, stderr)
	}
	out, _, code = capper(t, nil, "user", "set", "42", "--limit", `tier="fewer"`, "--no-limit", "quiet_hours", "--config", on)
	now, _, _ = strings.Cut(out, "was: ")
	if code != 0 || strings.Contains(now, "quiet") || !strings.Contains(now, "tier fewer") {
		t.Fatalf("set --limit tier --no-limit quiet_hours: exit %d\n%s", code, out)
	}
	out, _, code = capper(t, nil, "user", "show", "42", "--json", "--config", on)
	r, err := userlimits.Decode([]byte("42"), []byte(out))
	if code != 0 || err != nil || r.Limits.Tier != "fewer" || len(r.Limits.SnoozeChannels) != 2 || r.Limits.Channels != nil {
		t.Fatalf("show --json: exit %d, %v, %+v\n%s", code, err, r, out)
	}
	if !json.Valid([]byte(out)) {
		t.Fatalf("show --json is not JSON:\n%s", out)
	}
	out, stderr, code = capper(t, nil, "user", "forget", "42", "--config", on)
	for _, want := range []string{"user 42 erased from Redis:\n", "  their limits: snoozed until ", "tier fewer\n",
		"  their record: none\n", "  this command's refusal cache: held nothing about them\n", "tombstone written to capper-user-limits/"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("forget: exit %d, want %q in\n%s%s", code, want, out, stderr)
		}
	}
	if out, _, code := capper(t, nil, "user", "show", "42", "--config", on); code != 0 || !strings.Contains(out, "no limits of their own") {
		t.Fatalf("after forget: exit %d\n%s", code, out)
	}
}
