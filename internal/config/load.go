package config

// Reading a config: strict YAML over the defaults, CAPPER_* overrides,
// secret files, validation; and printing the effective config.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/capper-dev/capper/internal/yamldoc"
)

// Load reads the file at path over the defaults, applies CAPPER_* overrides
// from the process environment, reads secret files and validates the result.
func Load(path string) (*Config, error) {
	return LoadWithEnv(path, os.Environ())
}

// LoadWithEnv is Load with an explicit environment (KEY=VALUE entries).
func LoadWithEnv(path string, environ []string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	cfg, err := parse(data, environ, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("load config %s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes a config document strictly over the defaults, applies the
// environment, reads secret files (relative paths from the working directory)
// and validates.
func Parse(data []byte, environ []string) (*Config, error) {
	return parse(data, environ, ".")
}

// parse is Parse with relative *_file paths resolved from baseDir, the config
// file's directory, so a config and its secrets can move together.
func parse(data []byte, environ []string, baseDir string) (*Config, error) {
	cfg := Default()
	if err := yamldoc.Decode(data, &cfg); err != nil {
		return nil, err
	}
	ignored, err := applyEnv(&cfg, environ)
	if err != nil {
		return nil, err
	}
	cfg.IgnoredEnv = ignored
	if cfg.Capping.InlinePolicy, err = inlinePolicyKeys(data); err != nil {
		return nil, err
	}
	for _, k := range inlinePolicyEnv(&cfg, environ) {
		if !slices.Contains(cfg.Capping.InlinePolicy, k) {
			cfg.Capping.InlinePolicy = append(cfg.Capping.InlinePolicy, k)
		}
	}
	if err := cfg.readSecretFiles(baseDir); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Deprecations = cfg.Capping.dropDeprecated()
	if len(cfg.Capping.InlinePolicy) > 0 {
		cfg.Deprecations = append(cfg.Deprecations, "capping."+strings.Join(cfg.Capping.InlinePolicy, ", capping.")+
			": a cap policy inside the worker config is deprecated; move it to a policy file (capper policy check FILE) and set policy.source (docs/operations/changing-caps.md)")
	}
	return &cfg, nil
}

// engineKeys are capping's own keys; every other key under capping is the
// inline policy's.
var engineKeys = []string{"key_prefix", "idempotency_window", "clock_skew_warn", "refusal_cache", "algorithm", "sub_intervals"}

// inlinePolicyEnv lists the policy keys under capping that CAPPER_*
// variables set (CAPPER_CAPPING_SEGMENTS: segments).
func inlinePolicyEnv(cfg *Config, environ []string) []string {
	keys := envKeys(cfg)
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		k, ok := keys[name]
		if !ok {
			continue
		}
		rest, ok := strings.CutPrefix(k.path, "capping.")
		top, _, _ := strings.Cut(rest, ".")
		if ok && !slices.Contains(engineKeys, top) && !slices.Contains(out, top) {
			out = append(out, top)
		}
	}
	return out
}

// inlinePolicyKeys lists the policy keys a config document sets under
// capping, in the file's order.
func inlinePolicyKeys(data []byte) ([]string, error) {
	var doc struct {
		Capping yaml.Node `yaml:"capping"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	var keys []string
	n := &doc.Capping
	for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
		if k := n.Content[i].Value; !slices.Contains(engineKeys, k) {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// Effective renders the configuration as YAML with secrets masked, for
// `capper check-config`.
func (c *Config) Effective() ([]byte, error) {
	var node yaml.Node
	if err := node.Encode(c); err != nil {
		return nil, fmt.Errorf("render config: %w", err)
	}
	if c.Policy.Source != "" {
		// The policy is not the config's: only capping's own keys stay.
		for i := 0; i+1 < len(node.Content); i += 2 {
			if node.Content[i].Value == "capping" {
				m := node.Content[i+1]
				var kept []*yaml.Node
				for j := 0; j+1 < len(m.Content); j += 2 {
					if slices.Contains(engineKeys, m.Content[j].Value) {
						kept = append(kept, m.Content[j], m.Content[j+1])
					}
				}
				m.Content = kept
			}
		}
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&node); err != nil {
		return nil, fmt.Errorf("render config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("render config: %w", err)
	}
	return buf.Bytes(), nil
}

func (c *Config) readSecretFiles(baseDir string) error {
	for _, f := range []struct {
		field, fileField string
		secret           *Secret
		file             string
	}{
		{"redis.password", "redis.password_file", &c.Redis.Password, c.Redis.PasswordFile},
		{"kafka.sasl.password", "kafka.sasl.password_file", &c.Kafka.SASL.Password, c.Kafka.SASL.PasswordFile},
	} {
		if f.file == "" {
			continue
		}
		if *f.secret != "" {
			return fmt.Errorf("%s: set either %s or %s, not both", f.field, EnvName(f.field), f.fileField)
		}
		path := f.file
		if !filepath.IsAbs(path) {
			path = filepath.Join(baseDir, path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("%s: %w", f.fileField, err)
		}
		*f.secret = Secret(strings.TrimRight(string(b), "\r\n"))
	}
	return nil
}
