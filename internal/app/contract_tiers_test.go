package app_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/app"
)

// contractTopics are the "on" column of each header row of the event
// contract's table.
func contractTopics(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("../../docs/reference/event-contract.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `(capper-[a-z-]+)`(?:, `(capper-[a-z-]+)`)? \\| ([^|]+) \\|")
	out := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			out[m[1]] = m[3]
			if m[2] != "" {
				out[m[2]] = m[3]
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("found %d header rows in docs/reference/event-contract.md; the table moved?", len(out))
	}
	return out
}

// TestDelayTierHeadersDocumented: every capper-* header a worker writes on
// a delay tier's record (a deferral for a cap, one for a user's snooze) is
// documented on the delay tiers in the event contract, capper-decided-at
// among them.
func TestDelayTierHeadersDocumented(t *testing.T) {
	doc := contractTopics(t)
	e := newE2E(t, "single")
	e.clock = newFastClock(60)
	e.publish(100, 7)
	cfg := e.userConfig(waitPolicy)
	e.start("a", cfg)
	e.setUser(cfg, 81, app.UserChange{SnoozeUntil: e.clock.Now().Add(20 * time.Minute)})
	e.produce(append(userIntents("h", 80, "push", "push"), userIntents("h", 81, "push")...))
	var n int
	waitFor(t, 30*time.Second, func() bool {
		n = 0
		for _, tier := range []string{tDelay1m, tDelay10m, tDelay1h} {
			n += len(e.readTopic(tier))
		}
		return n >= 2
	})
	seen := map[string]bool{}
	for _, tier := range []string{tDelay1m, tDelay10m, tDelay1h} {
		for _, m := range e.readTopic(tier) {
			for _, h := range m.Headers {
				if !strings.HasPrefix(h.Key, "capper-") {
					continue
				}
				seen[h.Key] = true
				if on := doc[h.Key]; !strings.Contains(on, "delay tiers") && on != "every output topic" {
					t.Errorf("%s is on a delay tier's record (%s: %q); the event contract has it on %q", h.Key, idOf(m), h.Value, on)
				}
			}
		}
	}
	if !seen["capper-decided-at"] {
		t.Errorf("no capper-decided-at on the delay tiers' records: %v", seen)
	}
}
