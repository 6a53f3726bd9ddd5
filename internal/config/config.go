// Package config owns capper's configuration file: the typed structure, its
// defaults, strict decoding (an unknown key is an error naming it), overrides
// from CAPPER_* environment variables, secrets that come only from the
// environment or files, deprecated keys, and Validate, whose errors name the
// field. The cap policy under capping: is package policy's document, inline:
// its keys, defaults and checks are policy's.
package config

import (
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/policy"
)

// Config is the whole capper configuration (configs/capper.yaml documents
// every key).
type Config struct {
	Kafka    Kafka        `yaml:"kafka"`
	Redis    Redis        `yaml:"redis"`
	Capping  Capping      `yaml:"capping"`
	Policy   PolicySource `yaml:"policy"`
	Segments Segments     `yaml:"segments"`
	Plans    Plans        `yaml:"plans"`
	Control  Control      `yaml:"control"`
	Worker   Worker       `yaml:"worker"`
	Refunds  Refunds      `yaml:"refunds"`
	HTTP     HTTP         `yaml:"http"`
	Log      Log          `yaml:"log"`

	// IgnoredEnv lists CAPPER_* variables that match no key. They are not an
	// error because Kubernetes injects CAPPER_SERVICE_HOST and friends for a
	// Service named capper; the worker logs them as a warning instead.
	IgnoredEnv []string `yaml:"-"`
	// Deprecations says which deprecated keys the file or the environment
	// set: they are ignored, and check-config and the worker show these
	// messages so that the keys get removed before they become errors.
	Deprecations []string `yaml:"-"`
}

// Kafka is the broker connection, topics and consumer settings.
type Kafka struct {
	Brokers     []string `yaml:"brokers"`
	ClientID    string   `yaml:"client_id"`
	GroupID     string   `yaml:"group_id"`
	Topics      Topics   `yaml:"topics"`
	TLS         TLS      `yaml:"tls"`
	SASL        SASL     `yaml:"sasl"`
	Compression string   `yaml:"compression"`
	StartOffset string   `yaml:"start_offset"`
	// LaneRecords is the form held intents' lane records are written in:
	// headers (every version reads it) or compact (one binary header; the
	// version before this one cannot read it: docs/operations/upgrades.md).
	// Both are read.
	LaneRecords string `yaml:"lane_records"`
	// GroupInstanceID makes the worker a static member of its consumer
	// groups (empty: dynamic); GroupProtocol is cooperative or eager;
	// LeaveOnShutdown: a static member leaves its groups when it stops.
	GroupInstanceID   string   `yaml:"group_instance_id"`
	GroupProtocol     string   `yaml:"group_protocol"`
	LeaveOnShutdown   bool     `yaml:"leave_on_shutdown"`
	FetchMaxWait      Duration `yaml:"fetch_max_wait"`
	SessionTimeout    Duration `yaml:"session_timeout"`
	RebalanceTimeout  Duration `yaml:"rebalance_timeout"`
	HeartbeatInterval Duration `yaml:"heartbeat_interval"`
	WriteTimeout      Duration `yaml:"write_timeout"`
	MaxIntentBytes    int      `yaml:"max_intent_bytes"`
	LagInterval       Duration `yaml:"lag_interval"`
	// DelayTiers are the topics deferred intents wait in, shortest delay
	// first (none: a policy that defers is refused). DelayGroupID is the
	// consumer group that reads them (default <group_id>-delay).
	DelayTiers   []DelayTier `yaml:"delay_tiers"`
	DelayGroupID string      `yaml:"delay_group_id"`
}

// DelayTier is one delay tier: a topic whose records wait up to Delay.
type DelayTier struct {
	Delay Duration `yaml:"delay"`
	Topic string   `yaml:"topic"`
}

// Topics names the input and output topics.
type Topics struct {
	Input      string `yaml:"input"`
	Deliveries string `yaml:"deliveries"`
	Suppressed string `yaml:"suppressed"`
	DeadLetter string `yaml:"dead_letter"`
	// DeliveryStatus is the topic of delivery statuses that can refund a
	// send (empty: no refunds).
	DeliveryStatus string `yaml:"delivery_status"`
	// Control is the campaign control topic (compacted, one partition
	// recommended), which every worker reads whole (empty: no campaign
	// control; intents' send_by still holds).
	Control string `yaml:"control"`
	// Lanes starts the topics held intents wait in, one per lane of each
	// budget of the policy: <lanes>.<budget>.<lane> (empty: no pacing; a
	// policy with budgets is refused).
	Lanes string `yaml:"lanes"`
	// Parked is where intents waiting for a paused campaign wait, written
	// once per pause (empty: they come back from the first delay tier every
	// tier delay). Needs Control.
	Parked string `yaml:"parked"`
	// UserLimits is the user-limits topic (compacted, keyed by user id):
	// users' own limits, which every worker applies to Redis in a group of
	// its own (<group_id>-user-limits) and follows for its refusal cache
	// (empty: users' limits are not applied).
	UserLimits string `yaml:"user_limits"`
}

// Refunds says which delivery statuses give a send's slot back.
type Refunds struct {
	Statuses []string `yaml:"statuses"`
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
	WaitReplicas     int      `yaml:"wait_replicas"`
	WaitTimeout      Duration `yaml:"wait_timeout"`
}

