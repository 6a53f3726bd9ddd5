package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/capper-dev/capper/internal/capping"
)

// Every bad file must fail with an error that names what is wrong.
var badFiles = map[string][]string{
	"unknown-key.bad.yaml":         {"line 2: redis.adress: unknown key"},
	"inline-secret.bad.yaml":       {"line 2", "secrets are not read from the config file"},
	"bad-duration.bad.yaml":        {"line 2", `"50 millis" is not a duration`},
	"missing-max.bad.yaml":         {`capping.segments[0] (segment "new").limits[0] (limit "daily").max: is required`},
	"topics-clash.bad.yaml":        {"kafka.topics.deliveries", "also the input topic"},
	"parked-no-control.bad.yaml":   {"kafka.topics.parked", "needs kafka.topics.control"},
	"user-limits-clash.bad.yaml":   {`kafka.topics.user_limits: "capper-control" is also kafka.topics.control`},
	"sasl-no-password.bad.yaml":    {"kafka.sasl.password", "CAPPER_KAFKA_SASL_PASSWORD"},
	"single-many-addrs.bad.yaml":   {"redis.addrs", "mode single takes one address"},
	"sentinel-no-master.bad.yaml":  {"redis.master_name", "required with mode sentinel"},
	"reserved-segment.bad.yaml":    {`capping.segments[0] (segment "none").name: "none" is reserved for users in no segment (they get default_policy)`},
	"dup-segment.bad.yaml":         {`capping.segments[1] (segment "new").name: segment "new" is listed twice`},
	"brace-prefix.bad.yaml":        {"capping.key_prefix", "without braces"},
	"bad-enum.bad.yaml":            {`capping.algorithm: "token_bucket" is not an algorithm; the key is deprecated (capper has one, exact, algorithm): remove it`},
	"batch-size.bad.yaml":          {"worker.batch_size", "between 1 and 10000"},
	"lane-records.bad.yaml":        {`kafka.lane_records: "binary" is not one of headers, compact`},
	"two-docs.bad.yaml":            {"more than one YAML document"},
	"bad-source.bad.yaml":          {"segments.source", "gs://bucket/segments"},
	"window-range.bad.yaml":        {`capping.segments[0] (segment "new").limits[0] (limit "burst").window: 30s out of range`},
	"refusal-cache.bad.yaml":       {`capping.refusal_cache.ttl: 1h0m0s out of range [1s, 10m]`},
	"throttled-refund.bad.yaml":    {`refunds.statuses[1]: "throttled" cannot refund: a throttled send is sent again, and stays counted`},
	"refusal-cache-bytes.bad.yaml": {`capping.refusal_cache.max_bytes: must be from 1048576 (1 MiB) to 68719476736 (64 GiB), got 4096`},
	"policy-and-inline.bad.yaml":   {"capping.segments: the policy comes from policy.source (file:///etc/capper/policy.yaml); remove the policy from the worker config"},
	"policy-source.bad.yaml": {"policy.poll_interval: must be above 0, got 0s",
		`policy.source: "s3://bucket/policies/policy.yaml": an S3 source is a policy store (s3://bucket/prefix, see capper policy publish), not one file`},
	"many-problems.bad.yaml": {
		`capping.segments[0] (segment "new").limits[0] (limit "daily").max: is required (0 means never)`,
		`capping.segments[0] (segment "new").limits[1] (limit "burst").window: 30s out of range`,
		`capping.default_policy.limits[0] (limit "d").channel: "fax" is not one of the channels`,
		`worker.batch_size: must be between 1 and 10000, got 0`,
	},
	"defer-no-tiers.bad.yaml":  {"kafka.delay_tiers: the policy under capping defers intents (on_cap: defer or quiet_hours), so at least one delay tier is required"},
	"unknown-channel.bad.yaml": {`capping.segments[0] (segment "new").limits[0] (limit "daily").channel: "fax" is not one of the channels`},

	// The cap policy (package policy, capping.Rules).
	"sliding-window.bad.yaml": {"capping.algorithm: sliding_window was removed: the packed exact log costs less CPU and memory " +
		"at every max capper supports (docs/design/one-algorithm.md); remove the key"},
	"unknown-policy-key.bad.yaml": {`line 9: capping.segments[0] (segment "new").limits[0] (limit "daily").reserve.slot: unknown key; did you mean slots?`},
	"window-and-calendar.bad.yaml": {`capping.segments[0] (segment "new").limits[0] (limit "daily"): ` +
		"has both window and calendar: a limit is rolling or calendar, not both"},
	"no-window.bad.yaml": {`capping.segments[0] (segment "new").limits[0] (limit "daily").window: ` +
		"is required: a limit counts in a rolling window (e.g. 24h) or per calendar period (calendar: day, week or month)"},
	"bad-calendar.bad.yaml":   {`capping.segments[0] (segment "new").limits[0] (limit "daily").calendar: "fortnight" is not one of day, week, month`},
	"window-seconds.bad.yaml": {`capping.segments[0] (segment "new").limits[0] (limit "burst").window: 1m30.5s is not a whole number of seconds`},
	"reserve-slots.bad.yaml": {`capping.segments[0] (segment "new").limits[0] (limit "daily").reserve.slots: ` +
		"3 must be from 1 to max-1 (2): reserved slots leave at least one for everyone"},
	"reserve-no-slots.bad.yaml": {`capping.segments[0] (segment "new").limits[0] (limit "daily").reserve.slots: ` +
		"0 must be from 1 to max-1 (2): reserved slots leave at least one for everyone"},
	"reserve-below.bad.yaml": {`capping.segments[0] (segment "new").limits[0] (limit "daily").reserve.below: ` +
		`"urgent" is not low, normal, high or a whole number from 1 to 100 (intents below it may use only max - slots)`},
	"bad-per.bad.yaml": {`capping.segments[0] (segment "new").limits[0] (limit "daily").per: "channel" is not one of user, campaign`},
	"bad-tag.bad.yaml": {`capping.segments[0] (segment "new").limits[0] (limit "promo").where.tags[1]: ` +
		`"summer sale" must be 1 to 64 bytes of printable characters`},
	"where-channel.bad.yaml":  {`capping.segments[0] (segment "new").limits[0] (limit "daily").where.channels[1]: "fax" is not one of the channels`},
	"where-category.bad.yaml": {`capping.segments[0] (segment "new").limits[0] (limit "daily").where.categories[0]: "news" is not one of the categories`},
	"channel-and-where.bad.yaml": {`capping.segments[0] (segment "new").limits[0] (limit "sms").channel: ` +
		"and where.channels are the same filter: keep where.channels"},
	"bad-time-zone.bad.yaml":     {`capping.time_zone: "Europe/Atlantis" is not a time zone of the IANA database (e.g. UTC, Europe/Paris)`},
	"local-time-zone.bad.yaml":   {`capping.time_zone: "Local" is the zone of whichever machine runs capper: name the zone (e.g. UTC, Europe/Paris)`},
	"bad-week-start.bad.yaml":    {`capping.week_start: "Monday" is not one of monday, tuesday, wednesday, thursday, friday, saturday, sunday`},
	"exempt-category.bad.yaml":   {`capping.exempt_categories[1]: "receipts" is not one of the categories`},
	"override-category.bad.yaml": {`capping.overrides.categories[0]: "alerts" is not one of the categories`},
	"default-category.bad.yaml":  {`capping.default_category: "news" is not one of the categories (marketing, transactional)`},
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

// TestProblemsOnce: a bad file reports each problem once: no key twice.
func TestProblemsOnce(t *testing.T) {
	files, err := filepath.Glob("testdata/*.bad.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		_, err := LoadWithEnv(f, nil)
		if err == nil {
			t.Fatalf("%s loaded", f)
		}
		seen := map[string]bool{}
		for _, l := range strings.Split(strings.TrimPrefix(err.Error(), "load config "+f+": "), "\n") {
			key, _, _ := strings.Cut(l, ": ")
			if seen[key] {
				t.Errorf("%s: %s is reported twice:\n%v", f, key, err)
			}
			seen[key] = true
		}
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
			// A valid config gives valid rules, the time zone resolved.
			if r := cfg.Rules(); r.Validate() != nil || r.TimeZone == nil {
				t.Fatalf("rules: %v (time zone %v)", r.Validate(), r.TimeZone)
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
	if cfg.Capping.KeyPrefix != "cap-eu" || cfg.Worker.Enforce || cfg.Worker.OnRedisError != "allow" {
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

// The policy's keys (inline in capping) can be set from the environment
// like any other.
func TestEnvOverridesPolicy(t *testing.T) {
	env := []string{
		"CAPPER_CAPPING_CHANNELS=email,push",
		"CAPPER_CAPPING_TIME_ZONE=Europe/Paris",
		"CAPPER_CAPPING_WEEK_START=sunday",
		"CAPPER_CAPPING_OVERRIDES_CAMPAIGNS=outage, recall",
		"CAPPER_CAPPING_OVERRIDES_CATEGORIES=[transactional]",
		"CAPPER_CAPPING_DEFAULT_POLICY_LIMITS=[{name: d, calendar: day, max: 2, where: {tags: [promo]}, reserve: {slots: 1, below: normal}}]",
	}
	cfg, err := Parse(nil, env)
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Rules()
	if r.TimeZone.String() != "Europe/Paris" || r.WeekStart != time.Sunday || !reflect.DeepEqual(r.Channels, []string{"email", "push"}) ||
		!reflect.DeepEqual(r.Overrides, capping.Overrides{Campaigns: []string{"outage", "recall"}, Categories: []string{"transactional"}}) {
		t.Errorf("overrides not applied: %+v", r)
	}
	want := capping.Policy{Limits: []capping.Limit{{Name: "d", Calendar: capping.Day, Max: 2,
		Where: capping.Where{Tags: []string{"promo"}}, Reserve: capping.Reserve{Slots: 1, Below: capping.Normal}}}}
	if !reflect.DeepEqual(r.Default, want) {
		t.Errorf("default policy %+v, want %+v", r.Default, want)
	}
	names := EnvNames()
	for name, path := range map[string]string{
		"CAPPER_CAPPING_TIME_ZONE":             "capping.time_zone",
		"CAPPER_CAPPING_WEEK_START":            "capping.week_start",
		"CAPPER_CAPPING_OVERRIDES_CAMPAIGNS":   "capping.overrides.campaigns",
		"CAPPER_CAPPING_SEGMENTS":              "capping.segments",
		"CAPPER_CAPPING_DEFAULT_POLICY_LIMITS": "capping.default_policy.limits",
		"CAPPER_CAPPING_CHANNELS":              "capping.channels",
		"CAPPER_CAPPING_KEY_PREFIX":            "capping.key_prefix",
		"CAPPER_CAPPING_ALGORITHM":             "capping.algorithm",
		"CAPPER_CAPPING_SUB_INTERVALS":         "capping.sub_intervals",
		"CAPPER_CAPPING_EXEMPT_CATEGORIES":     "capping.exempt_categories",
		"CAPPER_CAPPING_DEFAULT_CATEGORY":      "capping.default_category",
		"CAPPER_CAPPING_OVERRIDES_CATEGORIES":  "capping.overrides.categories",
		"CAPPER_CAPPING_CATEGORIES":            "capping.categories",
		"CAPPER_CAPPING_IDEMPOTENCY_WINDOW":    "capping.idempotency_window",
		"CAPPER_CAPPING_CLOCK_SKEW_WARN":       "capping.clock_skew_warn",
	} {
		if names[name] != path {
			t.Errorf("EnvNames()[%s] = %q, want %q", name, names[name], path)
		}
	}
}

// Deprecated keys are accepted and ignored, each with a message, from the
// file or the environment; sliding_window is refused.
func TestDeprecations(t *testing.T) {
	cfg, err := LoadWithEnv("testdata/deprecated.good.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"capping.algorithm: deprecated and ignored (sliding_log, the exact log, is the only algorithm); remove the key (or CAPPER_CAPPING_ALGORITHM)",
		"capping.sub_intervals: deprecated and ignored (it tuned the removed sliding_window algorithm); remove the key (or CAPPER_CAPPING_SUB_INTERVALS)",
	}
	if !reflect.DeepEqual(cfg.Deprecations, want) {
		t.Errorf("deprecations %q, want %q", cfg.Deprecations, want)
	}
	// Ignored: the effective config is the default one.
	if cfg.Capping.Algorithm != "" || cfg.Capping.SubIntervals != nil {
		t.Errorf("deprecated keys kept: %q %v", cfg.Capping.Algorithm, cfg.Capping.SubIntervals)
	}
	out, err := cfg.Effective()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "algorithm") || strings.Contains(string(out), "sub_intervals") {
		t.Errorf("the effective config shows an ignored key:\n%s", out)
	}

	cfg, err = Parse(nil, []string{"CAPPER_CAPPING_ALGORITHM=sliding_log"})
	if err != nil || !reflect.DeepEqual(cfg.Deprecations, want[:1]) {
		t.Errorf("from the environment: %v, %q", err, cfg.Deprecations)
	}
	cfg, err = Parse(nil, []string{"CAPPER_CAPPING_SUB_INTERVALS=24"})
	if err != nil || !reflect.DeepEqual(cfg.Deprecations, want[1:]) {
		t.Errorf("from the environment: %v, %q", err, cfg.Deprecations)
	}
	_, err = Parse(nil, []string{"CAPPER_CAPPING_ALGORITHM=sliding_window"})
	if err == nil || !strings.Contains(err.Error(), "capping.algorithm: sliding_window was removed") {
		t.Errorf("sliding_window from the environment: %v", err)
	}
	// An empty algorithm is no algorithm.
	cfg, err = Parse([]byte("capping: {algorithm: \"\"}"), nil)
	if err != nil || cfg.Deprecations != nil {
		t.Errorf("algorithm \"\": %v, %q", err, cfg.Deprecations)
	}

	for _, f := range []string{"testdata/empty.good.yaml", "testdata/policy-source.good.yaml", filepath.Join("..", "..", "configs", "capper.yaml")} {
		cfg, err := LoadWithEnv(f, nil)
		if err != nil || cfg.Deprecations != nil {
			t.Errorf("%s: %v, deprecations %q", f, err, cfg.Deprecations)
		}
	}
	// A policy inside the worker config still works, with one message
	// naming the keys to move.
	cfg, err = LoadWithEnv("testdata/policy-v2.good.yaml", nil)
	if err != nil || len(cfg.Deprecations) != 1 ||
		!strings.HasPrefix(cfg.Deprecations[0], "capping.channels, capping.categories, capping.default_category,") ||
		!strings.Contains(cfg.Deprecations[0], "set policy.source") {
		t.Errorf("inline policy: %v, deprecations %q", err, cfg.Deprecations)
	}
	if cfg.Rules().TimeZone.String() != "America/New_York" {
		t.Errorf("inline policy not used: %v", cfg.Rules().TimeZone)
	}
	// From the environment too: with policy.source, an error naming the key.
	_, err = Parse([]byte("policy: {source: /etc/capper/policy.yaml}\n"), []string{"CAPPER_CAPPING_SEGMENTS=[{name: vip, limits: [{name: d, window: 24h, max: 1}]}]"})
	if err == nil || !strings.Contains(err.Error(), "capping.segments: the policy comes from policy.source") {
		t.Errorf("inline policy from the environment with policy.source: %v", err)
	}
	cfg, err = Parse(nil, []string{"CAPPER_CAPPING_TIME_ZONE=Asia/Singapore"})
	if err != nil || len(cfg.Deprecations) != 1 || !strings.HasPrefix(cfg.Deprecations[0], "capping.time_zone: a cap policy inside the worker config is deprecated") {
		t.Errorf("inline policy from the environment: %v, %q", err, cfg.Deprecations)
	}
}

// policy-v2.good.yaml sets every key of the policy: each reaches the rules.
func TestPolicyFile(t *testing.T) {
	cfg, err := LoadWithEnv("testdata/policy-v2.good.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Rules()
	if r.TimeZone.String() != "America/New_York" || r.WeekStart != time.Sunday || cfg.Capping.DefaultCategory != "news" ||
		!reflect.DeepEqual(r.Overrides, capping.Overrides{Campaigns: []string{"outage-apology"}, Categories: []string{"news"}}) ||
		!reflect.DeepEqual(r.ExemptCategories, []string{"transactional"}) {
		t.Errorf("rules %+v", r)
	}
	vip := r.PolicyOf("vip").Limits
	want := []capping.Limit{
		{Name: "daily", Window: 24 * time.Hour, Max: 3, Reserve: capping.Reserve{Slots: 1, Below: capping.High}},
		{Name: "push-gap", Window: 30 * time.Minute, Max: 1, Where: capping.Where{Channels: []string{"push"}}},
		{Name: "campaign-week", Calendar: capping.Week, Max: 2, Per: capping.PerCampaign},
		{Name: "promo-month", Calendar: capping.Month, Max: 4, Where: capping.Where{Tags: []string{"promo", "sale"},
			Categories: []string{"marketing"}, Campaigns: []string{"spring", "summer"}}},
		{Name: "calm-day", Calendar: capping.Day, Max: 5, Reserve: capping.Reserve{Slots: 2, Below: capping.Normal}},
		{Name: "sms-weekly", Window: 7 * 24 * time.Hour, Max: 1, Where: capping.Where{Channels: []string{"sms"}}},
		{Name: "no-news-sms", Window: 24 * time.Hour, Max: 0, Where: capping.Where{Channels: []string{"sms"}, Categories: []string{"news"}}},
	}
	if !reflect.DeepEqual(vip, want) {
		t.Errorf("vip limits\n%+v\nwant\n%+v", vip, want)
	}
	if got := r.Default.Limits[0]; got.Calendar != capping.Day || got.Window != 0 {
		t.Errorf("default policy %+v", r.Default)
	}
}

func TestEnvErrorsNameTheVariable(t *testing.T) {
	for env, want := range map[string]string{
		"CAPPER_WORKER_BATCH_SIZE=lots":                               "CAPPER_WORKER_BATCH_SIZE (key worker.batch_size)",
		"CAPPER_WORKER_BATCH_WAIT=soon":                               `"soon" is not a duration`,
		"CAPPER_CAPPING_DEFAULT_POLICY_LIMITS=[{name: d, wndow: 1d}]": `[0].wndow: unknown key; did you mean window?`,
		"CAPPER_HTTP_ADDRESS=nowhere":                                 "http.address",
		"CAPPER_CAPPING_SEGMENTS=[{name: a, limits: [{name: d, window: 1d, max: 1, reserve: {slot: 1}}]}]": `[0].limits[0] (limit "d").reserve.slot: unknown key; did you mean slots?`,
		"CAPPER_CAPPING_TIME_ZONE=Nowhere/Town": "capping.time_zone",
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
	documented := map[string]bool{}
	// The policy's keys are in configs/policy.yaml, at its top level; the
	// deprecated inline policy has them under capping.
	for file, prefix := range map[string]string{"capper.yaml": "", "policy.yaml": "capping"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "configs", file))
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
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
		walk(prefix, doc)
	}
	data, err := os.ReadFile(filepath.Join("..", "..", "configs", "capper.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, path := range EnvNames() {
		if documented[path] {
			continue
		}
		// Secrets are documented by their *_file key and variable name.
		if strings.Contains(string(data), name) {
			continue
		}
		t.Errorf("key %s (%s) is documented neither in configs/capper.yaml nor in configs/policy.yaml", path, name)
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
	d, problems, err := ReadPolicy(filepath.Join("..", "..", "configs", "policy.yaml"))
	if err != nil || problems != nil {
		t.Fatal(err, problems)
	}
	if got := d.SegmentNames(); !reflect.DeepEqual(got, []string{"new", "active", "dormant"}) {
		t.Fatalf("SegmentNames = %q", got)
	}
}
