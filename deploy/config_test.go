package deploy

// The chart refuses at render what capper would refuse at start: the config
// keys in values.schema.json, the rules across keys in the validate
// template. These tests keep both in step with internal/config.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/capper-dev/capper/internal/config"
)

const (
	schemaPath  = chartDir + "/values.schema.json"
	helpersPath = chartDir + "/templates/_helpers.tpl"
	testdataDir = "../internal/config/testdata"
)

// unrenderableBadFiles are the bad config files whose problem the chart
// cannot see, with the reason. Every other *.bad.yaml must fail the render.
var unrenderableBadFiles = map[string]string{
	"two-docs.bad.yaml": "more than one YAML document is a property of the file, not of a key: " +
		"the chart writes the ConfigMap itself, always one document (toYaml of .Values.config)",
	"bad-time-zone.bad.yaml": "whether a time zone exists is a question for the tz database, which templates " +
		"cannot read (the schema refuses only an empty name and Local)",
}

// readSchema returns values.schema.json decoded.
func readSchema(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("%s: %v", schemaPath, err)
	}
	return s
}

// schemaDiff compares a Go config type with its schema node and returns one
// problem per key missing on either side or of the wrong JSON type.
func schemaDiff(root map[string]any, typ reflect.Type, node map[string]any, path string) []string {
	node, refName := resolveRef(root, node)
	var problems []string
	wantType := func(jsonType string) {
		if node["type"] != jsonType {
			problems = append(problems, fmt.Sprintf("%s: schema type %v, want %s (Go %s)", path, node["type"], jsonType, typ))
		}
	}
	switch {
	case typ == reflect.TypeFor[config.Duration]():
		if refName != "duration" {
			problems = append(problems, fmt.Sprintf("%s: a duration, want $ref #/$defs/duration", path))
		}
	case typ == reflect.TypeFor[config.Secret]():
		if refName != "secret" {
			problems = append(problems, fmt.Sprintf("%s: a secret, want $ref #/$defs/secret", path))
		}
	case typ.Kind() == reflect.Pointer:
		return schemaDiff(root, typ.Elem(), node, path)
	case typ.Kind() == reflect.Struct:
		wantType("object")
		if node["additionalProperties"] != false {
			problems = append(problems, fmt.Sprintf("%s: additionalProperties is not false; an unknown key would pass", path))
		}
		props, _ := node["properties"].(map[string]any)
		seen := map[string]bool{}
		// The keys of typ, those of an inline struct (the policy in
		// capping) included, as in the file.
		var fields []reflect.StructField
		var collect func(t reflect.Type)
		collect = func(t reflect.Type) {
			for i := range t.NumField() {
				f := t.Field(i)
				if name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ","); name == "" && opts == "inline" && f.Type.Kind() == reflect.Struct {
					collect(f.Type)
					continue
				}
				fields = append(fields, f)
			}
		}
		collect(typ)
		for _, f := range fields {
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			seen[name] = true
			p, ok := props[name].(map[string]any)
			if !ok {
				problems = append(problems, fmt.Sprintf("%s.%s: no property in the schema", path, name))
				continue
			}
			problems = append(problems, schemaDiff(root, f.Type, p, path+"."+name)...)
		}
		for name := range props {
			if !seen[name] {
				problems = append(problems, fmt.Sprintf("%s.%s: in the schema but not a key of %s", path, name, typ))
			}
		}
	case typ.Kind() == reflect.Slice:
		wantType("array")
		items, ok := node["items"].(map[string]any)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: array without items", path))
			break
		}
		problems = append(problems, schemaDiff(root, typ.Elem(), items, path+"[]")...)
	case typ.Kind() == reflect.String:
		wantType("string")
	case typ.Kind() == reflect.Bool:
		wantType("boolean")
	case typ.Kind() == reflect.Int, typ.Kind() == reflect.Int64:
		wantType("integer")
	case typ.Kind() == reflect.Float64:
		wantType("number")
	default:
		problems = append(problems, fmt.Sprintf("%s: Go type %s not handled by this test", path, typ))
	}
	slices.Sort(problems)
	return problems
}

// resolveRef follows a "#/$defs/name" reference; it returns the node and the
// definition's name ("" for an inline node).
func resolveRef(root, node map[string]any) (map[string]any, string) {
	ref, ok := node["$ref"].(string)
	if !ok {
		return node, ""
	}
	name, ok := strings.CutPrefix(ref, "#/$defs/")
	defs, _ := root["$defs"].(map[string]any)
	def, found := defs[name].(map[string]any)
	if !ok || !found {
		return map[string]any{"$ref": "unresolved " + ref}, ""
	}
	resolved, _ := resolveRef(root, def)
	return resolved, name
}

