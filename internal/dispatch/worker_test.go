package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/segments"
	"github.com/capper-dev/capper/internal/testenv"
)

// These tests run the worker against real components (kfake over TCP, a
// real redis-server, the real capping engine). Faults are injected around
// them: a wrapper that stops the worker at a chosen point, kfake failing
// produce requests, a killed Redis.

const (
	tIn  = "send-intents"
	tDel = "deliveries"
	tSup = "suppressed"
	tDLQ = "send-intents-dlq"
)

var testRules = capping.Rules{
	Default:          capping.Policy{Limits: []capping.Limit{{Name: "daily", Window: 24 * time.Hour, Max: 2}}},
	Channels:         testChannels,
	Categories:       testCategories,
	ExemptCategories: config.Default().Capping.ExemptCategories,
	TimeZone:         time.UTC,
}

type env struct {
	t      testing.TB
	kafka  *testenv.Kafka
	redis  *testenv.Redis
	engine *capping.Engine
	group  string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{t: t, group: "g-" + strings.ReplaceAll(t.Name(), "/", "-")}
	e.redis = testenv.StartRedis(t, testenv.RedisOptions{})
	e.kafka = testenv.StartKafka(t, 4, []string{tIn, tDel, tSup, tDLQ})
	e.engine = e.newEngine(t)
	return e
}

func (e *env) newEngine(t testing.TB) *capping.Engine { return e.newEngineWith(t, testRules) }

func (e *env) newEngineWith(t testing.TB, rules capping.Rules) *capping.Engine {
	rdb, err := capping.NewClient(capping.ClientOptions{Mode: capping.ModeSingle, Addrs: []string{e.redis.Addr()},
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	c := config.Default().Capping
	eng, err := capping.New(context.Background(), capping.Options{Client: rdb, Rules: rules,
		KeyPrefix: c.KeyPrefix, IdempotencyWindow: c.IdempotencyWindow.D(), SkewWarn: c.ClockSkewWarn.D()})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// intents returns n valid intents over users users, ids unique.
func intents(n, users int, prefix string) []kafka.Message {
	out := make([]kafka.Message, n)
	for i := range out {
		u := i % users
		out[i] = kafka.Message{
			Key:   fmt.Appendf(nil, "%d", u),
			Value: fmt.Appendf(nil, `{"id":"%s-%d","user_id":%d,"campaign_id":"c","channel":"push","payload":{"n":%d}}`, prefix, i, u, i),
		}
	}
	return out
}

type running struct {
	w      *Worker
	reader *Consumer
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

// start runs a worker with real kafka-go reader and writers; wrap may
// decorate them.
func (e *env) start(mut func(*Options)) *running {
	e.t.Helper()
	kopts := testKafkaOptions(e.kafka.Addrs, e.group)
	reader, err := NewConsumer(ConsumerOptions{Kafka: kopts, Input: tIn})
	if err != nil {
		e.t.Fatal(err)
	}
	writer := func(topic string) Output {
		w, err := kafka.NewWriter(kopts, topic)
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { w.Close() })
		return Output{Topic: topic, Writer: w}
	}
	r := &running{reader: reader, reg: prometheus.NewRegistry(), done: make(chan error, 1)}
	o := Options{
		Reader: reader, Deliveries: writer(tDel), Suppressed: writer(tSup), DeadLetter: writer(tDLQ),
		Decider: e.engine, Refunder: e.engine, Snapshots: &segments.Current{}, Decoder: testDecoder(e.t, 0),
		BatchSize: 50, BatchWait: 20 * time.Millisecond, RetryInitial: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond,
		ShutdownTimeout: config.Default().Worker.ShutdownTimeout.D(),
		Registerer:      r.reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if mut != nil {
		mut(&o)
	}
	w, err := New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	r.w = w
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		err := w.Run(ctx)
		reader.Close()
		r.done <- err
	}()
	e.t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
		}
	})
	return r
}

func (r *running) wait(t testing.TB) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("worker did not return")
		return nil
	}
}

type outs struct{ del, sup, dlq []kafka.Message }

