// Package config owns capper's configuration file: the typed structure, its
// defaults, strict decoding (an unknown key is an error naming it), overrides
// from CAPPER_* environment variables, secrets that come only from the
// environment or files, and Validate, whose errors name the field.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// Config is the whole capper configuration (configs/capper.yaml documents
// every key).
type Config struct {
	Kafka    Kafka    `yaml:"kafka"`
	Redis    Redis    `yaml:"redis"`
	Capping  Capping  `yaml:"capping"`
	Segments Segments `yaml:"segments"`
	Worker   Worker   `yaml:"worker"`
	HTTP     HTTP     `yaml:"http"`
	Log      Log      `yaml:"log"`

	// IgnoredEnv lists CAPPER_* variables that match no key. They are not an
	// error because Kubernetes injects CAPPER_SERVICE_HOST and friends for a
	// Service named capper; the worker logs them as a warning instead.
	IgnoredEnv []string `yaml:"-"`
}

// Kafka is the broker connection, topics and consumer settings.
type Kafka struct {
	Brokers           []string `yaml:"brokers"`
	ClientID          string   `yaml:"client_id"`
	GroupID           string   `yaml:"group_id"`
	Topics            Topics   `yaml:"topics"`
	TLS               TLS      `yaml:"tls"`
	SASL              SASL     `yaml:"sasl"`
	Compression       string   `yaml:"compression"`
	StartOffset       string   `yaml:"start_offset"`
	FetchMaxWait      Duration `yaml:"fetch_max_wait"`
	SessionTimeout    Duration `yaml:"session_timeout"`
	RebalanceTimeout  Duration `yaml:"rebalance_timeout"`
	HeartbeatInterval Duration `yaml:"heartbeat_interval"`
	WriteTimeout      Duration `yaml:"write_timeout"`
	MaxIntentBytes    int      `yaml:"max_intent_bytes"`
}

// Topics names the input and output topics.
type Topics struct {
	Input      string `yaml:"input"`
	Deliveries string `yaml:"deliveries"`
	Suppressed string `yaml:"suppressed"`
	DeadLetter string `yaml:"dead_letter"`
}

// TLS is a client TLS setting shared by Kafka and Redis.
type TLS struct {
	Enabled            bool   `yaml:"enabled"`
	CAFile             string `yaml:"ca_file"`
	CertFile           string `yaml:"cert_file"`
	KeyFile            string `yaml:"key_file"`
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
}

// SASL is Kafka's SASL authentication.
type SASL struct {
	Mechanism    string `yaml:"mechanism"`
	Username     string `yaml:"username"`
	Password     Secret `yaml:"password,omitempty"`
	PasswordFile string `yaml:"password_file"`
}

// Redis is the Redis connection (single node, Cluster or Sentinel).
type Redis struct {
	Mode             string   `yaml:"mode"`
	Addrs            []string `yaml:"addrs"`
	MasterName       string   `yaml:"master_name"`
	Username         string   `yaml:"username"`
	Password         Secret   `yaml:"password,omitempty"`
	PasswordFile     string   `yaml:"password_file"`
	SentinelPassword Secret   `yaml:"sentinel_password,omitempty"`
	DB               int      `yaml:"db"`
	TLS              TLS      `yaml:"tls"`
	DialTimeout      Duration `yaml:"dial_timeout"`
	ReadTimeout      Duration `yaml:"read_timeout"`
	WriteTimeout     Duration `yaml:"write_timeout"`
	PoolSize         int      `yaml:"pool_size"`
	MaxRetries       int      `yaml:"max_retries"`
}

// Capping is the cap policy and the engine's settings.
type Capping struct {
	Algorithm         string          `yaml:"algorithm"`
	KeyPrefix         string          `yaml:"key_prefix"`
	SubIntervals      int             `yaml:"sub_intervals"`
	IdempotencyWindow Duration        `yaml:"idempotency_window"`
	Channels          []string        `yaml:"channels"`
	ExemptCategories  []string        `yaml:"exempt_categories"`
	ClockSkewWarn     Duration        `yaml:"clock_skew_warn"`
	Segments          []SegmentPolicy `yaml:"segments"`
	DefaultPolicy     Policy          `yaml:"default_policy"`
}

// SegmentPolicy is the caps of one segment. The list order is the segments'
// priority order (segment-builder --on-conflict=priority).
type SegmentPolicy struct {
	Name   string  `yaml:"name"`
	Limits []Limit `yaml:"limits"`
}

// Policy is a list of limits that must all pass.
type Policy struct {
	Limits []Limit `yaml:"limits"`
}

// Limit is one cap: at most Max intents in any rolling Window.
type Limit struct {
	Name    string   `yaml:"name"`
	Window  Duration `yaml:"window"`
	Max     *int     `yaml:"max"` // a pointer so that a forgotten max is an error, not "never"
	Channel string   `yaml:"channel,omitempty"`
}

// Segments says where the segment snapshot comes from.
type Segments struct {
	Source       string   `yaml:"source"`
	PollInterval Duration `yaml:"poll_interval"`
	Required     bool     `yaml:"required"`
	S3           S3       `yaml:"s3"`
}