// TestChartConfigSchemaKeys: values.schema.json has exactly the keys of
// config.Config (yaml tags), of the matching JSON types, every object closed.
func TestChartConfigSchemaKeys(t *testing.T) {
	root := readSchema(t)
	cfgNode := root["properties"].(map[string]any)["config"].(map[string]any)
	for _, p := range schemaDiff(root, reflect.TypeFor[config.Config](), cfgNode, "config") {
		t.Error(p)
	}
	// The limits of a segment and of the default policy are one definition,
	// so that a new limit key is added once.
	capping := cfgNode["properties"].(map[string]any)["capping"].(map[string]any)["properties"].(map[string]any)
	segLimits := capping["segments"].(map[string]any)["items"].(map[string]any)["properties"].(map[string]any)["limits"]
	defLimits := capping["default_policy"].(map[string]any)["properties"].(map[string]any)["limits"]
	want := map[string]any{"$ref": "#/$defs/limits"}
	if !reflect.DeepEqual(segLimits, want) || !reflect.DeepEqual(defLimits, want) {
		t.Errorf("capping.segments[].limits %v and capping.default_policy.limits %v, want both %v", segLimits, defLimits, want)
	}

	t.Run("can fail", func(t *testing.T) {
		root := readSchema(t)
		worker := root["properties"].(map[string]any)["config"].(map[string]any)["properties"].(map[string]any)["worker"].(map[string]any)
		props := worker["properties"].(map[string]any)
		props["batch_sise"] = props["batch_size"]
		delete(props, "batch_size")
		props["enforce"] = map[string]any{"type": "string"}
		got := schemaDiff(root, reflect.TypeFor[config.Config](), root["properties"].(map[string]any)["config"].(map[string]any), "config")
		want := []string{
			"config.worker.batch_sise: in the schema but not a key of config.Worker",
			"config.worker.batch_size: no property in the schema",
			"config.worker.enforce: schema type string, want boolean (Go bool)",
		}
		if !slices.Equal(got, want) {
			t.Errorf("a misspelt and a mistyped key gave %q, want %q", got, want)
		}
	})
}

// chartDefaults returns the body of the chart's "capper.cfg.defaults".
func chartDefaults(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(helpersPath)
	if err != nil {
		t.Fatal(err)
	}
	g := regexp.MustCompile(`(?s)\{\{- define "capper\.cfg\.defaults" -\}\}\n(.*?)\{\{- end -\}\}`).FindSubmatch(data)
	if g == nil {
		t.Fatalf("%s: no define \"capper.cfg.defaults\"", helpersPath)
	}
	if strings.Contains(string(g[1]), "{{") {
		t.Fatalf("capper.cfg.defaults must be plain YAML:\n%s", g[1])
	}
	return string(g[1])
}

// TestChartConfigDefaults: the defaults the chart assumes for keys the values
// leave out are capper's (config.Default); capper parses them strictly, so a
// key that does not exist fails too.
func TestChartConfigDefaults(t *testing.T) {
	differs := func(defaults string) error {
		cfg, err := config.Parse([]byte(defaults), nil)
		if err != nil {
			return err
		}
		// The chart's defaults hold the policy's lists (it checks an
		// inline policy against them): which keys a file set is not a
		// default.
		cfg.Capping.InlinePolicy, cfg.Deprecations = nil, nil
		if want := config.Default(); !reflect.DeepEqual(*cfg, want) {
			got, _ := cfg.Effective()
			return fmt.Errorf("differ from config.Default(); parsed over them they give:\n%s", got)
		}
		return nil
	}
	defaults := chartDefaults(t)
	if err := differs(defaults); err != nil {
		t.Errorf("%s capper.cfg.defaults: %v", helpersPath, err)
	}
	// It can fail.
	if differs(strings.Replace(defaults, "heartbeat_interval: 1s", "heartbeat_interval: 4s", 1)) == nil {
		t.Error("a changed default was not noticed")
	}
}

