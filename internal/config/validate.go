package config

// Validate: every problem of a config at once, each naming its key.

import (
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/problems"
)

// Validate checks every key and returns all problems at once, one per line,
// each naming its key.
func (c *Config) Validate() error {
	var p problems.List
	c.Kafka.validate(&p)
	c.Redis.validate(&p)
	c.Capping.validate(&p)
	c.validateRules(&p)
	c.validatePolicy(&p)
	c.Segments.validate(&p)
	c.Plans.validate(&p)
	c.Control.validate(&p, &c.Kafka)
	c.Worker.validate(&p)
	c.Refunds.validate(&p, c.Kafka.Topics.DeliveryStatus)
	c.HTTP.validate(&p)
	c.Log.validate(&p)
	return p.Err()
}

func positive(p *problems.List, field problems.Path, d Duration) {
	if d <= 0 {
		p.Add(field, "must be above 0, got %s", time.Duration(d))
	}
}

func oneOf(p *problems.List, field problems.Path, v string, allowed ...string) {
	if !slices.Contains(allowed, v) {
		p.Add(field, "%q is not one of %s", v, strings.Join(allowed, ", "))
	}
}

func hostPort(p *problems.List, field problems.Path, v string) {
	if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
		p.Add(field, "%q is not host:port", v)
	}
}

func (k *Kafka) validate(p *problems.List) {
	if len(k.Brokers) == 0 {
		p.Add(problems.Key("kafka.brokers"), "at least one broker is required")
	}
	for i, b := range k.Brokers {
		hostPort(p, problems.Key("kafka.brokers").Index(i), b)
	}
	if k.ClientID == "" {
		p.Add(problems.Key("kafka.client_id"), "is required")
	}
	if k.GroupID == "" {
		p.Add(problems.Key("kafka.group_id"), "is required")
	}
	t := k.Topics
	for _, f := range []struct{ key, v string }{
		{"kafka.topics.input", t.Input}, {"kafka.topics.deliveries", t.Deliveries}, {"kafka.topics.dead_letter", t.DeadLetter},
	} {
		if f.v == "" {
			p.Add(problems.Key(f.key), "is required")
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
			p.Add(problems.Key(key), "%q is also the input topic; capper would consume its own output", v)
		}
		if other, dup := seen[v]; dup {
			p.Add(problems.Key(key), "%q is also %s; every outcome needs its own topic", v, other)
		}
		seen[v] = key
	}
	k.TLS.validate(p, problems.Key("kafka.tls"))
	switch k.SASL.Mechanism {
	case "", "none":
	case "plain", "scram-sha-256", "scram-sha-512":
		if k.SASL.Username == "" {
			p.Add(problems.Key("kafka.sasl.username"), "is required with mechanism %s", k.SASL.Mechanism)
		}
		if k.SASL.Password == "" {
			p.Add(problems.Key("kafka.sasl.password"), "is required with mechanism %s: set %s or kafka.sasl.password_file",
				k.SASL.Mechanism, EnvName("kafka.sasl.password"))
		}
	default:
		p.Add(problems.Key("kafka.sasl.mechanism"), "%q is not one of none, plain, scram-sha-256, scram-sha-512", k.SASL.Mechanism)
	}
	oneOf(p, problems.Key("kafka.compression"), k.Compression, "none", "gzip", "snappy", "lz4", "zstd")
	oneOf(p, problems.Key("kafka.start_offset"), k.StartOffset, "earliest", "latest")
	oneOf(p, problems.Key("kafka.group_protocol"), k.GroupProtocol, "cooperative", "eager")
	oneOf(p, problems.Key("kafka.lane_records"), k.LaneRecords, "headers", "compact")
	if id := k.GroupInstanceID; len(id) > 249 || strings.ContainsAny(id, " \t\n/") {
		p.Add(problems.Key("kafka.group_instance_id"), "%q must be at most 249 characters, without spaces or slashes (e.g. the pod's name)", id)
	}
	positive(p, problems.Key("kafka.fetch_max_wait"), k.FetchMaxWait)
	positive(p, problems.Key("kafka.session_timeout"), k.SessionTimeout)
	positive(p, problems.Key("kafka.rebalance_timeout"), k.RebalanceTimeout)
	positive(p, problems.Key("kafka.heartbeat_interval"), k.HeartbeatInterval)
	positive(p, problems.Key("kafka.write_timeout"), k.WriteTimeout)
	positive(p, problems.Key("kafka.lag_interval"), k.LagInterval)
	if k.HeartbeatInterval >= k.SessionTimeout && k.SessionTimeout > 0 {
		p.Add(problems.Key("kafka.heartbeat_interval"), "must be below kafka.session_timeout (%s)", k.SessionTimeout.D())
	}
	if k.MaxIntentBytes <= 0 {
		p.Add(problems.Key("kafka.max_intent_bytes"), "must be above 0, got %d", k.MaxIntentBytes)
	}
	k.validateDelay(p, seen)
}