func (e *env) read() outs {
	e.t.Helper()
	ctx := context.Background()
	var o outs
	var err error
	if o.del, err = audit.ReadTopic(ctx, e.kafka.Addrs, tDel); err != nil {
		e.t.Fatal(err)
	}
	if o.sup, err = audit.ReadTopic(ctx, e.kafka.Addrs, tSup); err != nil {
		e.t.Fatal(err)
	}
	if o.dlq, err = audit.ReadTopic(ctx, e.kafka.Addrs, tDLQ); err != nil {
		e.t.Fatal(err)
	}
	return o
}

// sources counts outputs per input record.
func (o outs) sources() map[string]int {
	m := map[string]int{}
	for _, list := range [][]kafka.Message{o.del, o.sup, o.dlq} {
		for _, r := range list {
			m[headerValue(r, HeaderSource)]++
		}
	}
	return m
}

func headerValue(m kafka.Message, k string) string {
	for _, h := range m.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

func (e *env) waitOutcomes(n int) outs {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		o := e.read()
		if len(o.sources()) >= n {
			return o
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d of %d inputs have an outcome", len(o.sources()), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *env) auditOK(o outs) {
	e.t.Helper()
	sends, err := audit.Sends(o.del)
	if err != nil {
		e.t.Fatal(err)
	}
	if v := audit.Check(testRules, sends); len(v) > 0 {
		e.t.Fatalf("audit: %d violations, first: %s", len(v), v[0])
	}
}

// commitGate stops the worker at its Nth commit: the batch's outcomes are
// written and acknowledged, Redis has recorded its decisions, and the
// offsets are not committed - a worker dying between write and commit.
type commitGate struct {
	Reader
	n      atomic.Int32
	at     int32
	crash  func()
	closed atomic.Bool
}

func (g *commitGate) CommitMessages(ctx context.Context, msgs ...kafka.Message) error {
	if g.n.Add(1) >= g.at || g.closed.Load() {
		if g.closed.CompareAndSwap(false, true) {
			g.crash()
		}
		return errors.New("crashed before commit")
	}
	return g.Reader.CommitMessages(ctx, msgs...)
}

func TestCrashBetweenWriteAndCommit(t *testing.T) {
	e := newEnv(t)
	in := intents(600, 40, "a")
	e.kafka.Produce(t, tIn, in)
	crashed := make(chan struct{})
	first := e.start(func(o *Options) {
		o.Reader = &commitGate{Reader: o.Reader, at: 1, crash: func() { close(crashed) }}
	})
	go func() { <-crashed; first.cancel() }()
	if err := first.wait(t); err != nil {
		t.Fatalf("first worker: %v", err)
	}
	before := e.read()
	if len(before.sources()) == 0 {
		t.Fatal("the first worker wrote nothing before crashing")
	}
	committed := e.kafka.Committed(t, e.group, tIn, 4)

	second := e.start(nil)
	e.waitOutcomes(len(in))
	// Every input has an outcome; the redelivered ones are decided again
	// once the second worker has committed the whole topic.
	deadline := time.Now().Add(60 * time.Second)
	for sum := int64(0); sum < int64(len(in)); {
		sum = 0
		for _, off := range e.kafka.Committed(t, e.group, tIn, 4) {
			sum += max(off, 0)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second worker committed %d of %d", sum, len(in))
		}
		time.Sleep(20 * time.Millisecond)
	}
	o := e.read()
	second.cancel()
	if err := second.wait(t); err != nil {
		t.Fatal(err)
	}
	e.auditOK(o)

	// The uncommitted batch was delivered again: the same input bytes (so the
	// same id), decided duplicate this time, not counted twice.
	repeats := 0
	for src, n := range o.sources() {
		if n > 1 {
			repeats++
			if n > 2 {
				t.Errorf("input %s has %d outcomes", src, n)
			}
		}
	}
	if repeats == 0 {
		t.Fatalf("no input was redelivered after the crash (committed %v)", committed)
	}
	dups := 0
	for _, m := range o.del {
		if headerValue(m, HeaderDuplicate) == "true" {
			dups++
		}
	}
	if dups == 0 {
		t.Fatalf("no redelivered intent was answered duplicate")
	}
	// A duplicate carries the time its intent was first allowed, so the
	// deliveries stay auditable even when the first copy was never written:
	// to the second, as the engine keeps it.
	firstAt := map[string]string{}
	for _, m := range o.del {
		if headerValue(m, HeaderDuplicate) == "" {
			at, err := time.Parse(TimeLayout, headerValue(m, HeaderDecidedAt))
			if err != nil {
				t.Fatal(err)
			}
			firstAt[headerValue(m, HeaderSource)] = at.Truncate(time.Second).UTC().Format(TimeLayout)
		}
	}
	for _, m := range o.del {
		src := headerValue(m, HeaderSource)
		if f, ok := firstAt[src]; ok && headerValue(m, HeaderDuplicate) == "true" && headerValue(m, HeaderDecidedAt) != f {
			t.Errorf("input %s: duplicate decided-at %s, first delivery %s (to the second)", src, headerValue(m, HeaderDecidedAt), f)
		}
	}
	t.Logf("redelivered %d inputs, %d answered duplicate", repeats, dups)
}

// refuseWrites makes the broker answer every produce request for topic with
// a retriable error until the returned func is called. It counts refusals.
func refuseWrites(e *env, topic string) (stop func(), refused *atomic.Int32) {
	var failing atomic.Bool
	failing.Store(true)
	refused = &atomic.Int32{}
	e.kafka.Cluster.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		e.kafka.Cluster.KeepControl()
		req := kreq.(*kmsg.ProduceRequest)
		if !failing.Load() || len(req.Topics) != 1 || req.Topics[0].Topic != topic {
			return nil, nil, false
		}
		refused.Add(1)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			t := kmsg.NewProduceResponseTopic()
			t.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				p := kmsg.NewProduceResponseTopicPartition()
				p.Partition = rp.Partition
				p.ErrorCode = 19 // NOT_ENOUGH_REPLICAS: retriable
				t.Partitions = append(t.Partitions, p)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return resp, nil, true
	})
	return func() { failing.Store(false) }, refused
}

