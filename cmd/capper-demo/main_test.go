package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRun runs the demo binary's code small, end to end (embedded Kafka and
// Redis), and its usage errors.
func TestRun(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"--users", "400", "--intents", "800", "--seed", "2"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	for _, want := range []string{"capper demo: 800 send-intents", "audit: ok"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if code := run([]string{"--users", "x"}, &out, &errOut); code != 2 {
		t.Errorf("bad flag: exit %d, want 2", code)
	}
	out.Reset()
	if code := run([]string{"--help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "--redis-addr") {
		t.Errorf("--help: exit %d\n%s", code, out.String())
	}
	out.Reset()
	if code := run([]string{"--version"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "capper-demo dev (go1.") || !strings.Contains(out.String(), "revision ") {
		t.Errorf("--version: exit %d\n%s", code, out.String())
	}
}
