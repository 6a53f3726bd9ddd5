package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUserSnoozeFirstUse: what a first snooze runs into. A missing
// user-limits topic is named by its key with the command that creates
// it, and nothing is written; --until takes a local time with
// --time-zone, and a time it cannot read gets examples; a snooze longer
// than the policy's user_limits.max_defer says that what waits is
// cancelled, not deferred.
func TestUserSnoozeFirstUse(t *testing.T) {
	s := newStack(t)
	example, err := os.ReadFile("../../configs/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte(strings.Replace(string(example), "user_limits: null\n", userPolicy, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	s.cfg.Policy.Source = "file://" + pol
	s.cfg.Kafka.Topics.UserLimits = "capper-user-limits"
	s.writeConfig(t)

	for _, args := range [][]string{{"snooze", "42", "--for", "1h"}, {"forget", "42"}} {
		_, stderr, code := capper(t, nil, append(append([]string{"user"}, args...), "--config", s.path)...)
		if code != 2 || !strings.Contains(stderr, `kafka.topics.user_limits: "capper-user-limits": topic does not exist on the brokers`) ||
			!strings.Contains(stderr, "capper topics create --config "+s.path) {
			t.Fatalf("user %v without the topic: exit %d, want 2 naming the key and the fix:\n%s", args, code, stderr)
		}
	}
	if err := s.kafka.Cluster.CreateTopic("capper-user-limits", 4, map[string]string{"cleanup.policy": "compact"}); err != nil {
		t.Fatal(err)
	}

	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	day := time.Now().In(berlin).AddDate(0, 0, 2)
	local := day.Format("2006-01-02") + "T08:00"
	want := time.Date(day.Year(), day.Month(), day.Day(), 8, 0, 0, 0, berlin).UTC().Format(time.RFC3339)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--until", local}, []string{`--until "` + local + `" has no offset`, "--time-zone Europe/Berlin"}},
		{[]string{"--until", "tomorrow"}, []string{`--until "tomorrow" is not a time`, "T08:00", "--time-zone Europe/Berlin"}},
		{[]string{"--until", local + ":00+01:00", "--time-zone", "Europe/Berlin"}, []string{"has an offset"}},
		{[]string{"--for", "1h", "--time-zone", "Europe/Berlin"}, []string{"--time-zone is the zone of --until"}},
	} {
		_, stderr, code := capper(t, nil, append([]string{"user", "snooze", "42", "--config", s.path}, c.args...)...)
		for _, w := range c.want {
			if code != 2 || !strings.Contains(stderr, w) {
				t.Errorf("snooze %v: exit %d, want 2 and %q:\n%s", c.args, code, w, stderr)
			}
		}
	}

	out, stderr, code := capper(t, nil, "user", "snooze", "42", "--until", local, "--time-zone", "Europe/Berlin", "--wait", "0", "--config", s.path)
	if code != 0 || !strings.Contains(out, "snoozed until "+want+" (every channel)") {
		t.Fatalf("snooze until %s Europe/Berlin: exit %d, want until %s\n%s%s", local, code, want, out, stderr)
	}
	const cancelled = "are cancelled (snooze-too-long), not deferred: the snooze ends more than the policy's user_limits.max_defer (1d) after them"
	if !strings.Contains(out, cancelled) {
		t.Errorf("a snooze of about two days under max_defer 24h does not say what is cancelled:\n%s", out)
	}
	out, _, code = capper(t, nil, "user", "snooze", "42", "--for", "12h", "--wait", "0", "--config", s.path)
	if code != 0 || strings.Contains(out, "cancelled") {
		t.Errorf("a snooze within max_defer: exit %d, nothing is cancelled:\n%s", code, out)
	}
}
