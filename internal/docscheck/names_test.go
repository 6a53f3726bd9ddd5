package docscheck

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/capper-dev/capper/internal/apptest"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/plans"
	"github.com/capper-dev/capper/internal/policy"
)

// The reference pages that must name every metric, alert and key.
const (
	metricsPage = "docs/reference/metrics-and-alerts.md"
	configPage  = "docs/reference/worker-config.md"
	policyPage  = "docs/reference/policy-format.md"
	planPage    = "docs/reference/plan-format.md"
	rulesFile   = "deploy/helm/capper/templates/prometheusrule.yaml"
)

func page(t *testing.T, pages []*Page, path string) *Page {
	t.Helper()
	for _, p := range pages {
		if p.Path == path {
			return p
		}
	}
	t.Fatalf("no page %s", path)
	return nil
}

// named is one name found in the docs, and where.
type named struct {
	name, where string
}

var metricRE = regexp.MustCompile(`\bcapper_[a-z0-9_]*[a-z0-9]`)

// metricsNamed returns every capper_* name of the pages (prose, tables and
// blocks).
func metricsNamed(pages []*Page) []named {
	var out []named
	for _, p := range pages {
		for i, l := range p.Lines {
			for _, m := range metricRE.FindAllString(l, -1) {
				out = append(out, named{m, p.Where(i + 1)})
			}
		}
	}
	return out
}

// resolveMetric is the family a series name belongs to (a histogram's
// _bucket, _sum and _count are its family's), or "".
func resolveMetric(families map[string]bool, name string) string {
	if families[name] {
		return name
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if f, ok := strings.CutSuffix(name, suffix); ok && families[f] {
			return f
		}
	}
	return ""
}

// checkMetrics returns one problem per metric named that the worker does
// not register, and per capper_* family the reference page does not name.
func checkMetrics(pages []*Page, ref *Page, families map[string]bool) []string {
	var problems []string
	for _, n := range metricsNamed(pages) {
		if resolveMetric(families, n.name) == "" {
			problems = append(problems, fmt.Sprintf("%s: %s: a worker registers no such metric", n.where, n.name))
		}
	}
	inRef := map[string]bool{}
	for _, n := range metricsNamed([]*Page{ref}) {
		inRef[resolveMetric(families, n.name)] = true
	}
	for _, f := range sortedKeys(families) {
		if strings.HasPrefix(f, "capper_") && !inRef[f] {
			problems = append(problems, fmt.Sprintf("%s: the worker registers %s; the metrics table does not name it", ref.Path, f))
		}
	}
	return problems
}

