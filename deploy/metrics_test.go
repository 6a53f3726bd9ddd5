package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capper-dev/capper/configs"
	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/demo"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/testenv"
)

const dashboardPath = "grafana/capper.json"

// recorder is a prometheus.Registerer that notes the Descs of every
// collector registered through it, then passes it on to the registry.
type recorder struct {
	reg *prometheus.Registry

	mu    sync.Mutex
	descs []*prometheus.Desc
}

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return err
	}
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range ch {
		r.descs = append(r.descs, d)
	}
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err) // prometheus.Registerer's contract for MustRegister
		}
	}
}

func (r *recorder) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

var fqNameRE = regexp.MustCompile(`fqName: "([^"]+)"`)

// workerRegistry runs a real capper worker (app.Run on the documented
// config, against redis-server, kfake and a directory snapshot) until it is
// up, and returns every metric family it registered.
func workerRegistry(t *testing.T) registry {
	t.Helper()
	ctx := context.Background()
	rds := testenv.StartRedis(t, testenv.RedisOptions{})
	kafka := testenv.StartKafka(t, 2, []string{"send-intents", "deliveries", "suppressed", "send-intents-dlq", "capper-control", "send-intents-delay-1m"})
	dir := t.TempDir()
	store, err := objstore.Open(ctx, dir, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := demo.BuildSnapshot(ctx, store, 1000, 1, time.Now); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadWithEnv("../configs/capper.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Kafka.Brokers = kafka.Addrs
	cfg.Kafka.SessionTimeout = config.Duration(6 * time.Second) // kfake's minimum
	cfg.Kafka.RebalanceTimeout = config.Duration(6 * time.Second)
	cfg.Redis.Addrs = []string{rds.Addr()}
	cfg.Segments.Source = dir
	cfg.Plans.Source = t.TempDir() // an empty plan store: the plans' metrics registered
	// Campaign control (it needs a delay tier): its metrics registered.
	cfg.Kafka.Topics.Control = "capper-control"
	cfg.Kafka.DelayTiers = []config.DelayTier{{Delay: config.Duration(time.Minute), Topic: "send-intents-delay-1m"}}
	cfg.HTTP.Address = "127.0.0.1:0"
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, configs.ExamplePolicy(), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Policy.Source = "file://" + policyFile
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	rec := &recorder{reg: reg}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- app.Run(runCtx, app.Options{Config: cfg, Registry: reg, Registerer: rec, Build: cli.BuildOf("test", ""),
			Started: func(addr string) { started <- addr }})
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("worker did not start: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("worker did not start within 60s")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("worker stopped with %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("worker did not stop within 60s")
	}

	r := registry{families: map[string]bool{}, types: map[string]string{}}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, d := range rec.descs {
		g := fqNameRE.FindStringSubmatch(d.String())
		if g == nil {
			t.Fatalf("no fqName in %s", d)
		}
		r.families[g[1]] = true
	}
	for _, mf := range mfs {
		r.types[mf.GetName()] = mf.GetType().String()
	}
	// The recorder must have seen the components' metrics, not only the
	// process collectors: otherwise every check below would fail for the
	// wrong reason.
	for _, must := range []string{"capper_intents_total", "capper_redis_errors_total", "capper_snapshot_age_seconds", "go_goroutines"} {
		if !r.families[must] {
			t.Fatalf("recorded families lack %s: %v", must, sortedKeys(r.families))
		}
	}
	return r
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
