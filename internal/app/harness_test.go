package app_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/app"
	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/cli"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/demo"
	"github.com/capper-dev/capper/internal/dispatch"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/segments"
	"github.com/capper-dev/capper/internal/testenv"
)

// Topics of the end-to-end tests.
const (
	tIn  = "send-intents"
	tDel = "deliveries"
	tSup = "suppressed"
	tDLQ = "send-intents-dlq"
	// The delay tiers and the delivery-status topic (defer_test.go).
	tDelay1m  = "send-intents-delay-1m"
	tDelay10m = "send-intents-delay-10m"
	tDelay1h  = "send-intents-delay-1h"
	tStatus   = "delivery-status"
	tControl  = "capper-control"
	e2eS3     = "capper-segments"
)

// fastClock runs factor times faster than the wall clock from a fixed start,
// so that minute-long windows roll over within a test. Every worker of a
// test shares one, as replicas share (roughly) one time.
type fastClock struct {
	base   time.Time
	start  time.Time
	factor time.Duration
}

func newFastClock(factor time.Duration) *fastClock {
	return &fastClock{base: time.Date(2026, 11, 21, 16, 0, 0, 0, time.UTC), start: time.Now(), factor: factor}
}

func (c *fastClock) Now() time.Time { return c.base.Add(time.Since(c.start) * c.factor) }

// Sleep waits d of the fast clock.
func (c *fastClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d / c.factor)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// e2e is one end-to-end environment: Kafka, S3 and Redis as real servers,
// and the config a worker gets to run against them.
type e2e struct {
	t        *testing.T
	kafka    *testenv.Kafka
	s3       *testenv.S3
	redis    *testenv.Redis    // single mode; the first master in sentinel mode
	clus     *testenv.Cluster  // cluster mode
	replicas []*testenv.Redis  // sentinel mode
	sentinel *testenv.Sentinel // sentinel mode
	clock    *fastClock
	now      func() time.Time // the workers' clock when set, else clock's
	store    objstore.Store
	inputs   int // records produced so far
}

