package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// budgetsPolicy is configs/policy.yaml with one budget, as the pacing page
// sets it up; a test's edit replaces one of its lines.
func budgetsPolicy(t *testing.T, dir, name, from, to string) string {
	t.Helper()
	src, err := os.ReadFile("../../configs/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(string(src), "budgets: []", `budgets:
  - name: push-fcm
    rate: 50
    burst: 5
    channels: [push]
    routes: [fcm]
    lanes:
      - {name: urgent, min_priority: high}
      - {name: bulk}`, 1)
	if i := strings.LastIndex(doc, from); i < 0 || strings.Index(doc, from) != i {
		t.Fatalf("%q is not in the policy once", from)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(strings.Replace(doc, from, to, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// lineOf is the line of the policy at path that holds s.
func lineOf(t *testing.T, path, s string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("%q not in %s", s, path)
	return 0
}

// TestPolicyErrorsNameTheField: a policy's problems, a key or a value that
// does not decode included, name the file once, the line and the field's
// path; an unknown key the key it is likely a typo of; min_priority's
// range is the one accepted (1 to 100).
func TestPolicyErrorsNameTheField(t *testing.T) {
	dir := t.TempDir()
	bud := `budgets[0] (budget "push-fcm")`
	for _, tc := range []struct{ name, from, to, at, want string }{
		{"brust.yaml", "burst: 5", "brust: 5", "brust", bud + `.brust: unknown key; did you mean burst?`},
		{"rate.yaml", "rate: 50", "rate: 50/s", "rate: 50/s", bud + `.rate: "50/s" is not a number (write the number alone: 50)`},
		{"prio.yaml", "min_priority: high}\n      - {name: bulk}", "min_priority: 150}\n      - {name: bulk}", "min_priority: 150", bud + `.lanes[0] (lane "urgent").min_priority: "150" is not low, normal, high or a whole number from 1 to 100`},
		{"prio0.yaml", "min_priority: high}\n      - {name: bulk}", "min_priority: 0}\n      - {name: bulk}", "min_priority: 0", bud + `.lanes[0] (lane "urgent").min_priority: "0" is not low, normal, high or a whole number from 1 to 100`},
	} {
		path := budgetsPolicy(t, dir, tc.name, tc.from, tc.to)
		out, errOut, code := capper(t, nil, "policy", "check", path)
		want := path + ": line " + strconv.Itoa(lineOf(t, path, tc.at)) + ": " + tc.want
		if code != 1 || !strings.HasPrefix(out, want) || strings.Count(out, path) != 1 {
			t.Errorf("%s: exit %d, got\n%s%s\nwant exit 1 and\n%s", tc.name, code, out, errOut, want)
		}
	}
	// The same message where the worker would refuse it.
	path := filepath.Join(dir, "brust.yaml")
	out, _, code := capper(t, nil, "policy", "publish", path, "--to", filepath.Join(dir, "store"))
	if code != 1 || !strings.Contains(out, path+": line "+strconv.Itoa(lineOf(t, path, "brust"))+": "+bud+".brust: unknown key; did you mean burst?") {
		t.Errorf("publish: exit %d\n%s", code, out)
	}
}

// TestPolicyNeedsLanes: a policy with budgets on a config without
// kafka.topics.lanes is refused by policy check (given the config),
// check-config and run, each naming the key, run and check-config with
// exit 2 (a config error); with the key set, all pass.
func TestPolicyNeedsLanes(t *testing.T) {
	dir := t.TempDir()
	pol := budgetsPolicy(t, dir, "policy.yaml", "rate: 50", "rate: 50")
	cfg := "../../configs/capper.yaml"
	env := []string{"CAPPER_POLICY_SOURCE=" + pol}
	const key = "kafka.topics.lanes: is not set, but the policy has budgets (send pacing)"

	out, errOut, code := capper(t, env, "policy", "check", cfg)
	if code != 1 || !strings.Contains(out, "capper.yaml: "+key) {
		t.Errorf("policy check: exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, code = capper(t, env, "check-config", "--config", cfg)
	if code != 2 || !strings.Contains(errOut, key) {
		t.Errorf("check-config: exit %d\n%s", code, errOut)
	}
	out, errOut, code = capper(t, env, "run", "--config", cfg)
	lines := jsonLines(t, errOut)
	if code != 2 || out != "" || len(lines) == 0 {
		t.Fatalf("run: exit %d, want 2\n%s", code, errOut)
	}
	findLine(t, lines, "ERROR", key)
	if strings.Contains(errOut, "keeps deciding") {
		t.Errorf("run speaks of a policy in use, while none is:\n%s", errOut)
	}

	env = append(env, "CAPPER_KAFKA_TOPICS_LANES=capper-lanes")
	if out, errOut, code := capper(t, env, "policy", "check", cfg); code != 0 {
		t.Errorf("policy check with lanes: exit %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := capper(t, env, "check-config", "--config", cfg); code != 0 {
		t.Errorf("check-config with lanes: exit %d\n%s", code, errOut)
	}
}