// configValues writes a values file whose config is the given config file's
// content, and returns its path.
func configValues(t *testing.T, data []byte) string {
	t.Helper()
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("config: %v", err)
	}
	var b strings.Builder
	if doc == nil {
		// An empty file is an empty config; `config:` alone would be null,
		// which deletes the chart's config.
		b.WriteString("config: {}\n")
	} else {
		b.WriteString("config:\n")
		for _, l := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
			b.WriteString("  " + l + "\n")
		}
	}
	// Not in t.TempDir: its name comes from the test's, here a config, and
	// helm splits a -f value at commas.
	f, err := os.CreateTemp("", "capper-values-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	if _, err := f.WriteString(b.String()); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// renderConfig renders chart with the config file's content as config (over
// the chart's own values), plus --set flags.
func renderConfig(t *testing.T, chart string, data []byte, sets ...string) (string, error) {
	t.Helper()
	args := []string{"template", testRelease, chart, "--namespace", testNS, "-f", configValues(t, data)}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	return runHelm(t, args...)
}

var (
	lineRE  = regexp.MustCompile(`^line (\d+): `)
	ownerRE = regexp.MustCompile(` \((segment|limit|budget|lane) "[^"]*"\)`)
)

// capperKey returns the key config.Parse's first error is about, as a path
// such as worker.batch_size, kafka.brokers[0] or
// capping.segments[1].limits[0].window (capper names the segment and limit
// beside their indexes; they are dropped here). Decoding errors name a line,
// which is mapped to its key.
func capperKey(t *testing.T, data []byte, err error) string {
	t.Helper()
	first, _, _ := strings.Cut(err.Error(), "\n")
	if g := lineRE.FindStringSubmatch(first); g != nil {
		n, _ := strconv.Atoi(g[1])
		return keyAtLine(t, data, n)
	}
	key, _, ok := strings.Cut(first, ": ")
	if !ok {
		t.Fatalf("capper's error %q names no key", first)
	}
	return ownerRE.ReplaceAllString(key, "")
}

// keyAtLine returns the path of the deepest key on line n of a YAML document.
func keyAtLine(t *testing.T, data []byte, n int) string {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		t.Fatalf("keyAtLine: %v", err)
	}
	var found []string
	depth := -1
	var walk func(node *yaml.Node, path string, d int)
	walk = func(node *yaml.Node, path string, d int) {
		switch node.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(node.Content); i += 2 {
				k, v := node.Content[i], node.Content[i+1]
				p := strings.TrimPrefix(path+"."+k.Value, ".")
				if k.Line == n {
					if d > depth {
						found, depth = nil, d
					}
					if d == depth {
						found = append(found, p)
					}
				}
				walk(v, p, d+1)
			}
		case yaml.SequenceNode:
			for i, c := range node.Content {
				walk(c, fmt.Sprintf("%s[%d]", path, i), d+1)
			}
		}
	}
	walk(doc.Content[0], "", 0)
	if len(found) != 1 {
		t.Fatalf("line %d holds keys %v: write the case so that one key is deepest on its line", n, found)
	}
	return found[0]
}

// namesKey reports whether helm's error names the config key: as the
// validate template does (config.worker.retry_max: ...) or as the schema
// does (at '/config/worker/batch_size': ...; at '/config/redis': missing
// property 'master_name'; at '/config/capping/channels': items at 0 and 1
// are equal).
func namesKey(stderr, key string) bool {
	dotted := "config." + key
	ptr := "/config/" + strings.NewReplacer(".", "/", "[", "/", "]", "").Replace(key)
	parent, last := ptr[:strings.LastIndex(ptr, "/")], ptr[strings.LastIndex(ptr, "/")+1:]
	for _, l := range strings.Split(stderr, "\n") {
		switch {
		case strings.Contains(l, dotted+":"), strings.Contains(l, dotted+" "),
			strings.Contains(l, "'"+ptr+"'"),
			strings.Contains(l, "'"+parent+"'") && (strings.Contains(l, "'"+last+"'") || strings.Contains(l, " and "+last+" are equal")):
			return true
		}
	}
	return false
}

