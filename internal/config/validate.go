package config

// Validate: every problem of a config at once, each naming its key.

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/capping"
)

// problems collects validation errors, each prefixed with the key it is about.
type problems []string

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, field+": "+fmt.Sprintf(format, args...))
}

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return errors.New(strings.Join(p, "\n"))
}

// Validate checks every key and returns all problems at once, one per line,
// each naming its key.
func (c *Config) Validate() error {
	var p problems
	c.Kafka.validate(&p)
	c.Redis.validate(&p)
	c.Capping.validate(&p)
	c.validateRules(&p)
	c.validatePolicy(&p)
	c.Segments.validate(&p)
	c.Worker.validate(&p)
	c.Refunds.validate(&p, c.Kafka.Topics.DeliveryStatus)
	c.HTTP.validate(&p)
	c.Log.validate(&p)
	return p.err()
}

func positive(p *problems, field string, d Duration) {
	if d <= 0 {
		p.add(field, "must be above 0, got %s", time.Duration(d))
	}
}

func oneOf(p *problems, field, v string, allowed ...string) {
	if !slices.Contains(allowed, v) {
		p.add(field, "%q is not one of %s", v, strings.Join(allowed, ", "))
	}
}

func hostPort(p *problems, field, v string) {
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		p.add(field, "%q is not host:port", v)
	}
}

func (k *Kafka) validate(p *problems) {
	if len(k.Brokers) == 0 {
		p.add("kafka.brokers", "at least one broker is required")
	}
	for i, b := range k.Brokers {
		hostPort(p, fmt.Sprintf("kafka.brokers[%d]", i), b)
	}
	if k.ClientID == "" {
		p.add("kafka.client_id", "is required")
	}
	if k.GroupID == "" {
		p.add("kafka.group_id", "is required")
	}
	t := k.Topics
	for _, f := range []struct{ key, v string }{
		{"kafka.topics.input", t.Input}, {"kafka.topics.deliveries", t.Deliveries}, {"kafka.topics.dead_letter", t.DeadLetter},
	} {
		if f.v == "" {
			p.add(f.key, "is required")
		}
	}
	outs := map[string]string{"kafka.topics.deliveries": t.Deliveries, "kafka.topics.dead_letter": t.DeadLetter}
	if t.Suppressed != "" {
		outs["kafka.topics.suppressed"] = t.Suppressed
	}
	seen := map[string]string{}
	for _, key := range []string{"kafka.topics.deliveries", "kafka.topics.suppressed", "kafka.topics.dead_letter"} {
		v, ok := outs[key]
		if !ok || v == "" {
			continue
		}
		if v == t.Input {
			p.add(key, "%q is also the input topic; capper would consume its own output", v)
		}
		if other, dup := seen[v]; dup {
			p.add(key, "%q is also %s; every outcome needs its own topic", v, other)
		}
		seen[v] = key
	}
	k.TLS.validate(p, "kafka.tls")
	switch k.SASL.Mechanism {
	case "", "none":
	case "plain", "scram-sha-256", "scram-sha-512":
		if k.SASL.Username == "" {
			p.add("kafka.sasl.username", "is required with mechanism %s", k.SASL.Mechanism)
		}
		if k.SASL.Password == "" {
			p.add("kafka.sasl.password", "is required with mechanism %s: set %s or kafka.sasl.password_file",
				k.SASL.Mechanism, EnvName("kafka.sasl.password"))
		}
	default:
		p.add("kafka.sasl.mechanism", "%q is not one of none, plain, scram-sha-256, scram-sha-512", k.SASL.Mechanism)
	}
	oneOf(p, "kafka.compression", k.Compression, "none", "gzip", "snappy", "lz4", "zstd")
	oneOf(p, "kafka.start_offset", k.StartOffset, "earliest", "latest")
	positive(p, "kafka.fetch_max_wait", k.FetchMaxWait)
	positive(p, "kafka.session_timeout", k.SessionTimeout)
	positive(p, "kafka.rebalance_timeout", k.RebalanceTimeout)
	positive(p, "kafka.heartbeat_interval", k.HeartbeatInterval)
	positive(p, "kafka.write_timeout", k.WriteTimeout)
	positive(p, "kafka.lag_interval", k.LagInterval)
	if k.HeartbeatInterval >= k.SessionTimeout && k.SessionTimeout > 0 {
		p.add("kafka.heartbeat_interval", "must be below kafka.session_timeout (%s)", k.SessionTimeout.D())
	}
	if k.MaxIntentBytes <= 0 {
		p.add("kafka.max_intent_bytes", "must be above 0, got %d", k.MaxIntentBytes)
	}
	k.validateDelay(p, seen)
}

