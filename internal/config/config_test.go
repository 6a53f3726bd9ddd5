package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// Every bad file must fail with an error that names what is wrong.
var badFiles = map[string][]string{
	"unknown-key.bad.yaml":        {"line 2", `unknown key "adress"`},
	"inline-secret.bad.yaml":      {"line 2", "secrets are not read from the config file"},
	"bad-duration.bad.yaml":       {"line 2", `"50 millis" is not a duration`},
	"missing-max.bad.yaml":        {`capping.segments[0] (segment "new").limits[0] (limit "daily").max: is required`},
	"topics-clash.bad.yaml":       {"kafka.topics.deliveries", "also the input topic"},
	"sasl-no-password.bad.yaml":   {"kafka.sasl.password", "CAPPER_KAFKA_SASL_PASSWORD"},
	"single-many-addrs.bad.yaml":  {"redis.addrs", "mode single takes one address"},
	"sentinel-no-master.bad.yaml": {"redis.master_name", "required with mode sentinel"},
	"reserved-segment.bad.yaml":   {`capping.segments[0] (segment "none").name`, `"none" is reserved`},
	"dup-segment.bad.yaml":        {`capping.segments[1] (segment "new").name: segment "new" is listed twice`},
	"brace-prefix.bad.yaml":       {"capping.key_prefix", "without braces"},
	"bad-enum.bad.yaml":           {"capping.algorithm", `"token_bucket" is not one of sliding_log, sliding_window`},
	"batch-size.bad.yaml":         {"worker.batch_size", "between 1 and 10000"},
	"two-docs.bad.yaml":           {"more than one YAML document"},
	"bad-source.bad.yaml":         {"segments.source", "gs://bucket/segments"},
	"window-range.bad.yaml":       {`capping.segments[0] (segment "new").limits[0] (limit "burst").window: 30s out of range`},
	"many-problems.bad.yaml": {
		`capping.segments[0] (segment "new").limits[0] (limit "daily").max: is required (0 means never)`,
		`capping.segments[0] (segment "new").limits[1] (limit "burst").window: 30s out of range`,
		`capping.default_policy.limits[0] (limit "d").channel: "fax" is not one of the channels`,
		`worker.batch_size: must be between 1 and 10000, got 0`,
	},
	"unknown-channel.bad.yaml": {`capping.segments[0] (segment "new").limits[0] (limit "daily").channel: "fax" is not one of the channels`},
}

func TestBadFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/*.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(badFiles) {
		t.Errorf("%d *.bad.yaml files but %d expectations: every bad file needs its expected error", len(files), len(badFiles))
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			want, ok := badFiles[name]
			if !ok {
				t.Fatalf("no expected error for %s", name)
			}
			_, err := LoadWithEnv(f, nil)
			if err == nil {
				t.Fatalf("loaded without error")
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if !strings.Contains(err.Error(), f) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

func TestGoodFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/*.good.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no good files: %v", err)
	}
	files = append(files, filepath.Join("..", "..", "configs", "capper.yaml"))
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			cfg, err := LoadWithEnv(f, nil)
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			// What check-config prints must load again to the same config.
			out, err := cfg.Effective()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(out), "s3cr3t") {
				t.Fatalf("effective config shows a secret:\n%s", out)
			}
			again, err := Parse(stripSecrets(t, out), []string{"CAPPER_KAFKA_SASL_PASSWORD=x", "CAPPER_REDIS_PASSWORD=x"})
			if err != nil {
				t.Fatalf("effective config does not load: %v\n%s", err, out)
			}
			again2, err := again.Effective()
			if err != nil {
				t.Fatal(err)
			}
			if string(stripSecrets(t, out)) != string(stripSecrets(t, again2)) {
				t.Fatalf("effective config does not round trip:\n%s\n---\n%s", out, again2)
			}
		})
	}
}

// stripSecrets removes masked secrets and *_file keys so the rendered config
// can be parsed again without the secret files.
func stripSecrets(t *testing.T, out []byte) []byte {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		k := strings.TrimSpace(l)
		if strings.HasPrefix(k, "password:") || strings.HasPrefix(k, "sentinel_password:") || strings.HasPrefix(k, "password_file:") {
			continue
		}
		lines = append(lines, l)
	}
	return []byte(strings.Join(lines, "\n"))
}

func TestClusterSASLFile(t *testing.T) {
	cfg, err := LoadWithEnv("testdata/cluster-sasl.good.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kafka.SASL.Password != "s3cr3t" || cfg.Redis.Password != "s3cr3t" {
		t.Errorf("secret files not read (relative to the config file): %q %q", cfg.Kafka.SASL.Password, cfg.Redis.Password)
	}
	if cfg.Capping.SubIntervals != 48 || cfg.Worker.Enforce || cfg.Worker.OnRedisError != "allow" {
		t.Errorf("file values not applied: %+v %+v", cfg.Capping, cfg.Worker)
	}
	// Keys the file leaves out keep their defaults.
	if cfg.Kafka.Topics.Input != "send-intents" || cfg.Worker.BatchSize != 500 {
		t.Errorf("defaults lost: %+v", cfg.Kafka.Topics)
	}
}

func TestEnvOverrides(t *testing.T) {
	env := []string{
		"CAPPER_REDIS_ADDRS=r1:6379, r2:6379",
		"CAPPER_REDIS_MODE=cluster",
		"CAPPER_REDIS_PASSWORD=from-env",
		"CAPPER_WORKER_BATCH_WAIT=10ms",
		"CAPPER_WORKER_ENFORCE=false",
		"CAPPER_KAFKA_TOPICS_DEAD_LETTER=dlq",
		"CAPPER_CAPPING_SEGMENTS=[{name: vip, limits: [{name: daily, window: 1d, max: 9}]}]",
		"CAPPER_SERVICE_HOST=10.0.0.1", // Kubernetes service link: ignored, reported
		"OTHER=1",
	}
	cfg, err := Parse(nil, env)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Redis.Addrs; !reflect.DeepEqual(got, []string{"r1:6379", "r2:6379"}) {
		t.Errorf("redis.addrs = %q", got)
	}
	if cfg.Redis.Password != "from-env" || cfg.Worker.BatchWait.D() != 10*time.Millisecond || cfg.Worker.Enforce || cfg.Kafka.Topics.DeadLetter != "dlq" {
		t.Errorf("overrides not applied: %+v %+v", cfg.Redis, cfg.Worker)
	}
	if len(cfg.Capping.Segments) != 1 || *cfg.Capping.Segments[0].Limits[0].Max != 9 {
		t.Errorf("capping.segments = %+v", cfg.Capping.Segments)
	}
	if !reflect.DeepEqual(cfg.IgnoredEnv, []string{"CAPPER_SERVICE_HOST"}) {
		t.Errorf("ignored = %q", cfg.IgnoredEnv)
	}
}

func TestEnvErrorsNameTheVariable(t *testing.T) {
	for env, want := range map[string]string{
		"CAPPER_WORKER_BATCH_SIZE=lots":                               "CAPPER_WORKER_BATCH_SIZE (key worker.batch_size)",
		"CAPPER_WORKER_BATCH_WAIT=soon":                               `"soon" is not a duration`,
		"CAPPER_CAPPING_DEFAULT_POLICY_LIMITS=[{name: d, wndow: 1d}]": `unknown key "wndow"`,
		"CAPPER_HTTP_ADDRESS=nowhere":                                 "http.address",
	} {
		_, err := Parse(nil, []string{env})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want it to contain %q", env, err, want)
		}
	}
}

func TestSecretFileAndEnvConflict(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "pw")
	if err := os.WriteFile(secret, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := []byte("redis:\n  password_file: " + secret + "\n")
	_, err := Parse(doc, []string{"CAPPER_REDIS_PASSWORD=y"})
	if err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("err = %v", err)
	}
	_, err = Parse([]byte("redis:\n  password_file: /nonexistent/pw\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "redis.password_file") {
		t.Fatalf("err = %v", err)
	}
}

// Every key the code knows must be documented in configs/capper.yaml, and the
// example must not set a key the code does not know (strict loading already
// guarantees the second).
func TestExampleDocumentsEveryKey(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "configs", "capper.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok {
			for k, sub := range m {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				documented[p] = true
				walk(p, sub)
			}
		}
	}
	walk("", doc)
	for name, path := range EnvNames() {
		if documented[path] {
			continue
		}
		// Secrets are documented by their *_file key and variable name.
		if strings.Contains(string(data), name) {
			continue
		}
		t.Errorf("key %s (%s) is not in configs/capper.yaml", path, name)
	}
}

func TestEnvNamesAreUnique(t *testing.T) {
	cfg := Default()
	keys := envKeys(&cfg)
	paths := map[string]bool{}
	for _, k := range keys {
		paths[k.path] = true
	}
	if len(paths) != len(keys) {
		t.Fatalf("%d keys map to %d variable names: two keys share a CAPPER_ name", len(paths), len(keys))
	}
	if _, ok := keys["CAPPER_KAFKA_SASL_PASSWORD"]; !ok {
		t.Fatal("CAPPER_KAFKA_SASL_PASSWORD missing")
	}
}

func TestDefaultsAreValid(t *testing.T) {
	cfg := Default()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestSegmentNamesInOrder(t *testing.T) {
	cfg, err := LoadWithEnv(filepath.Join("..", "..", "configs", "capper.yaml"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.SegmentNames(); !reflect.DeepEqual(got, []string{"new", "active", "dormant"}) {
		t.Fatalf("SegmentNames = %q", got)
	}
}
