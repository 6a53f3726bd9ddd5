package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/capper-dev/capper/internal/apptest"
)

const dashboardPath = "grafana/capper.json"

// workerRegistry runs a real capper worker (apptest.WorkerMetrics: the
// documented config with every optional part on) until it is up, and
// returns every metric family it registered.
func workerRegistry(t *testing.T) registry {
	t.Helper()
	m := apptest.WorkerMetrics(t)
	return registry{families: m.Families, types: m.Types}
}

// dashboard is the part of a Grafana dashboard the checks read.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID          int             `json:"id"`
	Type        string          `json:"type"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Datasource  json.RawMessage `json:"datasource"`
	Targets     []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // collapsed rows
}

// expression is one PromQL expression of the dashboard or of the alerts.
type expression struct {
	where string
	expr  string
	names func(string) ([]string, error)
}

func dashboardExpressions(t *testing.T, data []byte) []expression {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q title %q", d.UID, d.Title)
	}
	var exprs []expression
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				t.Errorf("variable %s: query %s", v.Name, v.Query)
			}
		}
		exprs = append(exprs, expression{"variable " + v.Name, q.Query, grafanaQueryNames})
	}
	if !vars["datasource"] {
		t.Error("dashboard has no datasource variable: it would be bound to one Prometheus")
	}
	ids := map[int]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if !strings.Contains(string(p.Datasource), "${datasource}") {
				t.Errorf("panel %q: datasource %s, want ${datasource}", p.Title, p.Datasource)
			}
			if p.Description == "" {
				t.Errorf("panel %q has no description", p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no targets", p.Title)
			}
			for _, tg := range p.Targets {
				exprs = append(exprs, expression{fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), tg.Expr, metricNames})
			}
		}
	}
	walk(d.Panels)
	return exprs
}

// ruleExpressions renders the chart with the PrometheusRule on (default
// thresholds and each all-on values file) and returns every rule's expr.
func ruleExpressions(t *testing.T) []expression {
	t.Helper()
	var exprs []expression
	for _, r := range []struct {
		files []string
		sets  []string
	}{{nil, []string{"prometheusRule.enabled=true"}}, {[]string{allOnValues[0]}, nil}, {[]string{allOnValues[1]}, nil}} {
		m := mustRender(t, r.files, r.sets...)
		pr := one[prometheusRule](t, m, "PrometheusRule")
		for _, g := range pr.Spec.Groups {
			for _, rule := range g.Rules {
				exprs = append(exprs, expression{fmt.Sprintf("%v alert %s", r.files, rule.Alert), rule.Expr, metricNames})
			}
		}
	}
	return exprs
}

// checkExpressions returns one problem per expression that selects a metric
// the worker does not export, or that cannot be read.
func checkExpressions(r registry, exprs []expression) []string {
	var problems []string
	for _, e := range exprs {
		unknown, err := r.unknownMetrics(e.expr, e.names)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s: %v: %s", e.where, err, e.expr))
		case len(unknown) > 0:
			problems = append(problems, fmt.Sprintf("%s: capper exports no %v: %s", e.where, unknown, e.expr))
		}
	}
	return problems
}

// TestExpressionsUseExportedMetrics checks every dashboard and alert
// expression against the metric families a real worker registers, and that
// the dashboard shows every capper_* family.
func TestExpressionsUseExportedMetrics(t *testing.T) {
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	reg := workerRegistry(t)

	t.Run("dashboard", func(t *testing.T) {
		dash := dashboardExpressions(t, data)
		for _, p := range checkExpressions(reg, dash) {
			t.Errorf("%s: %s", dashboardPath, p)
		}
		shown := map[string]bool{}
		for _, e := range dash {
			names, _ := e.names(e.expr)
			for _, n := range names {
				shown[reg.resolve(n)] = true
			}
		}
		for _, f := range sortedKeys(reg.families) {
			if strings.HasPrefix(f, "capper_") && !shown[f] {
				t.Errorf("%s is exported but not on %s: add a panel", f, dashboardPath)
			}
		}
	})

	t.Run("alerts", func(t *testing.T) {
		for _, p := range checkExpressions(reg, ruleExpressions(t)) {
			t.Errorf("PrometheusRule: %s", p)
		}
	})

	// The check can fail: the same dashboard with one metric misspelt, and
	// an expression with a misspelt function, are reported.
	t.Run("typos", func(t *testing.T) {
		typo := strings.Replace(string(data), "capper_redis_errors_total", "capper_redis_error_total", 1)
		bad := checkExpressions(reg, dashboardExpressions(t, []byte(typo)))
		if len(bad) != 1 || !strings.Contains(bad[0], "capper_redis_error_total") {
			t.Errorf("a misspelt metric on the dashboard was not reported exactly once: %q", bad)
		}
		badRule := []expression{{"typo", `sum(rat(capper_redis_errors_total[5m])) > 0`, metricNames}}
		if bad := checkExpressions(reg, badRule); len(bad) != 1 || !strings.Contains(bad[0], `unknown function "rat"`) {
			t.Errorf("a misspelt function was not reported: %q", bad)
		}
	})
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