// validateDelay checks the delay tiers and the delivery-status topic; taken
// holds the output topics by value.
func (k *Kafka) validateDelay(p *problems, taken map[string]string) {
	taken[k.Topics.Input] = "kafka.topics.input"
	if s := k.Topics.DeliveryStatus; s != "" {
		if other, dup := taken[s]; dup {
			p.add("kafka.topics.delivery_status", "%q is also %s", s, other)
		}
		taken[s] = "kafka.topics.delivery_status"
	}
	for i, t := range k.DelayTiers {
		at := fmt.Sprintf("kafka.delay_tiers[%d]", i)
		switch {
		case t.Delay < Duration(time.Second):
			p.add(at+".delay", "must be at least 1s, got %s", t.Delay.D())
		case i > 0 && t.Delay <= k.DelayTiers[i-1].Delay:
			p.add(at+".delay", "%s must be above the previous tier's %s (shortest first)", t.Delay.D(), k.DelayTiers[i-1].Delay.D())
		}
		if t.Topic == "" {
			p.add(at+".topic", "is required")
			continue
		}
		if other, dup := taken[t.Topic]; dup {
			p.add(at+".topic", "%q is also %s; every tier needs its own topic", t.Topic, other)
		}
		taken[t.Topic] = at + ".topic"
	}
	if len(k.DelayTiers) > 0 && k.DelayGroup() == k.GroupID {
		p.add("kafka.delay_group_id", "%q is also kafka.group_id: the tiers need a group of their own", k.DelayGroupID)
	}
}

func (r *Refunds) validate(p *problems, topic string) {
	if topic != "" && len(r.Statuses) == 0 {
		p.add("refunds.statuses", "at least one status is required with kafka.topics.delivery_status")
	}
	for i, s := range r.Statuses {
		if s == "" || len(s) > 64 {
			p.add(fmt.Sprintf("refunds.statuses[%d]", i), "%q must be 1 to 64 bytes", s)
		}
	}
}

func (t *TLS) validate(p *problems, prefix string) {
	if (t.CertFile == "") != (t.KeyFile == "") {
		p.add(prefix+".cert_file", "cert_file and key_file go together")
	}
	if !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.ServerName != "" || t.InsecureSkipVerify) {
		p.add(prefix+".enabled", "is false but other TLS keys are set; set enabled: true")
	}
}

func (r *Redis) validate(p *problems) {
	// The deployment-mode rules are the client's own (one owner).
	for _, fe := range (capping.ClientOptions{Mode: r.Mode, Addrs: r.Addrs, MasterName: r.MasterName, DB: r.DB}).Validate() {
		p.add("redis."+fe.Field, "%s", fe.Msg)
	}
	for i, a := range r.Addrs {
		hostPort(p, fmt.Sprintf("redis.addrs[%d]", i), a)
	}
	r.TLS.validate(p, "redis.tls")
	positive(p, "redis.dial_timeout", r.DialTimeout)
	positive(p, "redis.read_timeout", r.ReadTimeout)
	positive(p, "redis.write_timeout", r.WriteTimeout)
	if r.PoolSize < 0 {
		p.add("redis.pool_size", "must not be negative (0 = go-redis default)")
	}
	if r.MaxRetries < -1 {
		p.add("redis.max_retries", "must be -1 (no retries) or more")
	}
	if r.WaitReplicas < 0 {
		p.add("redis.wait_replicas", "must not be negative, got %d", r.WaitReplicas)
	}
	positive(p, "redis.wait_timeout", r.WaitTimeout)
}