func waitRefused(t *testing.T, refused *atomic.Int32, n int32) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for refused.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the worker made %d write attempts, want %d", refused.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func assertNothingCommitted(t *testing.T, e *env) {
	t.Helper()
	for p, off := range e.kafka.Committed(t, e.group, tIn, 4) {
		if off > 0 {
			t.Fatalf("partition %d committed at %d while its outcomes were not acknowledged", p, off)
		}
	}
}

// TestKafkaWriteErrors: while the brokers refuse every write to the
// deliveries topic, nothing is committed; once they accept again the worker
// finishes, and every input has its outcome.
func TestKafkaWriteErrors(t *testing.T) {
	e := newEnv(t)
	in := intents(200, 50, "w")
	e.kafka.Produce(t, tIn, in)
	heal, refused := refuseWrites(e, tDel)
	r := e.start(nil)
	waitRefused(t, refused, 1)
	// kafka-go retries a refused produce itself (MaxAttempts); wait until
	// the worker's own retry loop has seen failed writes.
	deadline := time.Now().Add(30 * time.Second)
	for testutil.ToFloat64(r.w.m.writeErrors.WithLabelValues("deliveries")) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("capper_kafka_write_errors_total{topic=deliveries} stayed below 2 (%d refusals)", refused.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	assertNothingCommitted(t, e)
	if o := e.read(); len(o.del) != 0 {
		t.Fatalf("%d deliveries while the topic refused writes", len(o.del))
	}
	heal()
	o := e.waitOutcomes(len(in))
	e.auditOK(o)
	waitCommitted(t, e, len(in))
}

func waitCommitted(t *testing.T, e *env, total int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		sum := int64(0)
		for _, off := range e.kafka.Committed(t, e.group, tIn, 4) {
			sum += max(off, 0)
		}
		if sum == int64(total) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed %d of %d offsets", sum, total)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestFailOpen: with FailOpen and Redis down, intents are forwarded as
// allowed, marked capper-unchecked and counted; without it (the default),
// see internal/app's TestRedisRestart.
func TestFailOpen(t *testing.T) {
	e := newEnv(t)
	e.redis.Kill()
	in := intents(120, 10, "f")
	e.kafka.Produce(t, tIn, in)
	r := e.start(func(o *Options) { o.FailOpen = true })
	o := e.waitOutcomes(len(in))
	if len(o.sup) != 0 || len(o.del) != len(in) {
		t.Fatalf("deliveries %d, suppressed %d; want every intent delivered", len(o.del), len(o.sup))
	}
	for _, m := range o.del {
		if headerValue(m, HeaderUnchecked) != "true" || headerValue(m, HeaderDecision) != DecisionAllowed {
			t.Fatalf("fail-open delivery headers: %v", m.Headers)
		}
	}
	if got := testutil.ToFloat64(r.w.m.intents.WithLabelValues(capping.FailOpen.String(), "none")); got != float64(len(in)) {
		t.Fatalf("capper_intents_total{outcome=fail_open} = %v, want %d", got, len(in))
	}
	if err := r.w.Ready(); err != nil {
		t.Fatalf("fail-open worker not ready: %v", err)
	}
}

// TestShadowMode: everything is forwarded; would-be-capped intents are
// marked shadow-capped and are not recorded as sends.
func TestShadowMode(t *testing.T) {
	e := newEnv(t)
	in := intents(100, 10, "s") // 10 per user, max 2 a day
	e.kafka.Produce(t, tIn, in)
	r := e.start(func(o *Options) { o.Shadow = true })
	o := e.waitOutcomes(len(in))
	if len(o.sup) != 0 || len(o.del) != len(in) {
		t.Fatalf("deliveries %d, suppressed %d", len(o.del), len(o.sup))
	}
	shadow := 0
	for _, m := range o.del {
		if headerValue(m, HeaderDecision) == DecisionShadowCapped {
			shadow++
		}
	}
	if shadow != 80 {
		t.Fatalf("%d shadow-capped, want 80 (8 of 10 per user)", shadow)
	}
	if got := testutil.ToFloat64(r.w.m.intents.WithLabelValues(capping.ShadowCapped.String(), "none")); got != 80 {
		t.Fatalf("capper_intents_total{outcome=shadow_capped} = %v", got)
	}
	// Not recorded: user 3's record in Redis counts the 2 allowed only.
	st, err := e.engine.Inspect(context.Background(), 3, "none", capping.InspectOptions{At: time.Now()})
	if err != nil || len(st) != 1 || st[0].Count != 2 {
		t.Fatalf("user 3's limits: %+v (%v), want daily at 2", st, err)
	}
	e.auditOK(o)
}

// slowWriter holds the first write until released, so a test can stop the
// worker while a batch is in flight.
type slowWriter struct {
	Writer
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (s *slowWriter) WriteMessages(ctx context.Context, msgs ...kafka.Message) error {
	s.once.Do(func() {
		close(s.entered)
		<-s.release
	})
	return s.Writer.WriteMessages(ctx, msgs...)
}

// TestStopFinishesBatchInFlight: the context ends (SIGTERM) while a batch is
// being written; the worker stops fetching, finishes the batch, commits it
// and returns nil.
func TestStopFinishesBatchInFlight(t *testing.T) {
	e := newEnv(t)
	in := intents(40, 40, "t")
	e.kafka.Produce(t, tIn, in)
	sw := &slowWriter{entered: make(chan struct{}), release: make(chan struct{})}
	r := e.start(func(o *Options) {
		sw.Writer = o.Deliveries.Writer
		o.Deliveries.Writer = sw
		o.BatchSize = 40
		o.BatchWait = time.Second
	})
	select {
	case <-sw.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no batch reached the writer")
	}
	r.cancel()
	time.Sleep(100 * time.Millisecond)
	close(sw.release)
	if err := r.wait(t); err != nil {
		t.Fatalf("Run after stop: %v", err)
	}
	o := e.read()
	if got := len(o.sources()); got != len(in) {
		t.Fatalf("%d of %d intents have an outcome after the stop", got, len(in))
	}
	waitCommitted(t, e, len(in))
}

// TestShutdownDeadline: a batch that cannot be finished within
// ShutdownTimeout (Kafka refuses its outcomes) is abandoned uncommitted, and
// Run says so instead of hanging.
func TestShutdownDeadline(t *testing.T) {
	e := newEnv(t)
	in := intents(30, 30, "d")
	e.kafka.Produce(t, tIn, in)
	_, refused := refuseWrites(e, tDel)
	r := e.start(func(o *Options) { o.ShutdownTimeout = 300 * time.Millisecond })
	waitRefused(t, refused, 1)
	r.cancel()
	err := r.wait(t)
	if err == nil || !strings.Contains(err.Error(), "left uncommitted") {
		t.Fatalf("Run = %v, want a batch left uncommitted", err)
	}
	assertNothingCommitted(t, e)
}