func TestNamesKey(t *testing.T) {
	for _, tc := range []struct {
		stderr, key string
		want        bool
	}{
		{"- at '/config/worker/batch_size': minimum: got 0, want 1", "worker.batch_size", true},
		{"- at '/config/worker/batch_size': minimum: got 0, want 1", "worker.batch_wait", false},
		{"- at '/config/capping/segments/0/limits/0': missing properties 'name', 'max'", "capping.segments[0].limits[0].max", true},
		{"- at '/config/capping/segments/0/limits/0': missing properties 'name', 'max'", "capping.segments[0].limits[0].window", false},
		{"- at '/config/capping/channels': items at 0 and 2 are equal", "capping.channels[2]", true},
		{"- at '/config/capping/channels': items at 0 and 2 are equal", "capping.channels[1]", false},
		{"- at '/config/kafka/brokers/1': 'x' does not match pattern", "kafka.brokers[1]", true},
		{"- at '/config/kafka/brokers/1': 'x' does not match pattern", "kafka.brokers[10]", false},
		{"Error: execution error at (capper/templates/validate.yaml:2:4): config.worker.retry_max: 5s must be at least", "worker.retry_max", true},
		{"Error: execution error at (capper/templates/validate.yaml:2:4): config.worker.retry_max_x: 5s", "worker.retry_max", false},
	} {
		if got := namesKey(tc.stderr, tc.key); got != tc.want {
			t.Errorf("namesKey(%q, %q) = %v, want %v", tc.stderr, tc.key, got, tc.want)
		}
	}
}

// checkRenderAgrees renders config data (with sets) and checks that it fails
// exactly when capper's parse (with env) fails, naming the same key.
func checkRenderAgrees(t *testing.T, chart string, data []byte, env, sets []string) {
	t.Helper()
	_, perr := config.Parse(data, env)
	_, rerr := renderConfig(t, chart, data, sets...)
	var he *helmError
	if rerr != nil && !errors.As(rerr, &he) {
		t.Fatal(rerr)
	}
	switch {
	case perr == nil && rerr != nil:
		t.Errorf("capper accepts the config but the render fails:\n%s\n%s", data, he.stderr)
	case perr != nil && rerr == nil:
		t.Errorf("capper refuses the config (%v) but the render succeeds:\n%s", perr, data)
	case perr != nil:
		if key := capperKey(t, data, perr); !namesKey(he.stderr, key) {
			t.Errorf("capper's error is about %s (%v); the render's error does not name it:\n%s", key, perr, he.stderr)
		}
	}
}

// TestChartRefusesBadConfigFiles: every config file capper's own tests
// refuse fails the render, naming the key capper names.
func TestChartRefusesBadConfigFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testdataDir, "*.bad.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no bad config files in %s: %v", testdataDir, err)
	}
	for name := range unrenderableBadFiles {
		if !slices.Contains(files, filepath.Join(testdataDir, name)) {
			t.Errorf("unrenderableBadFiles lists %s, which does not exist", name)
		}
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := config.Parse(data, nil); err == nil {
				t.Fatal("capper accepts it")
			}
			if reason, ok := unrenderableBadFiles[filepath.Base(f)]; ok {
				t.Logf("not checked at render: %s", reason)
				return
			}
			checkRenderAgrees(t, chartDir, data, nil, nil)
		})
	}
}

