package config

// Reading a config: strict YAML over the defaults, CAPPER_* overrides,
// secret files, validation; and printing the effective config.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
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
	if err := cfg.readSecretFiles(baseDir); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Deprecations = cfg.Capping.dropDeprecated()
	return &cfg, nil
}

// Effective renders the configuration as YAML with secrets masked, for
// `capper check-config`.
func (c *Config) Effective() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
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