// validateDelay checks the delay tiers and the delivery-status topic; taken
// holds the output topics by value.
func (k *Kafka) validateDelay(p *problems.List, taken map[string]string) {
	taken[k.Topics.Input] = "kafka.topics.input"
	if s := k.Topics.Control; s != "" {
		if other, dup := taken[s]; dup {
			p.Add(problems.Key("kafka.topics.control"), "%q is also %s", s, other)
		}
		taken[s] = "kafka.topics.control"
	}
	if s := k.Topics.DeliveryStatus; s != "" {
		if other, dup := taken[s]; dup {
			p.Add(problems.Key("kafka.topics.delivery_status"), "%q is also %s", s, other)
		}
		taken[s] = "kafka.topics.delivery_status"
	}
	for i, t := range k.DelayTiers {
		at := problems.Key("kafka.delay_tiers").Index(i)
		switch {
		case t.Delay < Duration(time.Second):
			p.Add(at.Key("delay"), "must be at least 1s, got %s", t.Delay.D())
		case i > 0 && t.Delay <= k.DelayTiers[i-1].Delay:
			p.Add(at.Key("delay"), "%s must be above the previous tier's %s (shortest first)", t.Delay.D(), k.DelayTiers[i-1].Delay.D())
		}
		if t.Topic == "" {
			p.Add(at.Key("topic"), "is required")
			continue
		}
		if other, dup := taken[t.Topic]; dup {
			p.Add(at.Key("topic"), "%q is also %s; every tier needs its own topic", t.Topic, other)
		}
		taken[t.Topic] = at.Key("topic").String()
	}
	if s := k.Topics.Parked; s != "" {
		if other, dup := taken[s]; dup {
			p.Add(problems.Key("kafka.topics.parked"), "%q is also %s", s, other)
		}
		taken[s] = "kafka.topics.parked"
		if k.Topics.Control == "" {
			p.Add(problems.Key("kafka.topics.parked"), "needs kafka.topics.control: a campaign is paused there")
		}
	}
	if s := k.Topics.UserLimits; s != "" {
		if other, dup := taken[s]; dup {
			p.Add(problems.Key("kafka.topics.user_limits"), "%q is also %s", s, other)
		}
		taken[s] = "kafka.topics.user_limits"
		if k.DelayGroup() == k.UserLimitsGroup() {
			p.Add(problems.Key("kafka.delay_group_id"), "%q is also the user-limits topic's group (kafka.group_id-user-limits)", k.DelayGroupID)
		}
	}
	if s := k.Topics.Lanes; s != "" {
		if !lanePrefix.MatchString(s) {
			p.Add(problems.Key("kafka.topics.lanes"), "%q is not a topic name prefix (letters, digits, '.', '_', '-'; at most 150)", s)
		}
		for t, other := range taken {
			if strings.HasPrefix(t, s+".") {
				p.Add(problems.Key("kafka.topics.lanes"), "%q would take %s (%q) for a lane", s, other, t)
			}
		}
	}
	if (len(k.DelayTiers) > 0 || k.Topics.Lanes != "" || k.Topics.Parked != "") && k.DelayGroup() == k.GroupID {
		p.Add(problems.Key("kafka.delay_group_id"), "%q is also kafka.group_id: the delay tiers, lanes and parked topic need a group of their own", k.DelayGroupID)
	}
}

// lanePrefix is what kafka.topics.lanes may be: the start of a topic name
// (<lanes>.<budget>.<lane> stays within Kafka's 249 characters).
var lanePrefix = regexp.MustCompile(`^[A-Za-z0-9._-]{1,150}$`)

// MaxMaxPause bounds control.max_pause: paused intents wait in the delay
// tiers, whose retention must outlast the wait (as for max_defer).
const MaxMaxPause = 7 * 24 * time.Hour