func newE2E(t *testing.T, mode string, redisArgs ...string) *e2e {
	t.Helper()
	e := &e2e{t: t, clock: newFastClock(600)}
	switch mode {
	case "single":
		e.redis = testenv.StartRedis(t, testenv.RedisOptions{Args: redisArgs})
	case "cluster":
		e.clus = testenv.StartCluster(t, 3)
	case "sentinel":
		e.redis = testenv.StartRedis(t, testenv.RedisOptions{Args: redisArgs})
		e.replicas = []*testenv.Redis{testenv.ReplicaOf(t, e.redis), testenv.ReplicaOf(t, e.redis)}
		e.sentinel = testenv.StartSentinel(t, "capper", e.redis.Port, testenv.SentinelOptions{DownAfter: 500 * time.Millisecond})
	default:
		t.Fatalf("mode %q", mode)
	}
	e.kafka = testenv.StartKafka(t, 4, []string{tIn, tDel, tSup, tDLQ, tStatus, tDelay1m, tDelay10m, tDelay1h, tControl})
	e.s3 = testenv.StartS3(t, e2eS3)
	e.s3.SetEnv(t)
	st, err := app.OpenSegmentStore(context.Background(), e.config(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e.store = st
	return e
}

// e2ePolicy has minute-scale windows so they roll over under the fast clock
// (1 real second = 10 minutes), a channel-scoped limit and a max 0 limit.
const e2ePolicy = `
capping:
  segments:
    - name: new
      limits:
        - {name: per-minute, window: 1m, max: 1}
        - {name: per-5m, window: 5m, max: 2}
    - name: active
      limits:
        - {name: per-minute, window: 1m, max: 3}
        - {name: per-10m, window: 10m, max: 6}
        - {name: sms-10m, window: 10m, max: 1, channel: sms}
    - name: dormant
      limits:
        - {name: per-5m, window: 5m, max: 1}
        - {name: no-sms, window: 1m, max: 0, channel: sms}
  default_policy:
    limits:
      - {name: per-minute, window: 1m, max: 2}
`

func (e *e2e) config() *config.Config {
	e.t.Helper()
	cfg, err := config.Parse([]byte(e2ePolicy), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.Kafka.Brokers = e.kafka.Addrs
	cfg.Kafka.GroupID = "capper-e2e"
	cfg.Kafka.FetchMaxWait = config.Duration(100 * time.Millisecond)
	cfg.Kafka.SessionTimeout = config.Duration(6 * time.Second) // kfake's minimum
	cfg.Kafka.RebalanceTimeout = config.Duration(6 * time.Second)
	cfg.Kafka.HeartbeatInterval = config.Duration(200 * time.Millisecond)
	switch {
	case e.sentinel != nil:
		cfg.Redis.Mode, cfg.Redis.Addrs, cfg.Redis.MasterName = "sentinel", []string{e.sentinel.Addr}, "capper"
	case e.redis != nil:
		cfg.Redis.Mode, cfg.Redis.Addrs = "single", []string{e.redis.Addr()}
	default:
		cfg.Redis.Mode, cfg.Redis.Addrs = "cluster", e.clus.Addrs()
	}
	cfg.Redis.ReadTimeout = config.Duration(500 * time.Millisecond)
	cfg.Redis.DialTimeout = config.Duration(300 * time.Millisecond)
	cfg.Segments.Source = "s3://" + e2eS3 + "/prod"
	cfg.Segments.S3 = config.S3{Region: e.s3.Region, Endpoint: e.s3.URL, UsePathStyle: true}
	cfg.Segments.PollInterval = config.Duration(time.Second)
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.Worker.BatchSize = 100
	cfg.Worker.BatchWait = config.Duration(20 * time.Millisecond)
	cfg.Worker.RetryInitial = config.Duration(20 * time.Millisecond)
	cfg.Worker.RetryMax = config.Duration(300 * time.Millisecond)
	cfg.Worker.ShutdownTimeout = config.Duration(15 * time.Second)
	if err := cfg.Validate(); err != nil {
		e.t.Fatal(err)
	}
	return cfg
}

// publish builds and publishes a synthetic snapshot of users [0, users).
func (e *e2e) publish(users int, seed uint64) *segments.Manifest {
	e.t.Helper()
	m, err := demo.BuildSnapshot(context.Background(), e.store, users, seed, e.clock.Now)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// produce writes records to the input topic, keyed as given.
func (e *e2e) produce(msgs []kafka.Message) {
	e.t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(e.kafka.Addrs...), Topic: tIn, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, BatchSize: 500, Balancer: &kafka.Murmur2Balancer{}}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		e.t.Fatalf("produce %d intents: %v", len(msgs), err)
	}
	e.inputs += len(msgs)
}

// worker is one running capper worker (app.Run in a goroutine).
type worker struct {
	name   string
	cancel context.CancelFunc
	done   chan error
	http   string
	reg    *prometheus.Registry
	log    *testenv.SyncBuffer
}

// start runs a worker with cfg until stop; it fails the test if the worker
// does not come up.
func (e *e2e) start(name string, cfg *config.Config) *worker {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker{name: name, cancel: cancel, done: make(chan error, 1), reg: prometheus.NewRegistry(), log: &testenv.SyncBuffer{}}
	started := make(chan string, 1)
	logger := slog.New(slog.NewJSONHandler(w.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	now := e.clock.Now
	if e.now != nil {
		now = e.now
	}
	go func() {
		w.done <- app.Run(ctx, app.Options{Config: cfg, Logger: logger, Registry: w.reg, Now: now, Sleep: e.clock.Sleep, Build: cli.BuildOf("test", ""),
			Started: func(addr string) { started <- addr }})
	}()
	select {
	case w.http = <-started:
	case err := <-w.done:
		e.t.Fatalf("worker %s did not start: %v\n%s", name, err, w.log)
	case <-time.After(30 * time.Second):
		e.t.Fatalf("worker %s did not start in 30s\n%s", name, w.log)
	}
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-w.done:
		case <-time.After(30 * time.Second):
		}
		if e.t.Failed() {
			e.t.Logf("worker %s log (tail):\n%s", name, tail(w.log.String(), 4000))
		}
	})
	return w
}

// stop ends the worker as SIGTERM would and returns Run's result.
func (w *worker) stop(t *testing.T) error {
	t.Helper()
	w.cancel()
	select {
	case err := <-w.done:
		w.done <- err // keep it for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("worker %s did not stop in 30s", w.name)
		return nil
	}
}

func (w *worker) get(path string) (int, string) {
	resp, err := http.Get("http://" + w.http + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// outputs is what the three output topics hold.
type outputs struct {
	deliveries, suppressed, dlq []kafka.Message
}

func (e *e2e) read() outputs {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var o outputs
	var err error
	for _, x := range []struct {
		topic string
		dst   *[]kafka.Message
	}{{tDel, &o.deliveries}, {tSup, &o.suppressed}, {tDLQ, &o.dlq}} {
		if *x.dst, err = audit.ReadTopic(ctx, e.kafka.Addrs, x.topic); err != nil {
			e.t.Fatal(err)
		}
	}
	return o
}

func header(m kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func topicsOf(ms []kafka.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Topic
	}
	return out
}

// sources maps each input record (capper-source) to the output topics that
// hold it.
func (o outputs) sources() map[string]map[string]int {
	m := map[string]map[string]int{}
	for _, x := range []struct {
		topic string
		msgs  []kafka.Message
	}{{tDel, o.deliveries}, {tSup, o.suppressed}, {tDLQ, o.dlq}} {
		for _, r := range x.msgs {
			src := header(r, "capper-source")
			if m[src] == nil {
				m[src] = map[string]int{}
			}
			m[src][x.topic]++
		}
	}
	return m
}

// waitDrained waits until every produced input has an outcome.
func (e *e2e) waitDrained(timeout time.Duration, workers ...*worker) outputs {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		o := e.read()
		if n := len(o.sources()); n >= e.inputs {
			return o
		} else if time.Now().After(deadline) {
			var logs []string
			for _, w := range workers {
				logs = append(logs, w.name+":\n"+tail(w.log.String(), 3000))
			}
			e.t.Fatalf("only %d of %d inputs have an outcome after %s\n%s", n, e.inputs, timeout, strings.Join(logs, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// verify checks the invariants on everything produced so far: each input
// offset has an outcome (nothing lost), repeats of an input carry its id,
// and the audit finds no window above its limit. Each input is in exactly
// one output topic, except after a redelivery (redelivered: a crash or a
// rebalance happened): a capped intent redelivered is decided again, and
// may then be delivered, but only once its retry-after has passed, exactly
// as a retry by the scheduler would be.
func (e *e2e) verify(o outputs, cfg *config.Config, redelivered bool) {
	e.t.Helper()
	e.verifyOutcomes(o, redelivered)
	e.verifyOrder(o)
	if v := e.violations(o, cfg); len(v) > 0 {
		for i, x := range v {
			if i == 10 {
				break
			}
			e.t.Errorf("audit: %s", x)
		}
		e.t.Fatalf("audit: %d violations", len(v))
	}
}

// verifyOutcomes checks that every input has exactly one outcome (several
// only when redelivered: capped, then allowed after its retry-after) and
// that every output names an input.
func (e *e2e) verifyOutcomes(o outputs, redelivered bool) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	in, err := audit.ReadTopic(ctx, e.kafka.Addrs, tIn)
	if err != nil {
		e.t.Fatal(err)
	}
	if len(in) != e.inputs {
		e.t.Fatalf("input topic holds %d records, produced %d", len(in), e.inputs)
	}
	copies := audit.NewCopies(tIn, in, o.deliveries, o.suppressed, o.dlq)
	// A status that hands a throttled send back is an input of its own.
	copies.AddInputs(tStatus, audit.HandBacks(e.statuses(ctx)))
	redecided := 0
	for _, key := range copies.Inputs() {
		// (A redelivery within one topic, a duplicate, is judged below.)
		topics := slices.Compact(slices.Sorted(slices.Values(topicsOf(copies.Of(key)))))
		switch {
		case len(topics) == 0:
			e.t.Errorf("input %s has no outcome: lost", key)
		case len(topics) > 1 && !redelivered:
			e.t.Errorf("input %s is in several output topics: %v", key, topics)
		case len(topics) > 1:
			redecided++
			e.redecidedAfterRetry(key, o)
		}
	}
	if unknown := copies.Unknown(""); len(unknown) > 0 {
		e.t.Errorf("%d outputs name no input: %v", len(unknown), unknown)
	}
	if redecided > 0 {
		e.t.Logf("%d redelivered inputs were capped, then delivered after their retry-after", redecided)
	}
	// Every copy of an input carries the input's bytes, so its id.
	for _, x := range [][]kafka.Message{o.deliveries, o.suppressed, o.dlq} {
		seen := map[string]string{}
		for _, r := range x {
			s := header(r, "capper-source")
			if v, ok := seen[s]; ok && v != string(r.Value) {
				e.t.Errorf("input %s delivered twice with different values", s)
			}
			seen[s] = string(r.Value)
		}
	}
}

// verifyOrder checks that each user's intents were decided in partition
// order within each delivery pass (audit.Order: a redelivered input is
// decided again, in a pass of its own).
func (e *e2e) verifyOrder(o outputs) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	in, err := audit.ReadTopic(ctx, e.kafka.Addrs, tIn)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, f := range audit.Order(in, o.deliveries, o.suppressed) {
		e.t.Errorf("order: %s", f)
	}
}

// violations audits the deliveries against the caps.
func (e *e2e) violations(o outputs, cfg *config.Config) []audit.Violation {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A delivery its sender handed back (throttled) was not sent.
	sends, err := audit.Sends(audit.Delivered(o.deliveries, e.statuses(ctx)))
	if err != nil {
		e.t.Fatal(err)
	}
	return audit.Check(cfg.Rules(), sends)
}

// statuses are the delivery-status topic's records (none: the topic is
// missing or empty).
func (e *e2e) statuses(ctx context.Context) []kafka.Message {
	e.t.Helper()
	st, err := audit.ReadTopic(ctx, e.kafka.Addrs, tStatus)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// redecidedAfterRetry checks an input found in two topics: it was capped,
// then redelivered and allowed no earlier than its retry-after.
func (e *e2e) redecidedAfterRetry(src string, o outputs) {
	e.t.Helper()
	var capped, delivered []kafka.Message
	for _, m := range o.suppressed {
		if header(m, "capper-source") == src {
			capped = append(capped, m)
		}
	}
	for _, m := range o.deliveries {
		if header(m, "capper-source") == src {
			delivered = append(delivered, m)
		}
	}
	if len(capped) == 0 || len(delivered) == 0 || len(capped)+len(delivered) < 2 {
		e.t.Errorf("input %s is in several topics, but not as capped then delivered", src)
		return
	}
	for _, c := range capped {
		at, err1 := time.Parse(dispatch.TimeLayout, header(c, "capper-decided-at"))
		retry, err2 := time.ParseDuration(header(c, "capper-retry-after-ms") + "ms")
		for _, d := range delivered {
			if header(d, "capper-duplicate") == "true" {
				// Allowed and counted once, at its first decision (its
				// decided-at); a capped copy is the refusal cache not
				// knowing an id another worker allowed (README, The
				// refusal cache). The audit checks the caps either way.
				continue
			}
			dat, err3 := time.Parse(dispatch.TimeLayout, header(d, "capper-decided-at"))
			if err := errors.Join(err1, err2, err3); err != nil {
				e.t.Fatalf("input %s: %v", src, err)
			}
			if dat.Before(at.Add(retry)) {
				e.t.Errorf("input %s: capped at %s (retry after %s), yet delivered at %s", src, at, retry, dat)
			}
		}
	}
}

func count(msgs []kafka.Message, key, value string) int {
	n := 0
	for _, m := range msgs {
		if header(m, key) == value {
			n++
		}
	}
	return n
}

func TestMain(m *testing.M) {
	// The S3 store uses the AWS default credential chain; keep a developer's
	// ~/.aws out of the tests.
	os.Setenv("AWS_CONFIG_FILE", os.DevNull)
	os.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	// A test that runs away in memory fails with its stacks (a CI run
	// once grew this binary to 24 GB and swapped until it was killed).
	testenv.GuardMemory(6 << 30)
	os.Exit(m.Run())
}

// metric returns the value of the series name{labels} in w's registry: a
// counter's or gauge's value, a histogram's sample count, summed over the
// series that match (labels need not name every label); 0 when absent.
func metric(t *testing.T, w *worker, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}