// validate checks the engine's settings and the deprecated keys; the policy
// is validateRules'.
func (c *Capping) validate(p *problems) {
	if c.KeyPrefix == "" || strings.ContainsAny(c.KeyPrefix, "{} ") {
		// A brace would change the Redis Cluster hash tag and split a user's keys.
		p.add("capping.key_prefix", "%q must be non-empty, without braces or spaces", c.KeyPrefix)
	}
	positive(p, "capping.idempotency_window", c.IdempotencyWindow)
	positive(p, "capping.clock_skew_warn", c.ClockSkewWarn)
	if rc := c.RefusalCache; rc.Size < 0 || rc.Size > 100_000_000 {
		p.add("capping.refusal_cache.size", "must be from 0 (off) to 100000000 entries, got %d", rc.Size)
	}
	if ttl := c.RefusalCache.TTL.D(); ttl < time.Second || ttl > 10*time.Minute {
		// A refund or a policy change frees a slot early: a refusal must not
		// be believed much longer.
		p.add("capping.refusal_cache.ttl", "%s out of range [1s, 10m]", ttl)
	}
	switch c.Algorithm {
	case "", "sliding_log": // the only algorithm; dropDeprecated says so
	case "sliding_window":
		// Refused rather than ignored: the file asks for a trade-off (less
		// memory, approximate caps) that capper no longer makes.
		p.add("capping.algorithm", "sliding_window was removed: the packed exact log costs less CPU and memory at every max capper supports (see README, Caps); remove the key")
	default:
		p.add("capping.algorithm", "%q is not an algorithm; the key is deprecated (capper has one, exact, algorithm): remove it", c.Algorithm)
	}
}

// dropDeprecated clears the deprecated keys that validate accepted, and
// returns one message for each that was set.
func (c *Capping) dropDeprecated() []string {
	var msgs []string
	if c.Algorithm != "" {
		msgs = append(msgs, "capping.algorithm: deprecated and ignored (sliding_log, the exact log, is the only algorithm); remove the key (or "+EnvName("capping.algorithm")+")")
		c.Algorithm = ""
	}
	if c.SubIntervals != nil {
		msgs = append(msgs, "capping.sub_intervals: deprecated and ignored (it tuned the removed sliding_window algorithm); remove the key (or "+EnvName("capping.sub_intervals")+")")
		c.SubIntervals = nil
	}
	return msgs
}

func (s *Segments) validate(p *problems) {
	if s.Required && s.Source == "" {
		p.add("segments.source", "is required when segments.required is true")
	}
	if s.Source != "" && strings.Contains(s.Source, "://") &&
		!strings.HasPrefix(s.Source, "file://") && !strings.HasPrefix(s.Source, "s3://") {
		p.add("segments.source", "%q: use a directory path, file:///path or s3://bucket/prefix", s.Source)
	}
	if s.PollInterval < Duration(time.Second) {
		p.add("segments.poll_interval", "must be at least 1s, got %s", s.PollInterval.D())
	}
	if s.S3.Endpoint != "" && !strings.HasPrefix(s.S3.Endpoint, "http://") && !strings.HasPrefix(s.S3.Endpoint, "https://") {
		p.add("segments.s3.endpoint", "%q must be an http:// or https:// URL", s.S3.Endpoint)
	}
}

func (w *Worker) validate(p *problems) {
	if w.BatchSize < 1 || w.BatchSize > 10000 {
		p.add("worker.batch_size", "must be between 1 and 10000, got %d", w.BatchSize)
	}
	positive(p, "worker.batch_wait", w.BatchWait)
	oneOf(p, "worker.on_redis_error", w.OnRedisError, "wait", "allow")
	positive(p, "worker.retry_initial", w.RetryInitial)
	if w.RetryMax < w.RetryInitial {
		p.add("worker.retry_max", "must be at least worker.retry_initial (%s)", w.RetryInitial.D())
	}
	positive(p, "worker.shutdown_timeout", w.ShutdownTimeout)
}

func (h *HTTP) validate(p *problems) {
	hostPort(p, "http.address", h.Address)
}

func (l *Log) validate(p *problems) {
	oneOf(p, "log.level", l.Level, "debug", "info", "warn", "error")
	oneOf(p, "log.format", l.Format, "json", "text")
}

func (c *Config) validatePolicy(p *problems) {
	src := c.Policy.Source
	positive(p, "policy.poll_interval", c.Policy.PollInterval)
	if src == "" {
		return
	}
	switch {
	case strings.HasPrefix(src, "s3://"), strings.HasPrefix(src, "file://"), !strings.Contains(src, "://"):
	default:
		p.add("policy.source", "%q: want file:///path/policy.yaml, a directory or s3://bucket/prefix", src)
	}
	if strings.HasPrefix(src, "s3://") && c.Policy.IsFile() {
		p.add("policy.source", "%q: an S3 source is a policy store (s3://bucket/prefix, see capper policy publish), not one file", src)
	}
	for _, k := range c.Capping.InlinePolicy {
		p.add("capping."+k, "the policy comes from policy.source (%s); remove the policy from the worker config", src)
	}
}
