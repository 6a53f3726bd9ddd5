package config

// Reading a config: strict YAML over the defaults, CAPPER_* overrides,
// secret files, validation; and printing the effective config.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
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
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, cleanYAMLError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document; capper reads exactly one")
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
	return &cfg, nil
}

var unknownField = regexp.MustCompile(`^(line \d+): field (\S+) not found in type \S+$`)

// cleanYAMLError turns yaml's "line 5: field adress not found in type
// config.Redis" into wording about keys, which is what a user edits.
func cleanYAMLError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, m := range te.Errors {
		if g := unknownField.FindStringSubmatch(m); g != nil {
			m = fmt.Sprintf("%s: unknown key %q", g[1], g[2])
		}
		msgs = append(msgs, m)
	}
	return errors.New(strings.Join(msgs, "; "))
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