func (c *Control) validate(p *problems.List, k *Kafka) {
	if c.MaxPause < Duration(time.Minute) || c.MaxPause > Duration(MaxMaxPause) {
		p.Add(problems.Key("control.max_pause"), "%s out of range [1m, %s]", c.MaxPause.D(), MaxMaxPause)
	}
	if k.Topics.Control != "" && len(k.DelayTiers) == 0 {
		p.Add(problems.Key("kafka.topics.control"), "needs kafka.delay_tiers: a paused campaign's intents wait in the first tier")
	}
}

func (r *Refunds) validate(p *problems.List, topic string) {
	if topic != "" && len(r.Statuses) == 0 {
		p.Add(problems.Key("refunds.statuses"), "at least one status is required with kafka.topics.delivery_status")
	}
	for i, s := range r.Statuses {
		switch {
		case s == "" || len(s) > 64:
			p.Add(problems.Key("refunds.statuses").Index(i), "%q must be 1 to 64 bytes", s)
		case s == pacing.StatusThrottled:
			// Its sender sends it again: refunded, that send would go
			// uncounted.
			p.Add(problems.Key("refunds.statuses").Index(i), "%q cannot refund: a throttled send is sent again, and stays counted (it slows its budget instead)", s)
		}
	}
}

func (t *TLS) validate(p *problems.List, prefix problems.Path) {
	if (t.CertFile == "") != (t.KeyFile == "") {
		p.Add(prefix.Key("cert_file"), "cert_file and key_file go together")
	}
	if !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.ServerName != "" || t.InsecureSkipVerify) {
		p.Add(prefix.Key("enabled"), "is false but other TLS keys are set; set enabled: true")
	}
}

func (r *Redis) validate(p *problems.List) {
	// The deployment-mode rules are the client's own (one owner).
	for _, fe := range (capping.ClientOptions{Mode: r.Mode, Addrs: r.Addrs, MasterName: r.MasterName, DB: r.DB}).Validate() {
		p.Add(problems.Key("redis").Key(fe.Field), "%s", fe.Msg)
	}
	for i, a := range r.Addrs {
		hostPort(p, problems.Key("redis.addrs").Index(i), a)
	}
	r.TLS.validate(p, problems.Key("redis.tls"))
	positive(p, problems.Key("redis.dial_timeout"), r.DialTimeout)
	positive(p, problems.Key("redis.read_timeout"), r.ReadTimeout)
	positive(p, problems.Key("redis.write_timeout"), r.WriteTimeout)
	if r.PoolSize < 0 {
		p.Add(problems.Key("redis.pool_size"), "must not be negative (0 = go-redis default)")
	}
	if r.MaxRetries < -1 {
		p.Add(problems.Key("redis.max_retries"), "must be -1 (no retries) or more")
	}
	if r.WaitReplicas < 0 {
		p.Add(problems.Key("redis.wait_replicas"), "must not be negative, got %d", r.WaitReplicas)
	}
	positive(p, problems.Key("redis.wait_timeout"), r.WaitTimeout)
}