// TestChartRendersGoodConfigFiles: every config file capper accepts renders.
func TestChartRendersGoodConfigFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testdataDir, "*.good.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no good config files in %s: %v", testdataDir, err)
	}
	for _, f := range append(files, "../configs/capper.yaml") {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out, err := renderConfig(t, chartDir, data)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := decodeManifests(out); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// bareChart copies the chart with an empty config in values.yaml, so that
// what a test sets is the whole config and every other key takes capper's
// defaults, as in a config file.
func bareChart(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "capper")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inConfig := false
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case l == "config:":
			inConfig = true
			out = append(out, "config: {}")
			continue
		case inConfig && l != "" && !strings.HasPrefix(l, " "):
			inConfig = false
		}
		if !inConfig {
			out = append(out, l)
		}
	}
	if !slices.Contains(out, "config: {}") {
		t.Fatal("values.yaml has no config: section")
	}
	if err := os.WriteFile(filepath.Join(dir, "values.yaml"), []byte(strings.Join(out, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestChartConfigAgreesWithCapper: on both sides of each rule, with the
// other keys left to capper's defaults, the render fails exactly when capper
// refuses the config, and names the same key.
func TestChartConfigAgreesWithCapper(t *testing.T) {
	chart := bareChart(t)
	secret := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(secret, []byte("s3cr3t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	long := func(s string, n int) string { return strings.Repeat(s, n) }
	limit := func(l string) string { return "capping: {segments: [{name: a, limits: [" + l + "]}]}" }
	for _, tc := range []struct {
		config string
		env    []string // capper's environment
		sets   []string // the chart's values giving that environment
	}{
		{config: "{}"},
		// kafka
		{config: `kafka: {brokers: ["[::1]:9092", "kafka:9092", ":9092"]}`},
		{config: `kafka: {brokers: []}`},
		{config: `kafka: {brokers: [kafka]}`},
		{config: `kafka: {brokers: ["kafka:9092", "a:1:2"]}`},
		{config: `kafka: {client_id: ""}`},
		{config: `kafka: {group_id: ""}`},
		{config: `kafka: {topics: {input: ""}}`},
		{config: `kafka: {topics: {input: deliveries}}`},
		{config: `kafka: {topics: {suppressed: ""}}`},
		{config: `kafka: {topics: {suppressed: deliveries}}`},
		{config: `kafka: {topics: {dead_letter: suppressed}}`},
		{config: `kafka: {topics: {input: x, suppressed: x}}`},
		{config: `kafka: {tls: {cert_file: a}}`},
		{config: `kafka: {tls: {enabled: true, cert_file: a, key_file: b, insecure_skip_verify: true}}`},
		{config: `kafka: {tls: {insecure_skip_verify: true}}`},
		{config: `kafka: {sasl: {mechanism: gssapi}}`},
		{config: `kafka: {sasl: {mechanism: none, username: u}}`},
		{config: `kafka: {sasl: {mechanism: plain}}`},
		{config: `kafka: {sasl: {mechanism: scram-sha-256, username: u}}`},
		{config: `kafka: {sasl: {mechanism: scram-sha-256, username: u}}`,
			env: []string{"CAPPER_KAFKA_SASL_PASSWORD=x"}, sets: []string{"kafka.sasl.existingSecret.name=kafka"}},
		{config: `kafka: {sasl: {mechanism: scram-sha-512}}`,
			env:  []string{"CAPPER_KAFKA_SASL_PASSWORD=x", "CAPPER_KAFKA_SASL_USERNAME=u"},
			sets: []string{"kafka.sasl.existingSecret.name=kafka", "kafka.sasl.existingSecret.usernameKey=user"}},
		{config: `kafka: {sasl: {mechanism: plain, username: u, password_file: ` + secret + `}}`},
		{config: `kafka: {sasl: {mechanism: plain, username: u, password_file: ` + secret + `}}`,
			env: []string{"CAPPER_KAFKA_SASL_PASSWORD=x"}, sets: []string{"kafka.sasl.existingSecret.name=kafka"}},
		{config: `kafka: {compression: brotli}`},
		{config: `kafka: {start_offset: newest}`},
		{config: "kafka:\n  fetch_max_wait: \"0\""},
		{config: `kafka: {write_timeout: 0ms}`},
		{config: `kafka: {rebalance_timeout: 1m30s}`},
		{config: `kafka: {session_timeout: 3s}`},
		{config: `kafka: {session_timeout: 3001ms}`},
		{config: `kafka: {heartbeat_interval: 1m}`},
		{config: `kafka: {max_intent_bytes: 0}`},
		// send pacing: the lanes' prefix
		{config: `kafka: {topics: {lanes: send-intents-lanes}}`},
		{config: `kafka: {topics: {lanes: "a b"}}`},
		{config: `kafka: {topics: {lanes: "` + long("a", 151) + `"}}`},
		{config: `kafka: {topics: {lanes: send-intents}}`},
		{config: `kafka: {topics: {lanes: send}, delay_tiers: [{delay: 1m, topic: send.delay}]}`},
		{config: `kafka: {topics: {lanes: x}, delay_group_id: capper}`},
		{config: `kafka: {delay_tiers: [{delay: 1m, topic: t}], delay_group_id: capper}`},
		{config: `kafka: {topics: {lanes: x}, delay_group_id: capper-lanes}`},
		{config: `kafka: {delay_group_id: capper}`},
		// redis
		{config: `redis: {mode: replica}`},
		{config: `redis: {addrs: []}`},
		{config: `redis: {addrs: [a:1, b:2]}`},
		{config: `redis: {mode: cluster, addrs: [a:1, b:2]}`},
		{config: `redis: {mode: cluster, db: 2}`},
		{config: `redis: {db: 2}`},
		{config: `redis: {db: -1}`},
		{config: `redis: {mode: sentinel}`},
		{config: `redis: {mode: sentinel, master_name: m, addrs: [s1:26379, s2:26379]}`},
		{config: `redis: {master_name: m}`},
		{config: `redis: {pool_size: -1}`},
		{config: `redis: {max_retries: -1}`},
		{config: `redis: {max_retries: -2}`},
		{config: `redis: {tls: {server_name: r}}`},
		{config: `redis: {tls: {enabled: true, key_file: k}}`},
		{config: `redis: {dial_timeout: 0s}`},
		{config: `redis: {password_file: ` + secret + `}`},
		{config: `redis: {password_file: ` + secret + `}`,
			env: []string{"CAPPER_REDIS_PASSWORD=x"}, sets: []string{"redis.existingSecret.name=redis"}},
		// durations: syntax and range
		{config: "redis:\n  read_timeout: 292y"},
		{config: "redis:\n  read_timeout: 300y"},
		{config: "redis:\n  read_timeout: 99999999999999999999ms"},
		{config: "redis:\n  write_timeout: 1s30m"},
		{config: "redis:\n  write_timeout: 1m1m"},
		{config: "redis:\n  write_timeout: 1.5s"},
		{config: "redis:\n  write_timeout: 1h0m0s1ms"},
		// capping
		{config: `capping: {algorithm: token_bucket}`},
		{config: `capping: {algorithm: sliding_window}`},
		{config: `capping: {algorithm: sliding_log}`},
		{config: `capping: {algorithm: ""}`},
		{config: `capping: {key_prefix: ""}`},
		{config: `capping: {key_prefix: "a b"}`},
		{config: `capping: {key_prefix: "a:b"}`},
		{config: `capping: {sub_intervals: 0}`},
		{config: `capping: {sub_intervals: 1441}`},
		{config: `capping: {sub_intervals: many}`},
		{config: `capping: {idempotency_window: 0s}`},
		{config: `capping: {clock_skew_warn: 0ms}`},
		{config: `capping: {channels: []}`},
		{config: `capping: {channels: [email, push, email]}`},
		{config: `capping: {channels: ["a:b"]}`},
		{config: `capping: {channels: ["` + long("a", 64) + `"]}`},
		{config: `capping: {channels: ["` + long("a", 65) + `"]}`},
		{config: `capping: {channels: ["` + long("é", 33) + `"]}`},
		{config: `capping: {default_category: ""}`},
		{config: `capping: {default_category: "` + long("a", 64) + `"}`},
		{config: `capping: {default_category: "` + long("é", 33) + `"}`},
		{config: `capping: {exempt_categories: []}`},
		{config: `capping: {exempt_categories: [""]}`},
		{config: `capping: {default_policy: {limits: []}}`},
		{config: `capping: {default_policy: {limits: [{name: d, window: 1d, max: 1, channel: fax}]}}`},
		{config: `capping: {channels: [email, fax], default_policy: {limits: [{name: d, window: 1d, max: 1, channel: fax}]}}`},
		{config: `capping: {segments: [{name: a, limits: []}]}`},
		{config: `capping: {segments: [{name: a}]}`},
		{config: `capping: {segments: [{name: none, limits: [{name: d, window: 1d, max: 1}]}]}`},
		{config: `capping: {segments: [{name: Big, limits: [{name: d, window: 1d, max: 1}]}]}`},
		{config: `capping: {segments: [{name: a, limits: [{name: d, window: 1d, max: 1}]}, {name: a, limits: [{name: d, window: 1d, max: 1}]}]}`},
		{config: limit(`{name: d, window: 1m, max: 0}`)},
		{config: limit(`{name: d, window: 59s, max: 0}`)},
		{config: limit(`{name: d, window: 31d, max: 1000000}`)},
		{config: limit(`{name: d, window: 744h1ms, max: 1}`)},
		{config: limit(`{name: d, window: 32d, max: 1}`)},
		{config: limit(`{name: d, window: 1d, max: 1000001}`)},
		{config: limit(`{name: d, window: 1d, max: -1}`)},
		{config: limit(`{name: d, window: 1d}`)},
		{config: limit(`{name: d, max: 1}`)},
		{config: limit(`{window: 1d, max: 1}`)},
		{config: limit(`{name: "d y", window: 1d, max: 1}`)},
		{config: limit(`{name: "` + long("é", 33) + `", window: 1d, max: 1}`)},
		{config: limit(`{name: d, window: 1d, max: 1}, {name: w, window: 7d, max: 3}, {name: d, window: 7d, max: 2}`)},
		{config: limit(`{name: d, window: 1d, max: 1, channel: sms}`)},
		{config: limit(`{name: d, window: 1d, max: 1, channel: fax}`)},
		{config: "capping:\n  segments:\n    - name: a\n      limits:\n        - name: d\n          window: 1d\n          max: 1\n          where: x"},
		// the policy model v2
		{config: `capping: {categories: ["a b", marketing]}`},
		{config: `capping: {categories: [marketing, "` + long("é", 33) + `"]}`},
		{config: `capping: {overrides: {campaigns: [a, b], categories: [transactional]}}`},
		{config: `capping: {overrides: {campaigns: [a, a]}}`},
		{config: `capping: {overrides: {campaigns: ["a:b"]}}`},
		{config: `capping: {overrides: {campaigns: ["` + long("é", 33) + `"]}}`},
		{config: `capping: {overrides: {categories: [alerts]}}`},
		{config: `capping: {overrides: {campaign: [a]}}`},
		{config: `capping: {time_zone: Europe/Paris}`},
		{config: `capping: {time_zone: Local}`},
		{config: `capping: {time_zone: ""}`},
		{config: `capping: {week_start: sunday}`},
		{config: `capping: {week_start: Sunday}`},
		{config: limit(`{name: d, calendar: day, max: 1}`)},
		{config: limit(`{name: d, calendar: month, max: 0}`)},
		{config: limit(`{name: d, calendar: fortnight, max: 1}`)},
		{config: limit(`{name: d, window: 1d, calendar: week, max: 1}`)},
		{config: limit(`{name: d, window: 90500ms, max: 1}`)},
		{config: limit(`{name: d, window: 0s, max: 1}`)},
		{config: limit(`{name: d, window: 1d, max: 10000}`)},
		{config: limit(`{name: d, window: 1d, max: 10001}`)},
		{config: limit(`{name: d, window: 1d, max: 1, per: campaign}`)},
		{config: limit(`{name: d, window: 1d, max: 1, per: channel}`)},
		{config: limit(`{name: d, window: 1d, max: 3, reserve: {slots: 2}}`)},
		{config: limit(`{name: d, window: 1d, max: 3, reserve: {slots: 3}}`)},
		{config: limit(`{name: d, window: 1d, max: 3, reserve: {slots: 0}}`)},
		{config: limit(`{name: d, window: 1d, max: 3, reserve: {}}`)},
		{config: limit(`{name: d, window: 1d, max: 3, reserve: {slots: 1, below: normal}}`)},
		{config: limit(`{name: d, window: 1d, max: 3, reserve: {slots: 1, below: low}}`)},
		{config: limit(`{name: d, window: 1d, max: 3, reserve: {blow: high}}`)},
		{config: limit(`{name: d, window: 1d, max: 1, where: {channels: [sms, push], tags: [promo, "50%"], categories: [marketing], campaigns: [c1]}}`)},
		{config: limit(`{name: d, window: 1d, max: 1, where: {channels: [fax]}}`)},
		{config: limit(`{name: d, window: 1d, max: 1, where: {categories: [news]}}`)},
		{config: limit(`{name: d, window: 1d, max: 1, where: {tags: ["a b"]}}`)},
		{config: limit(`{name: d, window: 1d, max: 1, where: {tags: [""]}}`)},
		{config: limit(`{name: d, window: 1d, max: 1, where: {tags: ["` + long("a", 64) + `"]}}`)},
		{config: limit(`{name: d, window: 1d, max: 1, where: {tags: ["` + long("é", 33) + `"]}}`)},
		{config: limit(`{name: d, window: 1d, max: 1, where: {campaigns: [""]}}`)},
		{config: limit(`{name: d, window: 1d, max: 1, where: {channel: [sms]}}`)},
		{config: limit(`{name: d, window: 1d, max: 1, channel: sms, where: {channels: [sms]}}`)},
		{config: limit(`{name: d, window: 1d, max: 1, channel: sms, where: {tags: [promo]}}`)},
		{config: `capping: {categories: [marketing, news], default_policy: {limits: [{name: d, window: 1d, max: 1, where: {categories: [news]}}]}}`},
		// send pacing: budgets under capping
		{config: `capping: {budgets: []}`},
		{config: `capping: {budgets: [{name: push-fcm, rate: 0.5, burst: 3, channels: [push], routes: [fcm, apns.v2], lanes: [{name: urgent, min_priority: high}, {name: mid, min_priority: "40"}, {name: bulk}]}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, channels: [push]}, {name: b, rate: 5, channels: [sms]}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5}, {name: b, rate: 5, channels: [sms]}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, channels: [push, sms]}, {name: b, rate: 5, channels: [sms]}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, channels: [push, sms]}, {name: b, rate: 5}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, routes: [fcm]}, {name: b, rate: 5, routes: [fcm]}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, routes: [fcm]}, {name: b, rate: 5}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, channels: [push]}, {name: b, rate: 5, channels: [push], routes: [fcm, apns]}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, routes: [fcm]}, {name: b, rate: 5, routes: [fcm, apns]}]}`},
		{config: `capping: {budgets: [{name: a}]}`},
		{config: `capping: {budgets: [{name: a, rate: 0}]}`},
		{config: `capping: {budgets: [{name: a, rate: 10000001}]}`},
		{config: `capping: {budgets: [{rate: 5}]}`},
		{config: `capping: {budgets: [{name: Push, rate: 5}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, burst: -1}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, channels: [fax]}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, channels: [push, push]}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, routes: [FCM]}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, channels: [sms]}, {name: a, rate: 5, channels: [push]}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, lanes: [{name: u, min_priority: high}, {name: u}]}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, lanes: [{name: u}, {name: b}]}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, lanes: [{name: u, min_priority: high}, {name: b, min_priority: low}]}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, lanes: [{name: u, min_priority: normal}, {name: m, min_priority: "60"}, {name: b}]}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, lanes: [{name: u, min_priority: "0"}, {name: b}]}]}`},
		{config: `capping: {budgets: [{name: a, rate: 5, lanes: [{name: u, min_priority: urgent}, {name: b}]}]}`},
		{config: "capping:\n  budgets:\n    - name: a\n      rate: 5\n      lanes:\n        - name: u\n          min_priorty: high\n        - name: b"},
		// segments
		{config: `segments: {source: ""}`},
		{config: `segments: {source: "", required: false}`},
		{config: `segments: {source: gs://b/p}`},
		{config: `segments: {source: /data/segments}`},
		{config: `segments: {poll_interval: 999ms}`},
		{config: `segments: {poll_interval: 1s}`},
		{config: `segments: {source: s3://b/p, s3: {endpoint: "minio:9000"}}`},
		{config: `segments: {source: s3://b/p, s3: {endpoint: "http://minio:9000", use_path_style: true}}`},
		// worker, http, log
		{config: `worker: {batch_size: 0}`},
		{config: `worker: {batch_size: 10000}`},
		{config: `worker: {batch_size: 10001}`},
		{config: `worker: {batch_wait: 0ms}`},
		{config: `worker: {on_redis_error: drop}`},
		{config: `worker: {retry_initial: 10s}`},
		{config: `worker: {retry_initial: 5s}`},
		{config: `worker: {retry_initial: 0s}`},
		{config: `http: {address: "a:1:2"}`},
		{config: `http: {address: "[::]:9102"}`},
		{config: `log: {level: trace}`},
		{config: `log: {format: logfmt}`},
		// keys that do not exist
		{config: `kafka: {brokerz: ["a:1"]}`},
		{config: `kafka: {topics: {inputs: x}}`},
		{config: `metrics: {}`},
	} {
		t.Run(tc.config, func(t *testing.T) {
			checkRenderAgrees(t, chart, []byte(tc.config), tc.env, tc.sets)
		})
	}
}

// TestChartRefusesEverySecret: every Secret key of the config (found by
// type) fails the render, as it would fail capper.
func TestChartRefusesEverySecret(t *testing.T) {
	var paths []string
	var walk func(typ reflect.Type, prefix string)
	walk = func(typ reflect.Type, prefix string) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			switch {
			case f.Type == reflect.TypeFor[config.Secret]():
				paths = append(paths, prefix+name)
			case f.Type.Kind() == reflect.Struct:
				walk(f.Type, prefix+name+".")
			}
		}
	}
	walk(reflect.TypeFor[config.Config](), "")
	if len(paths) < 3 {
		t.Fatalf("found only the secrets %v", paths)
	}
	for _, p := range paths {
		_, err := render(t, nil, "config."+p+"=hunter2")
		var he *helmError
		if !errors.As(err, &he) || !strings.Contains(he.stderr, "config."+p+": secrets never go into the ConfigMap") {
			t.Errorf("config.%s=hunter2: %v, want the render to refuse the secret", p, err)
		}
	}
}