// S3 tunes the S3 client for an s3:// source.
type S3 struct {
	Region       string `yaml:"region"`
	Endpoint     string `yaml:"endpoint"`
	UsePathStyle bool   `yaml:"use_path_style"`
}

// Worker tunes the consume-decide-write loop.
type Worker struct {
	BatchSize       int      `yaml:"batch_size"`
	BatchWait       Duration `yaml:"batch_wait"`
	Enforce         bool     `yaml:"enforce"`
	OnRedisError    string   `yaml:"on_redis_error"`
	RetryInitial    Duration `yaml:"retry_initial"`
	RetryMax        Duration `yaml:"retry_max"`
	ShutdownTimeout Duration `yaml:"shutdown_timeout"`
}

// HTTP is the operations endpoint (/metrics, /healthz, /readyz).
type HTTP struct {
	Address string `yaml:"address"`
	Pprof   bool   `yaml:"pprof"`
}

// Log configures log/slog output.
type Log struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// Default returns the configuration used for every key the file leaves out.
func Default() Config {
	return Config{
		Kafka: Kafka{
			Brokers:  []string{"localhost:9092"},
			ClientID: "capper",
			GroupID:  "capper",
			Topics: Topics{
				Input:      "send-intents",
				Deliveries: "deliveries",
				Suppressed: "suppressed",
				DeadLetter: "send-intents-dlq",
			},
			Compression:       "none",
			StartOffset:       "earliest",
			FetchMaxWait:      Duration(250 * time.Millisecond),
			SessionTimeout:    Duration(30 * time.Second),
			RebalanceTimeout:  Duration(30 * time.Second),
			HeartbeatInterval: Duration(3 * time.Second),
			WriteTimeout:      Duration(10 * time.Second),
			MaxIntentBytes:    64 << 10,
		},
		Redis: Redis{
			Mode:         "single",
			Addrs:        []string{"localhost:6379"},
			DialTimeout:  Duration(2 * time.Second),
			ReadTimeout:  Duration(2 * time.Second),
			WriteTimeout: Duration(2 * time.Second),
			MaxRetries:   3,
		},
		Capping: Capping{
			Algorithm:         "sliding_log",
			KeyPrefix:         "capper",
			SubIntervals:      24,
			IdempotencyWindow: Duration(24 * time.Hour),
			Channels:          []string{"email", "push", "sms", "inapp"},
			ExemptCategories:  []string{"transactional"},
			ClockSkewWarn:     Duration(500 * time.Millisecond),
			DefaultPolicy: Policy{Limits: []Limit{
				{Name: "daily", Window: Duration(24 * time.Hour), Max: intp(1)},
				{Name: "weekly", Window: Duration(7 * 24 * time.Hour), Max: intp(3)},
			}},
		},
		Segments: Segments{
			Source:       "file:///var/lib/capper/segments",
			PollInterval: Duration(30 * time.Second),
			Required:     true,
		},
		Worker: Worker{
			BatchSize:       500,
			BatchWait:       Duration(50 * time.Millisecond),
			Enforce:         true,
			OnRedisError:    "wait",
			RetryInitial:    Duration(100 * time.Millisecond),
			RetryMax:        Duration(5 * time.Second),
			ShutdownTimeout: Duration(25 * time.Second),
		},
		HTTP: HTTP{Address: ":9090"},
		Log:  Log{Level: "info", Format: "json"},
	}
}

func intp(v int) *int { return &v }

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

// SegmentNames returns the configured segments in priority order.
func (c *Config) SegmentNames() []string {
	names := make([]string, 0, len(c.Capping.Segments))
	for _, s := range c.Capping.Segments {
		names = append(names, s.Name)
	}
	return names
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

// Duration is a time.Duration written as "50ms", "30s", "24h" or "7d" in YAML.
type Duration time.Duration

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// UnmarshalYAML parses a duration and names the line of a bad one.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := model.ParseDuration(n.Value)
	if n.Kind != yaml.ScalarNode || err != nil {
		return fmt.Errorf("line %d: %q is not a duration (write e.g. 50ms, 30s, 24h, 7d)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration in the same form it is read.
func (d Duration) MarshalYAML() (any, error) { return model.Duration(d).String(), nil }

// Secret is a credential. It is never read from the config file (files end up
// in ConfigMaps and version control); it comes from a CAPPER_* variable or the
// matching *_file key, and it is masked when the config is printed.
type Secret string

// UnmarshalYAML refuses an inline secret (an empty value is no secret).
func (s *Secret) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Value == "" {
		return nil
	}
	return fmt.Errorf("line %d: secrets are not read from the config file; set the environment variable or the *_file key instead", n.Line)
}

// MarshalYAML masks the value.
func (s Secret) MarshalYAML() (any, error) {
	if s == "" {
		return "", nil
	}
	return "<masked>", nil
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

// String writes the duration as in the config file.
func (d Duration) String() string { return model.Duration(d).String() }
