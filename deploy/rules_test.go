package deploy

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/capper-dev/capper/internal/testenv"
)

const (
	// alertTestsPath holds promtool unit tests of every alert, written by hand.
	alertTestsPath = "prometheus/alerts_test.yaml"
	// rulesFileName is the rule file alerts_test.yaml names (rule_files); the
	// test writes the rendered rules there, next to a copy of the tests.
	rulesFileName = "capper-rules.yaml"
)

// promtoolBinary finds promtool: $PROMTOOL, else PATH (scripts/ensure-deps.sh
// installs Debian's prometheus package for it). Missing, it skips the test on
// a developer machine and fails it under CI (testenv.RequireServers).
func promtoolBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("PROMTOOL=%s: %v", p, err)
		}
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		if testenv.RequireServers() {
			t.Fatalf("promtool not found ($PROMTOOL, PATH); make deps installs it (Debian package prometheus)")
		}
		t.Skip("promtool not found; run make deps (or apt-get install prometheus)")
	}
	return p
}

// promtool runs promtool and returns its combined output; a non-zero exit is
// an error.
func promtool(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(promtoolBinary(t), args...).CombinedOutput()
	return string(out), err
}

// alertTests is the part of a promtool test file the coverage check reads.
type alertTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name  string `json:"name"`
		Cases []struct {
			EvalTime  string           `json:"eval_time"`
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// writeRules renders the chart and writes its PrometheusRule's groups as a
// plain Prometheus rule file; it returns the alert names.
func writeRules(t *testing.T, path string, files []string, sets ...string) []string {
	t.Helper()
	m := mustRender(t, files, sets...)
	pr := one[prometheusRule](t, m, "PrometheusRule")
	data, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
			}
		}
	}
	return alerts
}

// TestAlertRules renders the chart's alerts (default thresholds, the
// release and namespace alerts_test.yaml expects), checks them with promtool
// and runs the unit tests of prometheus/alerts_test.yaml against them. Every
// alert must have a case where it fires and one where it stays silent.
func TestAlertRules(t *testing.T) {
	dir := t.TempDir()
	alerts := writeRules(t, filepath.Join(dir, rulesFileName), nil, "prometheusRule.enabled=true")
	if out, err := promtool(t, "check", "rules", filepath.Join(dir, rulesFileName)); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}

	src, err := os.ReadFile(alertTestsPath)
	if err != nil {
		t.Fatal(err)
	}
	testFile := filepath.Join(dir, filepath.Base(alertTestsPath))
	if err := os.WriteFile(testFile, src, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := promtool(t, "test", "rules", testFile); err != nil {
		t.Fatalf("promtool test rules %s: %v\n%s", alertTestsPath, err, out)
	}

	// Coverage: promtool passes a test of an alert that does not exist when
	// nothing is expected, and says nothing about alerts without tests.
	var tests alertTests
	if err := yaml.Unmarshal(src, &tests); err != nil {
		t.Fatalf("%s: %v", alertTestsPath, err)
	}
	if !slices.Equal(tests.RuleFiles, []string{rulesFileName}) {
		t.Errorf("%s: rule_files %v, want [%s] (the test writes the rendered rules there)", alertTestsPath, tests.RuleFiles, rulesFileName)
	}
	fires, silent := map[string]int{}, map[string]int{}
	for _, g := range tests.Tests {
		for _, c := range g.Cases {
			if !slices.Contains(alerts, c.Alertname) {
				t.Errorf("%s: test %q at %s: the chart has no alert %q (alerts: %v)", alertTestsPath, g.Name, c.EvalTime, c.Alertname, alerts)
			}
			if len(c.ExpAlerts) > 0 {
				fires[c.Alertname]++
			} else {
				silent[c.Alertname]++
			}
		}
	}
	for _, a := range alerts {
		if fires[a] == 0 || silent[a] == 0 {
			t.Errorf("%s: alert %s has %d case(s) where it fires and %d where it stays silent; want at least one of each",
				alertTestsPath, a, fires[a], silent[a])
		}
	}

	// The tests can fail: expecting silence everywhere must fail the case of
	// every alert that fires.
	t.Run("can fail", func(t *testing.T) {
		var doc map[string]any
		if err := yaml.Unmarshal(src, &doc); err != nil {
			t.Fatal(err)
		}
		for _, g := range doc["tests"].([]any) {
			for _, c := range g.(map[string]any)["alert_rule_test"].([]any) {
				c.(map[string]any)["exp_alerts"] = []any{}
			}
		}
		silenced, err := yaml.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(testFile, silenced, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := promtool(t, "test", "rules", testFile)
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("promtool test rules with every expectation silent: %v, want it to fail\n%s", err, out)
		}
		for _, a := range alerts {
			if !strings.Contains(out, "alertname: "+a+",") {
				t.Errorf("promtool did not report %s firing against an expectation of silence:\n%s", a, out)
			}
		}
	})

	// The rules of the all-on values files (another selector, extra rules)
	// are valid too.
	for _, f := range allOnValues {
		path := filepath.Join(dir, "all-on-"+filepath.Base(f))
		writeRules(t, path, []string{f})
		if out, err := promtool(t, "check", "rules", path); err != nil {
			t.Errorf("promtool check rules (%s): %v\n%s", f, err, out)
		}
	}
}