// Capping is the engine's settings and, inline, the cap policy of workers
// configured before policy.source existed (deprecated; package policy owns
// its keys, their defaults and their checks).
type Capping struct {
	KeyPrefix         string       `yaml:"key_prefix"`
	IdempotencyWindow Duration     `yaml:"idempotency_window"`
	ClockSkewWarn     Duration     `yaml:"clock_skew_warn"`
	RefusalCache      RefusalCache `yaml:"refusal_cache"`
	policy.Document   `yaml:",inline"`

	// InlinePolicy lists the policy keys the file set under capping (they
	// are used only without policy.source).
	InlinePolicy []string `yaml:"-"`

	// Deprecated: the sliding_window algorithm was removed. sliding_log (or
	// empty) is accepted and ignored with a deprecation; parsing leaves it
	// empty.
	Algorithm string `yaml:"algorithm,omitempty"`
	// Deprecated: it tuned sliding_window. Accepted and ignored with a
	// deprecation; parsing leaves it nil.
	SubIntervals *int `yaml:"sub_intervals,omitempty"`
}

// RefusalCache is the worker's memory of full limits: repeats are capped
// without a Redis call until the limit frees a slot, for at most TTL.
type RefusalCache struct {
	Size     int      `yaml:"size"`      // users remembered at most; 0 turns it off
	MaxBytes int64    `yaml:"max_bytes"` // what it may cost in memory
	TTL      Duration `yaml:"ttl"`
}

// The policy's types, under the names the config has always used.
type (
	// SegmentPolicy is the caps of one segment. The list order is the
	// segments' priority order (segment-builder --on-conflict=priority).
	SegmentPolicy = policy.Segment
	// Policy is a list of limits that must all pass.
	Policy = policy.Policy
	// Limit is one cap.
	Limit = policy.Limit
)

// PolicySource says where the cap policy comes from: a policy document's file
// (file:///etc/capper/policy.yaml, watched) or a policy store (a directory
// or s3://bucket/prefix holding policies/<version>/policy.yaml and
// policies/LATEST, see capper policy publish). Empty: the policy under
// capping (deprecated).
type PolicySource struct {
	Source       string   `yaml:"source"`
	PollInterval Duration `yaml:"poll_interval"`
}

// IsFile reports whether Source names a policy file rather than a store:
// a path ending in .yaml or .yml.
func (p PolicySource) IsFile() bool {
	return strings.HasSuffix(p.Source, ".yaml") || strings.HasSuffix(p.Source, ".yml")
}

// Plans says where the campaign plans come from: a plan store (a directory
// or s3://bucket/prefix, S3 settings from segments.s3) that segment-builder
// plan publish writes. Empty: no plans.
type Plans struct {
	Source       string   `yaml:"source"`
	PollInterval Duration `yaml:"poll_interval"`
}

// Control tunes campaign control (kafka.topics.control).
type Control struct {
	// MaxPause: a campaign paused longer than this has its waiting
	// intents cancelled (capper-reason: expired).
	MaxPause Duration `yaml:"max_pause"`
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
	// StuckTimeout: a worker holding records whose loops take no step
	// for this long leaves its consumer groups (0: never).
	StuckTimeout Duration `yaml:"stuck_timeout"`
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
			GroupProtocol:     "cooperative",
			LaneRecords:       "headers",
			FetchMaxWait:      Duration(250 * time.Millisecond),
			SessionTimeout:    Duration(8 * time.Second),
			RebalanceTimeout:  Duration(30 * time.Second),
			HeartbeatInterval: Duration(time.Second),
			WriteTimeout:      Duration(10 * time.Second),
			MaxIntentBytes:    64 << 10,
			LagInterval:       Duration(15 * time.Second),
		},
		Redis: Redis{
			Mode:         "single",
			Addrs:        []string{"localhost:6379"},
			DialTimeout:  Duration(2 * time.Second),
			ReadTimeout:  Duration(2 * time.Second),
			WriteTimeout: Duration(2 * time.Second),
			MaxRetries:   3,
			WaitTimeout:  Duration(100 * time.Millisecond),
		},
		Capping: Capping{
			KeyPrefix:         "capper",
			IdempotencyWindow: Duration(24 * time.Hour),
			ClockSkewWarn:     Duration(500 * time.Millisecond),
			RefusalCache:      RefusalCache{Size: 10_000_000, MaxBytes: 128 << 20, TTL: Duration(30 * time.Second)},
			Document:          policy.Default(),
		},
		Policy:  PolicySource{PollInterval: Duration(10 * time.Second)},
		Plans:   Plans{PollInterval: Duration(30 * time.Second)},
		Control: Control{MaxPause: Duration(24 * time.Hour)},
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
			StuckTimeout:    Duration(time.Minute),
		},
		Refunds: Refunds{Statuses: []string{"failed", "bounced", "rejected"}},
		HTTP:    HTTP{Address: ":9090"},
		Log:     Log{Level: "info", Format: "json"},
	}
}

// DelayGroup is the consumer group of the delay tiers.
func (k *Kafka) DelayGroup() string {
	if k.DelayGroupID != "" {
		return k.DelayGroupID
	}
	return k.GroupID + "-delay"
}

// UserLimitsGroup is the consumer group that applies the user-limits
// topic.
func (k *Kafka) UserLimitsGroup() string { return k.GroupID + "-user-limits" }

// SegmentNames returns the configured segments in priority order.
func (c *Config) SegmentNames() []string { return c.Capping.SegmentNames() }