// validate checks the engine's settings and the deprecated keys; the policy
// is validateRules'.
func (c *Capping) validate(p *problems.List) {
	if c.KeyPrefix == "" || strings.ContainsAny(c.KeyPrefix, "{} ") {
		// A brace would change the Redis Cluster hash tag and split a user's keys.
		p.Add(problems.Key("capping.key_prefix"), "%q must be non-empty, without braces or spaces", c.KeyPrefix)
	}
	positive(p, problems.Key("capping.idempotency_window"), c.IdempotencyWindow)
	positive(p, problems.Key("capping.clock_skew_warn"), c.ClockSkewWarn)
	if rc := c.RefusalCache; rc.Size < 0 || rc.Size > 100_000_000 {
		p.Add(problems.Key("capping.refusal_cache.size"), "must be from 0 (off) to 100000000 users, got %d", rc.Size)
	}
	if mb := c.RefusalCache.MaxBytes; mb < 1<<20 || mb > 64<<30 {
		p.Add(problems.Key("capping.refusal_cache.max_bytes"), "must be from 1048576 (1 MiB) to 68719476736 (64 GiB), got %d", mb)
	}
	if ttl := c.RefusalCache.TTL.D(); ttl < time.Second || ttl > 10*time.Minute {
		// A refund or a policy change frees a slot early: a refusal must not
		// be believed much longer.
		p.Add(problems.Key("capping.refusal_cache.ttl"), "%s out of range [1s, 10m]", ttl)
	}
	switch c.Algorithm {
	case "", "sliding_log": // the only algorithm; dropDeprecated says so
	case "sliding_window":
		// Refused rather than ignored: the file asks for a trade-off (less
		// memory, approximate caps) that capper no longer makes.
		p.Add(problems.Key("capping.algorithm"), "sliding_window was removed: the packed exact log costs less CPU and memory at every max capper supports (docs/design/one-algorithm.md); remove the key")
	default:
		p.Add(problems.Key("capping.algorithm"), "%q is not an algorithm; the key is deprecated (capper has one, exact, algorithm): remove it", c.Algorithm)
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

func (s *Segments) validate(p *problems.List) {
	if s.Required && s.Source == "" {
		p.Add(problems.Key("segments.source"), "is required when segments.required is true")
	}
	if s.Source != "" && strings.Contains(s.Source, "://") &&
		!strings.HasPrefix(s.Source, "file://") && !strings.HasPrefix(s.Source, "s3://") {
		p.Add(problems.Key("segments.source"), "%q: use a directory path, file:///path or s3://bucket/prefix", s.Source)
	}
	if s.PollInterval < Duration(time.Second) {
		p.Add(problems.Key("segments.poll_interval"), "must be at least 1s, got %s", s.PollInterval.D())
	}
	if s.S3.Endpoint != "" && !strings.HasPrefix(s.S3.Endpoint, "http://") && !strings.HasPrefix(s.S3.Endpoint, "https://") {
		p.Add(problems.Key("segments.s3.endpoint"), "%q must be an http:// or https:// URL", s.S3.Endpoint)
	}
}

func (pl *Plans) validate(p *problems.List) {
	if pl.Source != "" && strings.Contains(pl.Source, "://") &&
		!strings.HasPrefix(pl.Source, "file://") && !strings.HasPrefix(pl.Source, "s3://") {
		p.Add(problems.Key("plans.source"), "%q: use a directory path, file:///path or s3://bucket/prefix", pl.Source)
	}
	if pl.PollInterval < Duration(time.Second) {
		p.Add(problems.Key("plans.poll_interval"), "must be at least 1s, got %s", pl.PollInterval.D())
	}
}

func (w *Worker) validate(p *problems.List) {
	if w.BatchSize < 1 || w.BatchSize > 10000 {
		p.Add(problems.Key("worker.batch_size"), "must be between 1 and 10000, got %d", w.BatchSize)
	}
	positive(p, problems.Key("worker.batch_wait"), w.BatchWait)
	oneOf(p, problems.Key("worker.on_redis_error"), w.OnRedisError, "wait", "allow")
	positive(p, problems.Key("worker.retry_initial"), w.RetryInitial)
	if w.RetryMax < w.RetryInitial {
		p.Add(problems.Key("worker.retry_max"), "must be at least worker.retry_initial (%s)", w.RetryInitial.D())
	}
	positive(p, problems.Key("worker.shutdown_timeout"), w.ShutdownTimeout)
	if w.StuckTimeout < 0 {
		p.Add(problems.Key("worker.stuck_timeout"), "must be 0 (never) or above, got %s", time.Duration(w.StuckTimeout))
	}
}

func (h *HTTP) validate(p *problems.List) {
	hostPort(p, problems.Key("http.address"), h.Address)
}

func (l *Log) validate(p *problems.List) {
	oneOf(p, problems.Key("log.level"), l.Level, "debug", "info", "warn", "error")
	oneOf(p, problems.Key("log.format"), l.Format, "json", "text")
}

func (c *Config) validatePolicy(p *problems.List) {
	src := c.Policy.Source
	positive(p, problems.Key("policy.poll_interval"), c.Policy.PollInterval)
	if src == "" {
		return
	}
	switch {
	case strings.HasPrefix(src, "s3://"), strings.HasPrefix(src, "file://"), !strings.Contains(src, "://"):
	default:
		p.Add(problems.Key("policy.source"), "%q: want file:///path/policy.yaml, a directory or s3://bucket/prefix", src)
	}
	if strings.HasPrefix(src, "s3://") && c.Policy.IsFile() {
		p.Add(problems.Key("policy.source"), "%q: an S3 source is a policy store (s3://bucket/prefix, see capper policy publish), not one file", src)
	}
	for _, k := range c.Capping.InlinePolicy {
		p.Add(problems.Key("capping").Key(k), "the policy comes from policy.source (%s); remove the policy from the worker config", src)
	}
}
