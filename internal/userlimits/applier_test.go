package userlimits

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/capping"
	capkafka "github.com/capper-dev/capper/internal/kafka"
	"github.com/capper-dev/capper/internal/policy"
	"github.com/capper-dev/capper/internal/problems"
	"github.com/capper-dev/capper/internal/testenv"
)

const (
	tUsers = "capper-user-limits"
	group  = "capper-user-limits"
)

// testPolicy lets users choose the tier fewer and turn sms and push down.
const testPolicy = `
default_policy:
  limits:
    - {name: daily, window: 24h, max: 5}
user_limits:
  tiers:
    - name: fewer
      limits:
        - {name: weekly, window: 7d, max: 2}
  channels: [sms, push]
`

// env is a broker with the user-limits topic (compacted, 4 partitions),
// a redis-server and an engine on it.
type env struct {
	t      *testing.T
	kafka  *testenv.Kafka
	redis  *testenv.Redis
	engine *capping.Engine
	rules  capping.Rules
	kopts  capkafka.Options
	log    *testenv.SyncBuffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, log: &testenv.SyncBuffer{}}
	e.kafka = testenv.StartKafka(t, 4, nil)
	if err := e.kafka.Cluster.CreateTopic(tUsers, 4, map[string]string{"cleanup.policy": "compact"}); err != nil {
		t.Fatal(err)
	}
	e.redis = testenv.StartRedis(t, testenv.RedisOptions{})
	d, err := policy.Parse([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	var ps problems.List
	if e.rules, ps = d.Rules(); len(ps) > 0 {
		t.Fatal(ps.Err())
	}
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr(), ReadTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	e.engine, err = capping.New(context.Background(), capping.Options{Client: rdb, Rules: e.rules, PolicyVersion: "test",
		KeyPrefix: "cap", IdempotencyWindow: time.Hour, SkewWarn: time.Second, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	e.kopts = capkafka.Options{Brokers: e.kafka.Addrs, ClientID: "test", FetchMaxWait: 100 * time.Millisecond,
		SessionTimeout: 6 * time.Second, RebalanceTimeout: 6 * time.Second, HeartbeatInterval: 200 * time.Millisecond,
		WriteTimeout: 5 * time.Second, BatchSize: 1, Compression: "none"}
	return e
}

// start runs an applier until the test ends.
func (e *env) start() *Metrics {
	e.t.Helper()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	a, err := NewApplier(ApplierOptions{Kafka: e.kopts, Topic: tUsers, Group: group, Store: e.engine,
		Rules: func() capping.Rules { return e.rules }, RetryInitial: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		Metrics: m, Logger: slog.New(slog.NewJSONHandler(e.log, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return m
}

func (e *env) write(r Record) Position {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pos, err := Write(ctx, e.kopts, tUsers, r, time.Now())
	if err != nil {
		e.t.Fatal(err)
	}
	return pos
}

func (e *env) limits(uid uint64) capping.UserLimits {
	e.t.Helper()
	u, err := e.engine.UserLimits(context.Background(), uid)
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestApplier: good records are applied (set, cleared, a user erased), a
// record of every refused kind is counted, logged without its user,
// applies nothing and is committed; the group commits every record.
func TestApplier(t *testing.T) {
	e := newEnv(t)
	fewer := capping.UserLimits{Tier: "fewer", Channels: map[string]int{"sms": 0}, Quiet: &capping.UserQuiet{From: 22 * 60, To: 7 * 60}}
	e.write(Record{UserID: 42, Limits: fewer})
	e.write(Record{UserID: 7, Limits: capping.UserLimits{Tier: "fewer"}})
	e.kafka.Produce(t, tUsers, []kafka.Message{
		{Key: []byte("user-900043"), Value: []byte(`{"user_id": 900043}`)},                       // key
		{Key: []byte("900044"), Value: []byte(`{"user_id": 900044,`)},                            // json
		{Key: []byte("900045"), Value: []byte(`{"user_id": 900046, "tier": "fewer"}`)},           // field
		{Key: []byte("900047"), Value: []byte(`{"user_id": 900047, "tier": "more"}`)},            // policy
		{Key: []byte("900048"), Value: []byte(`{"user_id": 900048, "channels": {"email": 0}}`)},  // policy
		{Key: []byte("900049"), Value: []byte(`{"user_id": 900049, "channels": {"sms": 1000}}`)}, // policy
	})
	e.write(Record{UserID: 7, Erase: true})
	e.write(Record{UserID: 8, Limits: capping.UserLimits{Channels: map[string]int{"push": 2}}})
	last := e.write(Record{UserID: 8})
	m := e.start()
	waitFor(t, 20*time.Second, "every record applied or refused", func() bool {
		return testutil.ToFloat64(m.applied)+testutil.ToFloat64(m.erased)+testutil.ToFloat64(m.refused.WithLabelValues("key"))+
			testutil.ToFloat64(m.refused.WithLabelValues("json"))+testutil.ToFloat64(m.refused.WithLabelValues("field"))+
			testutil.ToFloat64(m.refused.WithLabelValues("policy")) == 11
	})
	if got := e.limits(42); got.Encode() != fewer.Encode() {
		t.Errorf("user 42: %s in Redis, want %s", got.Encode(), fewer.Encode())
	}
	for _, uid := range []uint64{7, 8, 900043, 900044, 900045, 900046, 900047, 900048, 900049} {
		if got := e.limits(uid); !got.IsZero() {
			t.Errorf("user %d: %s in Redis, want none", uid, got.Encode())
		}
	}
	for reason, want := range map[string]float64{"key": 1, "json": 1, "field": 1, "policy": 3} {
		if got := testutil.ToFloat64(m.refused.WithLabelValues(reason)); got != want {
			t.Errorf("refused{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	if a, er := testutil.ToFloat64(m.applied), testutil.ToFloat64(m.erased); a != 4 || er != 1 {
		t.Errorf("applied %v, erased %v; want 4 and 1", a, er)
	}
	if n := testutil.CollectAndCount(m.lag); n != 1 {
		t.Errorf("lag histogram: %d series", n)
	}
	for _, who := range []string{"900043", "900044", "900045", "900046", "900047", "900048", "900049"} {
		if log := e.log.String(); strings.Contains(log, `"user":`) || strings.Contains(log, who) {
			t.Errorf("the warn log names a user (%s):\n%s", who, log)
		}
	}
	// Every record committed, the refused ones too.
	waitFor(t, 10*time.Second, "every record committed", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, _ := capkafka.NewAdmin(e.kopts)
		_, ends, err := c.LogOffsets(ctx, tUsers)
		if err != nil {
			t.Fatal(err)
		}
		got := e.kafka.Committed(t, group, tUsers, 4)
		for p, end := range ends {
			if end > 0 && got[p] != end {
				return false
			}
		}
		return got[last.Partition] == last.Offset+1
	})
}

// TestApplierWaitsForRedis: while Redis is stopped, a record is neither
// applied nor skipped nor committed; it is applied once Redis is back,
// and the record after it too, in order.
func TestApplierWaitsForRedis(t *testing.T) {
	e := newEnv(t)
	m := e.start()
	e.write(Record{UserID: 42, Limits: capping.UserLimits{Tier: "fewer"}})
	waitFor(t, 20*time.Second, "the first record applied", func() bool { return testutil.ToFloat64(m.applied) == 1 })
	e.redis.Pause()
	paused := true
	defer func() {
		if paused {
			e.redis.Resume()
		}
	}()
	pos := e.write(Record{UserID: 42, Limits: capping.UserLimits{Channels: map[string]int{"sms": 0}}})
	e.write(Record{UserID: 42, Limits: capping.UserLimits{Channels: map[string]int{"sms": 1}}})
	waitFor(t, 20*time.Second, "Redis errors counted", func() bool { return testutil.ToFloat64(m.errors.WithLabelValues(stageRedis)) >= 3 })
	if c := e.kafka.Committed(t, group, tUsers, 4)[pos.Partition]; c > pos.Offset {
		t.Fatalf("committed %d while the record at %d waits for Redis", c, pos.Offset)
	}
	e.redis.Resume()
	paused = false
	waitFor(t, 20*time.Second, "both records applied", func() bool { return testutil.ToFloat64(m.applied) == 3 })
	if got := e.limits(42); got.Encode() != "1;c=sms:1" {
		t.Errorf("user 42: %s, want the last record's", got.Encode())
	}
	if n := testutil.ToFloat64(m.refused.WithLabelValues("field")) + testutil.ToFloat64(m.refused.WithLabelValues("policy")); n != 0 {
		t.Errorf("%v records refused", n)
	}
}

// TestFollower: records written before the follower started are not
// seen; each one after is, once when read and once again Again later.
func TestFollower(t *testing.T) {
	e := newEnv(t)
	e.write(Record{UserID: 1, Limits: capping.UserLimits{Tier: "fewer"}})
	var mu sync.Mutex
	var seen []string
	m := NewMetrics(prometheus.NewRegistry())
	f, err := NewFollower(FollowerOptions{Kafka: e.kopts, Topic: tUsers, Metrics: m, Again: 500 * time.Millisecond,
		Forget: func(uid uint64) bool {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, fmt.Sprint(uid))
			return uid == 3
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = f.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	time.Sleep(time.Second) // the follower has read the ends
	e.write(Record{UserID: 2, Limits: capping.UserLimits{Tier: "fewer"}})
	e.write(Record{UserID: 3, Erase: true})
	e.kafka.Produce(t, tUsers, []kafka.Message{{Key: []byte("not-a-user"), Value: []byte("{}")}})
	got := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Sorted(slices.Values(seen))
	}
	waitFor(t, 10*time.Second, "two drops of users 2 and 3", func() bool { return len(got()) == 4 })
	time.Sleep(700 * time.Millisecond)
	if want := []string{"2", "2", "3", "3"}; !slices.Equal(got(), want) {
		t.Errorf("dropped %v, want %v", got(), want)
	}
	if n := testutil.ToFloat64(m.cacheDropped); n != 2 {
		t.Errorf("cache_dropped = %v, want 2 (user 3, twice)", n)
	}
}

// TestTombstoneIsNull: a tombstone written by Write reads back as a null
// value (Decode: erase); so does an empty value (kafka-go reads both as
// nil).
func TestTombstoneIsNull(t *testing.T) {
	e := newEnv(t)
	e.write(Record{UserID: 5, Erase: true})
	e.kafka.Produce(t, tUsers, []kafka.Message{{Key: []byte("6"), Value: []byte{}}})
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: e.kafka.Addrs, GroupID: "read-back", Topic: tUsers, StartOffset: kafka.FirstOffset,
		MaxWait: 100 * time.Millisecond})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 2 {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := Decode(m.Key, m.Value)
		switch string(m.Key) {
		case "5":
			if err != nil || !rec.Erase {
				t.Errorf("tombstone read back as %q: %+v, %v", m.Value, rec, err)
			}
		case "6":
			if err != nil || !rec.Erase {
				t.Errorf("an empty value read back as %q: %+v, %v", m.Value, rec, err)
			}
		}
	}
}

// TestLogsNameNoUser: no line the applier and the follower log above debug
// names a user id, whatever the record holds: a user_id that is no id (a
// string, a fraction, a negative or too large number, ...), a key that is
// none, a user_id that is not the key's, a value that is not JSON, limits
// the policy refuses, and a write retried while Redis is stopped. At debug,
// the refusals name them.
func TestLogsNameNoUser(t *testing.T) {
	e := newEnv(t)
	var debug testenv.SyncBuffer
	logger := slog.New(slog.NewJSONHandler(e.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	m := NewMetrics(prometheus.NewRegistry())
	a, err := NewApplier(ApplierOptions{Kafka: e.kopts, Topic: tUsers, Group: group, Store: e.engine,
		Rules: func() capping.Rules { return e.rules }, RetryInitial: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		Metrics: m, Logger: slog.New(teeHandler{slog.NewJSONHandler(&debug, &slog.HandlerOptions{Level: slog.LevelDebug}), logger.Handler()})})
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFollower(FollowerOptions{Kafka: e.kopts, Topic: tUsers, Metrics: m, Logger: logger, Forget: func(uint64) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = a.Run(ctx) })
	wg.Go(func() { _ = f.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	const id = "818181805"
	bad := []kafka.Message{
		{Key: []byte(id), Value: []byte(`{"user_id": "` + id + `"}`)},
		{Key: []byte(id), Value: []byte(`{"user_id": ` + id + `.5, "tier": "fewer"}`)},
		{Key: []byte(id), Value: []byte(`{"user_id": -` + id + `}`)},
		{Key: []byte(id), Value: []byte(`{"user_id": ` + id + `000000000000}`)},
		{Key: []byte(id), Value: []byte(`{"user_id": [` + id + `]}`)},
		{Key: []byte(id), Value: []byte(`{"user_id": {"id": ` + id + `}}`)},
		{Key: []byte(id), Value: []byte(`{"user_id": 818181806}`)},
		{Key: []byte("u" + id), Value: []byte(`{"user_id": ` + id + `}`)},
		{Key: []byte("0" + id), Value: nil},
		{Key: []byte(id), Value: []byte(`{"user_id": ` + id + `, "tier": `)},
		{Key: []byte(id), Value: []byte(id)},
		{Key: []byte(id), Value: []byte(`{"user_id": ` + id + `, "tier": "most"}`)},
	}
	e.kafka.Produce(t, tUsers, bad)
	waitFor(t, 20*time.Second, "every bad record refused", func() bool {
		n := 0.0
		for _, r := range Reasons {
			n += testutil.ToFloat64(m.refused.WithLabelValues(string(r)))
		}
		return n == float64(len(bad))
	})
	// A write that waits for Redis logs its retries, and its success.
	e.redis.Pause()
	e.write(Record{UserID: 818181807, Limits: capping.UserLimits{Tier: "fewer"}})
	waitFor(t, 20*time.Second, "a failed write", func() bool { return testutil.ToFloat64(m.errors.WithLabelValues(stageRedis)) >= 1 })
	e.redis.Resume()
	waitFor(t, 20*time.Second, "the write after Redis is back", func() bool { return testutil.ToFloat64(m.applied) == 1 })

	log := e.log.String()
	for _, what := range []string{"is not a user id", "does not match the key", "not a user id in decimal", "not a JSON object", "policy in force refuses", "retrying"} {
		if !strings.Contains(log, what) {
			t.Errorf("the log does not say %q: the test proves less than it says", what)
		}
	}
	for _, who := range []string{id, "818181806", "818181807", `"user":`} {
		if strings.Contains(log, who) {
			t.Errorf("a line above debug names a user (%s):\n%s", who, log)
		}
	}
	if !strings.Contains(debug.String(), `user_id: \"`+id+`\" is not a user id`) {
		t.Errorf("the debug log does not show the refused user_id:\n%s", debug.String())
	}
}

// teeHandler sends every record to both handlers.
type teeHandler struct{ a, b slog.Handler }

func (h teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.a.Enabled(ctx, l) || h.b.Enabled(ctx, l)
}

func (h teeHandler) Handle(ctx context.Context, r slog.Record) error {
	for _, x := range []slog.Handler{h.a, h.b} {
		if x.Enabled(ctx, r.Level) {
			if err := x.Handle(ctx, r.Clone()); err != nil {
				return err
			}
		}
	}
	return nil
}

func (h teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return teeHandler{h.a.WithAttrs(as), h.b.WithAttrs(as)}
}

func (h teeHandler) WithGroup(name string) slog.Handler {
	return teeHandler{h.a.WithGroup(name), h.b.WithGroup(name)}
}
