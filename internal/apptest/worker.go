// Package apptest boots a real worker for the tests that check what it
// registers: the docs' metric names (internal/docscheck) and the
// dashboard's and alerts' expressions (deploy). Only tests import it.
package apptest

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
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
	"github.com/capper-dev/capper/internal/policy"
	"github.com/capper-dev/capper/internal/testenv"
)

// Metrics is what a worker registered.
type Metrics struct {
	// Families are the names of every metric family registered, from the
	// Descs of its collectors (those without a series yet included).
	Families map[string]bool
	// Types are the types (COUNTER, GAUGE, HISTOGRAM, ...) of the families
	// that had series when the registry was gathered, the worker up.
	Types map[string]string
}

// WorkerMetrics runs a real worker (app.Run on configs/capper.yaml with
// every optional part on: a delay tier, refunds, campaign control, a plan
// store, send pacing with a budget of two lanes, users' own limits) against redis-server,
// kfake and a directory snapshot until it is up, gathers its registry,
// stops it, and returns what it registered.
func WorkerMetrics(t testing.TB) Metrics {
	t.Helper()
	ctx := context.Background()
	cfg := workerConfig(t)
	rds := testenv.StartRedis(t, testenv.RedisOptions{})
	kafka := testenv.StartKafka(t, 2, topicsOf(t, cfg))
	// The user-limits topic is compacted, as capper topics create makes it.
	if err := kafka.Cluster.CreateTopic(userLimitsTopic, 2, map[string]string{"cleanup.policy": "compact"}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	store, err := objstore.Open(ctx, dir, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := demo.BuildSnapshot(ctx, store, 1000, 1, time.Now); err != nil {
		t.Fatal(err)
	}
	cfg.Kafka.Brokers = kafka.Addrs
	cfg.Redis.Addrs = []string{rds.Addr()}
	cfg.Segments.Source = dir
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	rec := &recorder{reg: reg, names: map[string]bool{}}
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

	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, d := range rec.unnamed {
		t.Fatalf("no fqName in %s", d)
	}
	m := Metrics{Families: maps.Clone(rec.names), Types: map[string]string{}}
	for _, mf := range mfs {
		m.Types[mf.GetName()] = mf.GetType().String()
	}
	// The recorder must have seen the components' metrics, not only the
	// process collectors: otherwise every check of the callers would fail
	// for the wrong reason.
	for _, must := range []string{"capper_intents_total", "capper_redis_errors_total", "capper_snapshot_age_seconds",
		"capper_refunds_total", "capper_plans_active", "capper_pacing_oldest_wait_seconds", "capper_user_limits_applied_total", "go_goroutines"} {
		if !m.Families[must] {
			t.Fatalf("the worker registered no %s: the recorder missed the components' metrics (%v)", must, slices.Sorted(maps.Keys(m.Families)))
		}
	}
	// A budget's series appear once its policy is in force.
	if m.Types["capper_pacing_budget_rate"] == "" {
		t.Fatalf("the worker shows no budget (capper_pacing_budget_rate): the policy's budgets are not in force")
	}
	return m
}

// laneTopics is the prefix of the lane topics (kafka.topics.lanes).
const laneTopics = "send-intents-lanes"

// userLimitsTopic is kafka.topics.user_limits.
const userLimitsTopic = "capper-user-limits"

// budgets replaces the example policy's empty budgets: one budget of two
// lanes, so that every pacing metric is registered and a budget's series
// are shown.
const budgets = `budgets:
  - name: push-fcm
    rate: 100
    channels: [push]
    lanes:
      - {name: urgent, min_priority: high}
      - {name: bulk}
`

// workerConfig is configs/capper.yaml with every optional part on, the
// policy configs/policy.yaml with a budget (in a file), and what kfake
// needs.
func workerConfig(t testing.TB) *config.Config {
	t.Helper()
	cfg, err := config.Parse(configs.Example(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Kafka.DelayTiers = []config.DelayTier{{Delay: config.Duration(time.Minute), Topic: "send-intents-delay-1m"}}
	cfg.Kafka.Topics.DeliveryStatus = "delivery-status"
	cfg.Kafka.Topics.Control = testenv.ControlTopic
	cfg.Kafka.Topics.Lanes = laneTopics
	cfg.Kafka.Topics.UserLimits = userLimitsTopic
	cfg.Kafka.SessionTimeout = config.Duration(6 * time.Second) // kfake's minimum
	cfg.Kafka.RebalanceTimeout = config.Duration(6 * time.Second)
	cfg.Plans.Source = t.TempDir() // an empty plan store: the plans' metrics registered
	cfg.HTTP.Address = "127.0.0.1:0"
	example := configs.ExamplePolicy()
	if bytes.Count(example, []byte("\nbudgets: []\n")) != 1 {
		t.Fatal("configs/policy.yaml no longer has a line `budgets: []`: give WorkerMetrics' policy its budget another way")
	}
	pol := bytes.Replace(example, []byte("\nbudgets: []\n"), []byte("\n"+budgets), 1)
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, pol, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Policy.Source = "file://" + policyFile
	return cfg
}

// topicsOf are the topics cfg names, and the lane topics of its policy's
// budgets (kafka.topics.lanes is their prefix, not a topic).
func topicsOf(t testing.TB, cfg *config.Config) []string {
	t.Helper()
	var topics []string
	v := reflect.ValueOf(cfg.Kafka.Topics)
	for i := range v.NumField() {
		if s, ok := v.Field(i).Interface().(string); ok && s != "" && v.Type().Field(i).Name != "Lanes" && v.Type().Field(i).Name != "UserLimits" {
			topics = append(topics, s)
		}
	}
	for _, d := range cfg.Kafka.DelayTiers {
		topics = append(topics, d.Topic)
	}
	data, err := os.ReadFile(strings.TrimPrefix(cfg.Policy.Source, "file://"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := policy.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	set, ps := doc.Pacing()
	if len(ps) > 0 || set.Len() == 0 {
		t.Fatalf("the policy's budgets: %v (%d budgets)", ps, set.Len())
	}
	return append(append(topics, set.Topics(cfg.Kafka.Topics.Lanes)...), set.RetryTopics(cfg.Kafka.Topics.Lanes)...)
}

// recorder is a prometheus.Registerer that notes the names of every
// collector registered through it, then passes it on to the registry.
type recorder struct {
	reg *prometheus.Registry

	mu      sync.Mutex
	names   map[string]bool
	unnamed []*prometheus.Desc // a Desc whose name fqNameRE does not find
}

var fqNameRE = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return err
	}
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range ch {
		if g := fqNameRE.FindStringSubmatch(d.String()); g != nil {
			r.names[g[1]] = true
		} else {
			r.unnamed = append(r.unnamed, d)
		}
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