// TestMetricsNamed runs a real worker (apptest.WorkerMetrics: the
// documented config with every optional part on) and checks the docs'
// metric names against the families it registers, both ways.
func TestMetricsNamed(t *testing.T) {
	pages := loadPages(t)
	families := apptest.WorkerMetrics(t).Families
	t.Logf("the worker registered %d metric families", len(families))
	for _, problem := range checkMetrics(pages, page(t, pages, metricsPage), families) {
		t.Error(problem)
	}
	t.Run("can fail", func(t *testing.T) {
		ref := Parse(metricsPage, "| `capper_intents_total{outcome}` | x |\n| `capper_intent_total` | a typo |\n")
		got := checkMetrics([]*Page{ref}, ref, map[string]bool{"capper_intents_total": true, "capper_batch_size": true})
		want := []string{"capper_intent_total: a worker registers no such metric", "registers capper_batch_size"}
		if len(got) != len(want) {
			t.Fatalf("got %q, want %d problems", got, len(want))
		}
		for i, w := range want {
			if !strings.Contains(got[i], w) {
				t.Errorf("problem %q, want it to say %q", got[i], w)
			}
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

// configSections are the top-level keys of the worker config (its yaml
// tags, so that a new section is checked too).
var configSections = func() []string {
	var out []string
	t := reflect.TypeFor[config.Config]()
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag != "" && tag != "-" {
			out = append(out, tag)
		}
	}
	return out
}()

// configKeyRE finds a config key at the start of inline code: the key
// path (after "config." in Helm values), then the end of the span, ':',
// '=', a space or a comma.
var configKeyRE = regexp.MustCompile(`^(?:config\.)?((?:` + strings.Join(configSections, "|") + `)(?:\.[a-z0-9_]+)+)(?:$|[:=, ])`)

// fileExtRE: a span such as policy.yaml names a file, not a key.
var fileExtRE = regexp.MustCompile(`\.(ya?ml|json|md|go|lua|tmpl|csv|txt|gz|roaring|jsonl)$`)

// configKeys returns every key path of the worker config: the leaves and
// sections of the default config's effective YAML (with the deprecated
// inline policy), the keys the environment can set (secrets and
// deprecated keys among them), and each delay tier's keys.
func configKeys(t *testing.T) (all map[string]bool, leaves []string) {
	t.Helper()
	all = map[string]bool{}
	cfg := config.Default()
	out, err := cfg.Effective()
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(prefix string, n *yaml.Node)
	walk = func(prefix string, n *yaml.Node) {
		if n.Kind != yaml.MappingNode {
			leaves = append(leaves, prefix)
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if prefix != "" {
				p = prefix + "." + p
			}
			all[p] = true
			walk(p, n.Content[i+1])
		}
	}
	walk("", doc.Content[0])
	for _, path := range config.EnvNames() {
		all[path] = true
		if !slices.Contains(leaves, path) {
			leaves = append(leaves, path)
		}
	}
	for _, k := range yamlKeys(reflect.TypeFor[config.DelayTier]()) {
		all["kafka.delay_tiers."+k] = true
	}
	sort.Strings(leaves)
	return all, leaves
}

// checkConfigKeys returns one problem per config key named in inline code
// that does not exist, and per key the reference page does not name.
func checkConfigKeys(pages []*Page, ref *Page, all map[string]bool, leaves []string) []string {
	var problems []string
	for _, p := range pages {
		for _, s := range p.CodeSpans() {
			m := configKeyRE.FindStringSubmatch(s.Text)
			if m == nil || fileExtRE.MatchString(m[1]) {
				continue
			}
			if !all[m[1]] {
				problems = append(problems, fmt.Sprintf("%s: %s: the worker config has no such key", p.Where(s.Line), m[1]))
			}
		}
	}
	inRef := map[string]bool{}
	for _, s := range ref.CodeSpans() {
		if m := configKeyRE.FindStringSubmatch(s.Text); m != nil {
			inRef[m[1]] = true
		}
	}
	for _, k := range leaves {
		if !inRef[k] {
			problems = append(problems, fmt.Sprintf("%s: the config key %s is not named (as `%s`)", ref.Path, k, k))
		}
	}
	return problems
}

// TestConfigKeysNamed: every config key named in the docs exists, and the
// worker config page names every key.
func TestConfigKeysNamed(t *testing.T) {
	pages := loadPages(t)
	all, leaves := configKeys(t)
	if len(leaves) < 80 {
		t.Fatalf("found only %d config keys", len(leaves))
	}
	for _, problem := range checkConfigKeys(pages, page(t, pages, configPage), all, leaves) {
		t.Error(problem)
	}
	t.Run("can fail", func(t *testing.T) {
		ref := Parse(configPage, "`kafka.brokers` and `config.kafka.client_id`, `kafka.brokerz`, `policy.yaml`, `capping.Memory`, `redis.existingSecret`\n")
		got := checkConfigKeys([]*Page{ref}, ref, all, []string{"kafka.brokers", "kafka.client_id", "kafka.group_id"})
		want := []string{"kafka.brokerz: the worker config has no such key", "kafka.group_id is not named"}
		if len(got) != len(want) {
			t.Fatalf("got %q, want %d problems", got, len(want))
		}
		for i, w := range want {
			if !strings.Contains(got[i], w) {
				t.Errorf("problem %q, want it to say %q", got[i], w)
			}
		}
	})
}

var (
	alertRE     = regexp.MustCompile(`\bCapper[A-Z][A-Za-z]+\b`)
	ruleAlertRE = regexp.MustCompile(`(?m)^\s*- alert: (\S+)`)
)

// checkAlerts returns one problem per alert named that the chart does not
// define, and per alert the reference page does not name.
func checkAlerts(pages []*Page, ref *Page, alerts []string) []string {
	var problems []string
	for _, p := range pages {
		for i, l := range p.Lines {
			for _, a := range alertRE.FindAllString(l, -1) {
				if !slices.Contains(alerts, a) {
					problems = append(problems, fmt.Sprintf("%s: %s: the chart's PrometheusRule has no such alert", p.Where(i+1), a))
				}
			}
		}
	}
	inRef := strings.Join(ref.Lines, "\n")
	for _, a := range alerts {
		if !strings.Contains(inRef, "`"+a+"`") {
			problems = append(problems, fmt.Sprintf("%s: the alert %s is not named", ref.Path, a))
		}
	}
	return problems
}

// TestAlertsNamed: every alert named in the docs is one of the chart's,
// and the metrics page names every alert.
func TestAlertsNamed(t *testing.T) {
	pages := loadPages(t)
	data, err := os.ReadFile(filepath.Join(root, rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, m := range ruleAlertRE.FindAllStringSubmatch(string(data), -1) {
		alerts = append(alerts, m[1])
	}
	if len(alerts) < 10 {
		t.Fatalf("found only %d alerts in %s", len(alerts), rulesFile)
	}
	for _, problem := range checkAlerts(pages, page(t, pages, metricsPage), alerts) {
		t.Error(problem)
	}
	t.Run("can fail", func(t *testing.T) {
		ref := Parse(metricsPage, "`CapperWorkersDown`, CapperWorkerDown\n")
		got := checkAlerts([]*Page{ref}, ref, []string{"CapperWorkersDown", "CapperFailOpen"})
		if len(got) != 2 || !strings.Contains(got[0], "CapperWorkerDown: the chart") || !strings.Contains(got[1], "CapperFailOpen is not named") {
			t.Errorf("got %q", got)
		}
	})
}

// yamlKeys returns the key paths of a document type, from its yaml tags
// (inline structs flattened, slices of structs by their element's keys).
func yamlKeys(typ reflect.Type) []string {
	var out []string
	for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
		typ = typ.Elem()
	}
	if typ.Kind() != reflect.Struct || typ == reflect.TypeFor[time.Time]() {
		return nil
	}
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if strings.Contains(opts, "inline") {
			out = append(out, yamlKeys(f.Type)...)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out = append(out, name)
		for _, sub := range yamlKeys(f.Type) {
			out = append(out, name+"."+sub)
		}
	}
	return out
}

// mapKeyRE finds the keys of YAML written inline: {slots: N, below: P}.
var mapKeyRE = regexp.MustCompile(`([a-z_]+):`)

// checkDocumentKeys returns one problem per key of a document type that
// its format page does not name as inline code: a key "a.b" is named by
// `b` or `a.b`, or by `b: ...` anywhere in a span ({b: ...}).
func checkDocumentKeys(ref *Page, keys []string) []string {
	spans := map[string]bool{}
	for _, s := range ref.CodeSpans() {
		word := strings.TrimLeft(s.Text, "{")
		if i := strings.IndexAny(word, ":= ,"); i >= 0 {
			word = word[:i]
		}
		spans[word] = true
		for _, m := range mapKeyRE.FindAllStringSubmatch(s.Text, -1) {
			spans[m[1]] = true
		}
	}
	var problems []string
	for _, k := range keys {
		last := k[strings.LastIndex(k, ".")+1:]
		if !spans[k] && !spans[last] {
			problems = append(problems, fmt.Sprintf("%s: the key %s is not named", ref.Path, k))
		}
	}
	return problems
}

// TestDocumentKeysNamed: the policy and plan format pages name every key
// of their documents.
func TestDocumentKeysNamed(t *testing.T) {
	pages := loadPages(t)
	for _, c := range []struct {
		page string
		typ  reflect.Type
	}{
		{policyPage, reflect.TypeFor[policy.Document]()},
		{planPage, reflect.TypeFor[plans.Spec]()},
	} {
		keys := yamlKeys(c.typ)
		if len(keys) < 6 {
			t.Fatalf("%s: found only %d keys: %v", c.typ, len(keys), keys)
		}
		for _, problem := range checkDocumentKeys(page(t, pages, c.page), keys) {
			t.Error(problem)
		}
	}
	t.Run("can fail", func(t *testing.T) {
		ref := Parse(policyPage, "`channels` and `{name: d, window: 24h}`\n")
		got := checkDocumentKeys(ref, []string{"channels", "segments.name", "segments.limits.window", "segments.limits.max"})
		if len(got) != 1 || !strings.Contains(got[0], "segments.limits.max is not named") {
			t.Errorf("got %q", got)
		}
	})
}
