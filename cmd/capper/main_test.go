package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/audit"
	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/demo"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/plans"
	"github.com/capper-dev/capper/internal/testenv"
)

// These tests run the built binary as a user (or Kubernetes) would.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "capper-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "capper")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v0.0.0-test -X main.revision=0123abc", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build capper:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// capper runs the binary to its exit (a command that should exit but runs on
// is killed after a minute, failing the test).
func capper(t testing.TB, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("capper %v did not exit within a minute:\n%s", args, e.String())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return o.String(), e.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), 0
}

// TestVersion: `capper version` names the stamped version and revision, the
// Go version and platform.
func TestVersion(t *testing.T) {
	out := mustCapper(t, "version")
	m := regexp.MustCompile(`^capper v0\.0\.0-test \(go1\.[0-9.]+\S*, [a-z0-9]+/[a-z0-9]+, revision (\S+?)(, modified)?\)\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("version: %q", out)
	}
	// The revision stamped at build time (make build, the Dockerfile) wins
	// over the VCS stamp.
	if m[1] != "0123abc" {
		t.Fatalf("version says revision %q, want the stamped 0123abc", m[1])
	}
}

// TestProductionDeps: the worker binary does not link the demo's embedded
// broker and Redis, nor the snapshot builder.
func TestProductionDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, pkg := range []string{
		"github.com/twmb/franz-go/pkg/kfake", "github.com/alicebob/miniredis/v2", "github.com/yuin/gopher-lua",
		"github.com/capper-dev/capper/internal/demo", "github.com/capper-dev/capper/internal/segbuild",
	} {
		if slices.Contains(strings.Fields(string(out)), pkg) {
			t.Errorf("cmd/capper links %s", pkg)
		}
	}
	if !strings.Contains(string(out), "github.com/capper-dev/capper/internal/dispatch") {
		t.Fatalf("go list -deps printed no capper package:\n%s", out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args  []string
		usage string
	}{
		{[]string{"frobnicate"}, "Usage: capper <command>"},
		{[]string{"run"}, "Usage: capper run --config=STRING"},
		{[]string{"inspect", "--config", "../../configs/capper.yaml", "--user", "x"}, "Usage: capper inspect"},
	} {
		_, errOut, code := capper(t, nil, c.args...)
		if code != 2 || !strings.HasPrefix(errOut, "capper: ") || !strings.Contains(errOut, c.usage) {
			t.Errorf("capper %v: exit %d, stderr %q; want 2, a message and %q", c.args, code, errOut, c.usage)
		}
	}
	out, _, code := capper(t, nil, "--help")
	if code != 0 || !strings.Contains(out, "check-config") {
		t.Errorf("--help: exit %d, %q", code, out)
	}
}

func TestCheckConfig(t *testing.T) {
	out, errOut, code := capper(t, []string{"CAPPER_REDIS_PASSWORD=hunter2", "CAPPER_WORKER_BATCH_SIZE=250"},
		"check-config", "--config", "../../configs/capper.yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "hunter2") || !strings.Contains(out, "password: <masked>") {
		t.Fatalf("secret not masked:\n%s", out)
	}
	if !strings.Contains(out, "batch_size: 250") {
		t.Fatalf("environment override not in the effective config:\n%s", out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("worker:\n  batch_sise: 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A wrong config exits 2, as the CLI reference says, with the usage.
	_, errOut, code = capper(t, nil, "check-config", "--config", bad)
	if code != 2 || !strings.Contains(errOut, `line 2: worker.batch_sise: unknown key; did you mean batch_size?`) || !strings.Contains(errOut, "Usage: capper check-config") {
		t.Fatalf("bad config: exit %d, %q", code, errOut)
	}
	for _, args := range [][]string{{"inspect", "--user", "1"}, {"campaign", "list"}, {"migrate", "--dry-run"}} {
		_, errOut, code = capper(t, nil, append(args, "--config", bad)...)
		if code != 2 || !strings.Contains(errOut, `line 2: worker.batch_sise: unknown key; did you mean batch_size?`) {
			t.Errorf("capper %v with a bad config: exit %d, %q; want 2", args, code, errOut)
		}
	}
}

// stack is a Kafka broker, a Redis and a snapshot directory, with a config
// file for the binary.
type stack struct {
	kafka *testenv.Kafka
	redis *testenv.Redis
	cfg   *config.Config
	path  string
}

func newStack(t testing.TB) *stack {
	t.Helper()
	s := &stack{
		kafka: testenv.StartKafka(t, 4, []string{"send-intents", "deliveries", "suppressed", "send-intents-dlq"}),
		redis: testenv.StartRedis(t, testenv.RedisOptions{}),
	}
	dir := t.TempDir()
	st, err := objstore.Open(context.Background(), dir, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := demo.BuildSnapshot(context.Background(), st, 500, 1, time.Now); err != nil {
		t.Fatal(err)
	}
	cfg := exampleConfig(t)
	cfg.Kafka.Brokers = s.kafka.Addrs
	cfg.Kafka.SessionTimeout = config.Duration(6 * time.Second)
	cfg.Kafka.HeartbeatInterval = config.Duration(200 * time.Millisecond)
	cfg.Kafka.FetchMaxWait = config.Duration(100 * time.Millisecond)
	cfg.Redis.Addrs = []string{s.redis.Addr()}
	cfg.Segments.Source = "file://" + dir
	cfg.HTTP.Address = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg.Worker.BatchSize = 100
	cfg.Worker.ShutdownTimeout = config.Duration(10 * time.Second)
	s.cfg, s.path = cfg, filepath.Join(t.TempDir(), "capper.yaml")
	s.writeConfig(t)
	return s
}

// writeConfig writes s.cfg to the file the binary reads.
func (s *stack) writeConfig(t testing.TB) {
	t.Helper()
	y, err := s.cfg.Effective()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.path, y, 0o644); err != nil {
		t.Fatal(err)
	}
}

// createTopic adds a topic with 4 partitions (and testenv.TopicConfigs).
func (s *stack) createTopic(t testing.TB, topic string) {
	t.Helper()
	c := &kafka.Client{Addr: kafka.TCP(s.kafka.Addrs...), Timeout: 10 * time.Second}
	tc := kafka.TopicConfig{Topic: topic, NumPartitions: 4, ReplicationFactor: 1}
	for k, v := range testenv.TopicConfigs(topic) {
		tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: v})
	}
	resp, err := c.CreateTopics(context.Background(), &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{tc}})
	if err == nil {
		err = resp.Errors[topic]
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// waitCommitted waits until the group has committed n offsets of topic.
func (s *stack) waitCommitted(t testing.TB, topic string, n int, p *proc) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		sum := int64(0)
		for _, off := range s.kafka.Committed(t, s.cfg.Kafka.GroupID, topic, 4) {
			sum += max(off, 0)
		}
		if sum >= int64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed %d of %d\n%s", sum, n, p.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// proc is a running `capper run`.
type proc struct {
	cmd  *exec.Cmd
	logs *testenv.SyncBuffer
	done chan error // Wait's result
}

// start runs `capper run` and waits until /readyz answers 200.
func (s *stack) start(t testing.TB) *proc {
	t.Helper()
	return startAt(t, binary, s.path, s.cfg.HTTP.Address)
}

// startAt runs `bin run --config path` and waits until /readyz on addr
// answers 200.
func startAt(t testing.TB, bin, path, addr string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, "run", "--config", path), logs: &testenv.SyncBuffer{}, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); <-p.done })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if code, _ := httpGet("http://" + addr + "/readyz"); code == 200 {
			return p
		}
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("capper run exited (%v) before becoming ready:\n%s", err, p.logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("capper run did not become ready:\n%s", p.logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wait returns the process's exit, failing the test after timeout.
func (p *proc) wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(timeout):
		t.Fatalf("capper run did not exit in %s:\n%s", timeout, p.logs)
		return nil
	}
}

func (s *stack) outcomes(t *testing.T) map[string]int {
	t.Helper()
	m := map[string]int{}
	for _, topic := range []string{"deliveries", "suppressed", "send-intents-dlq"} {
		msgs, err := audit.ReadTopic(context.Background(), s.kafka.Addrs, topic)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range msgs {
			for _, h := range r.Headers {
				if h.Key == "capper-source" {
					m[string(h.Value)]++
				}
			}
		}
	}
	return m
}

func (s *stack) waitOutcomes(t *testing.T, n int, logs *testenv.SyncBuffer) map[string]int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		m := s.outcomes(t)
		if len(m) >= n {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d inputs have an outcome\n%s", len(m), n, logs)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *stack) audit(t *testing.T) {
	t.Helper()
	del, err := audit.ReadTopic(context.Background(), s.kafka.Addrs, "deliveries")
	if err != nil {
		t.Fatal(err)
	}
	sends, err := audit.Sends(del)
	if err != nil {
		t.Fatal(err)
	}
	if v := audit.Check(exampleRules(t), sends); len(v) > 0 {
		// What the first violator received, to read the failure.
		for _, r := range del {
			if regexp.MustCompile(fmt.Sprintf(`"user_id":\s*"?%d\b`, v[0].User)).Match(r.Value) {
				t.Logf("delivery %d/%d: %s %s", r.Partition, r.Offset, r.Value, r.Headers)
			}
		}
		t.Fatalf("audit: %d violations, first %s", len(v), v[0])
	}
}

// TestMissingTopic: a configured topic the brokers lack stops the start with
// exit status 2 and names the key (before, the worker started, stayed ready
// and stalled on its first write).
func TestMissingTopic(t *testing.T) {
	s := newStack(t)
	s.cfg.Kafka.Topics.Deliveries = "no-such-topic"
	s.writeConfig(t)
	_, errOut, code := capper(t, nil, "run", "--config", s.path)
	if code != 2 {
		t.Fatalf("exit %d, want 2:\n%s", code, errOut)
	}
	for _, want := range []string{"kafka.topics.deliveries", "no-such-topic", "topic does not exist"} {
		if !strings.Contains(errOut, want) {
			t.Fatalf("output lacks %q:\n%s", want, errOut)
		}
	}
}

// TestRunSIGTERM: `capper run` against real servers, then SIGTERM: it exits
// 0, having committed everything it processed.
func TestRunSIGTERM(t *testing.T) {
	s := newStack(t)
	p := s.start(t)
	msgs := demo.Blast(demo.BlastOptions{Users: 500, Intents: 1000, Seed: 3})
	s.kafka.Produce(t, "send-intents", msgs)
	s.waitOutcomes(t, len(msgs), p.logs)
	if code, body := httpBody(t, "http://"+s.cfg.HTTP.Address+"/metrics"); code != 200 ||
		!regexp.MustCompile(`(?m)^capper_build_info\{go_version="go[^"]+",revision="0123abc",version="v0.0.0-test"\} 1$`).MatchString(body) {
		t.Fatalf("/metrics (%d) has no capper_build_info of this build", code)
	}
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 30*time.Second); err != nil {
		t.Fatalf("capper run after SIGTERM: %v\n%s", err, p.logs)
	}
	if d := time.Since(start); d > s.cfg.Worker.ShutdownTimeout.D()+5*time.Second {
		t.Fatalf("shutdown took %s", d)
	}
	total := int64(0)
	for _, off := range s.kafka.Committed(t, s.cfg.Kafka.GroupID, "send-intents", 4) {
		total += max(off, 0)
	}
	if total != int64(len(msgs)) {
		t.Fatalf("committed %d of %d offsets at exit", total, len(msgs))
	}
	if !strings.Contains(p.logs.String(), `"msg":"capper stopped"`) {
		t.Fatalf("no orderly stop in the log:\n%s", p.logs)
	}
	s.audit(t)
}

// TestKill9: the worker process is killed (SIGKILL) in the middle of a
// stream; a new one takes over. Nothing is lost, no cap is exceeded, and an
// input delivered twice is the same record (same id).
func TestKill9(t *testing.T) {
	s := newStack(t)
	first := s.start(t)
	msgs := demo.Blast(demo.BlastOptions{Users: 500, Intents: 6000, Seed: 4})
	go func() {
		for i := 0; i < len(msgs); i += 200 {
			w := &kafka.Writer{Addr: kafka.TCP(s.kafka.Addrs...), Topic: "send-intents", RequiredAcks: kafka.RequireAll,
				BatchTimeout: time.Millisecond, Balancer: &kafka.Murmur2Balancer{}}
			_ = w.WriteMessages(context.Background(), msgs[i:min(i+200, len(msgs))]...)
			w.Close()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for len(s.outcomes(t)) < 1500 {
		time.Sleep(20 * time.Millisecond)
	}
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.wait(t, 10*time.Second)
	second := s.start(t)
	got := s.waitOutcomes(t, len(msgs), second.logs)
	s.audit(t)
	for src, n := range got {
		if n > 2 {
			t.Errorf("input %s has %d outcomes", src, n)
		}
	}
}

func httpGet(url string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func httpBody(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestInspect: after a user got intents through the worker, `capper inspect`
// shows the user's segment and each limit's count and next free slot, and
// writes nothing to Redis.
func TestInspect(t *testing.T) {
	s := newStack(t)
	p := s.start(t)
	const user = 42
	var msgs []kafka.Message
	for i := 0; i < 5; i++ {
		msgs = append(msgs, kafka.Message{Key: []byte("42"), Value: fmt.Appendf(nil,
			`{"id":"inspect-%d","user_id":%d,"campaign_id":"c","channel":"push"}`, i, user)})
	}
	s.kafka.Produce(t, "send-intents", msgs)
	s.waitOutcomes(t, len(msgs), p.logs)
	del, err := audit.ReadTopic(context.Background(), s.kafka.Addrs, "deliveries")
	if err != nil {
		t.Fatal(err)
	}
	allowed, segment := 0, ""
	for _, m := range del {
		for _, h := range m.Headers {
			if h.Key == "capper-segment" {
				segment = string(h.Value)
			}
		}
		allowed++
	}
	rdb := s.redis.Client()
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := capper(t, nil, "inspect", "--config", s.path, "--user", "42")
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "segment   "+segment+" (snapshot ") {
		t.Fatalf("inspect does not show segment %q:\n%s", segment, out)
	}
	// The daily limit of every segment in configs/capper.yaml counts every
	// intent: its count is what was delivered.
	if !regexp.MustCompile(`(?m)^daily\s+every intent\s+(1d rolling|calendar day)\s+.*\s` + strconv.Itoa(allowed) + `\s+\d+\s`).MatchString(out) {
		t.Fatalf("inspect does not count %d delivered intents on the daily limit:\n%s", allowed, out)
	}
	if !strings.Contains(out, "(in ") {
		t.Fatalf("a capped user's next free slot is not shown:\n%s", out)
	}
	checkInspectJSON(t, s, segment, allowed)

	// With a plan for the user, each limit that would count its message
	// shows its booking.
	plansDir := t.TempDir()
	st, err := objstore.Open(context.Background(), plansDir, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	spec := &plans.Spec{Campaign: "cart-rescue", Priority: "high", Starts: now.Add(-time.Minute), Ends: now.Add(time.Hour),
		Message: plans.Message{Channel: "push"}, Audience: []string{"test"}}
	prio, ps := spec.Check(exampleRules(t))
	if err := ps.Err(); err != nil {
		t.Fatal(err)
	}
	aud, _ := roaring.BitmapOf(user, 7).ToBytes()
	if _, err := plans.Publish(context.Background(), st, spec, prio, aud, 2, now); err != nil {
		t.Fatal(err)
	}
	s.cfg.Plans.Source = plansDir
	s.writeConfig(t)
	out, errOut, code = capper(t, nil, "inspect", "--config", s.path, "--user", "42")
	if code != 0 {
		t.Fatalf("inspect with plans: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "plans     set ") || !regexp.MustCompile(`(?m)^daily\s+every intent\s.*\s1: cart-rescue \(high, `).MatchString(out) {
		t.Fatalf("inspect does not show cart-rescue's booking on daily:\n%s", out)
	}
	out, _, _ = capper(t, nil, "inspect", "--config", s.path, "--user", "43")
	if strings.Contains(out, "cart-rescue") {
		t.Fatalf("a user outside the plan's audience shows its booking:\n%s", out)
	}
	stats, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"zadd", "zrem", "zremrangebyscore", "pexpire", "expire", "set", "hset", "hincrby", "hdel", "del", "eval", "evalsha", "unlink"} {
		if strings.Contains(stats, "cmdstat_"+w+":") {
			t.Errorf("inspect ran %s:\n%s", w, stats)
		}
	}
}

// checkInspectJSON: `capper inspect -o json` says what the table says, as
// one JSON document.
func checkInspectJSON(t *testing.T, s *stack, segment string, allowed int) {
	t.Helper()
	out, errOut, code := capper(t, nil, "inspect", "--config", s.path, "--user", "42", "-o", "json")
	if code != 0 {
		t.Fatalf("inspect -o json: exit %d: %s", code, errOut)
	}
	t.Logf("inspect -o json:\n%s", out)
	var got struct {
		User     *uint64 `json:"user"`
		Segment  string  `json:"segment"`
		Snapshot *string `json:"snapshot"`
		Plans    *string `json:"plans"`
		Campaign *struct {
			State string `json:"state"`
		} `json:"campaign"` // null: no --campaign (or no kafka.topics.control)
		At       string `json:"at"`
		TimeZone string `json:"time_zone"`
		Limits   []struct {
			Name     string  `json:"name"`
			Scope    string  `json:"scope"`
			Campaign *string `json:"campaign"`
			Window   *string `json:"window"`
			Calendar *string `json:"calendar"`
			From     string  `json:"from"`
			To       string  `json:"to"`
			Count    *int64  `json:"count"`
			Max      *int    `json:"max"`
			Reserved int     `json:"reserved"`
			For      *string `json:"reserved_for"`
			NextFree *string `json:"next_free"`
			Trimmed  *bool   `json:"trimmed"`
			Booked   []any   `json:"booked"`
		} `json:"limits"`
		// UserLimits: null, the example policy reads no users' limits
		// (TestUserCLI shows them).
		UserLimits json.RawMessage `json:"user_limits"`
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("inspect -o json: %v\n%s", err, out)
	}
	if got.User == nil || *got.User != 42 || got.Segment != segment || got.Snapshot == nil || *got.Snapshot == "" ||
		got.TimeZone != s.cfg.Capping.TimeZone || got.Campaign != nil || string(got.UserLimits) != "null" {
		t.Fatalf("inspect -o json: wrong header:\n%s", out)
	}
	at, err := time.Parse(time.RFC3339, got.At)
	if err != nil {
		t.Fatalf("at: %v", err)
	}
	policy := exampleRules(t).PolicyOf(segment)
	if len(got.Limits) < len(policy.Limits) {
		t.Fatalf("%d limits, want (at least) the %d of segment %q:\n%s", len(got.Limits), len(policy.Limits), segment, out)
	}
	for _, l := range got.Limits {
		i := slices.IndexFunc(policy.Limits, func(p capping.Limit) bool { return p.Name == l.Name })
		if i < 0 {
			t.Fatalf("limit %q is not in the policy of %q", l.Name, segment)
		}
		want := policy.Limits[i]
		rolling := want.Calendar == capping.None
		// (Sends under the caps trim no log.)
		if l.Count == nil || l.Max == nil || *l.Max != want.Max || l.Scope == "" || l.Trimmed == nil || *l.Trimmed ||
			rolling != (l.Window != nil && *l.Window == config.Duration(want.Window).String()) ||
			!rolling != (l.Calendar != nil && *l.Calendar == want.Calendar.String()) || l.Reserved != want.Reserve.Slots {
			t.Errorf("limit %d: %+v, want %+v", i, l, want)
		}
		from, err1 := time.Parse(time.RFC3339, l.From)
		to, err2 := time.Parse(time.RFC3339, l.To)
		if err1 != nil || err2 != nil || !from.Before(to) {
			t.Errorf("limit %s: window [%s, %s)", l.Name, l.From, l.To)
		}
		if want.Max == 0 {
			if l.NextFree != nil {
				t.Errorf("limit %s: max 0 frees at %s, want null (never)", l.Name, *l.NextFree)
			}
			continue
		}
		if l.NextFree == nil {
			t.Fatalf("limit %s: next_free null", l.Name)
		}
		next, err := time.Parse(time.RFC3339, *l.NextFree)
		if err != nil {
			t.Fatalf("limit %s: next_free: %v", l.Name, err)
		}
		full := *l.Count >= int64(*l.Max)
		if full != next.After(at) {
			t.Errorf("limit %s: count %d of %d, next_free %s at %s", l.Name, *l.Count, *l.Max, *l.NextFree, got.At)
		}
		if l.Name == "daily" && *l.Count != int64(allowed) {
			t.Errorf("daily count %d, want the %d delivered", *l.Count, allowed)
		}
	}
	if _, errOut, code := capper(t, nil, "inspect", "--config", s.path, "--user", "42", "-o", "yaml"); code != 2 {
		t.Errorf("inspect -o yaml: exit %d, want 2: %s", code, errOut)
	}
}

// TestMigrate: `capper migrate` turns the first version's sorted sets into
// records (the engine's tests check every decision afterwards): a dry run
// reports and writes nothing, the run writes what it reported, and `capper
// inspect` then counts the old sends.
func TestMigrate(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	rdb := s.redis.Client()
	now := time.Now()
	// User 42's first-version log: two sends this morning (8-byte member,
	// score in ms), one of them an sms, also in the sms log.
	for i, ago := range []time.Duration{3 * time.Hour, time.Hour} {
		z := redis.Z{Score: float64(now.Add(-ago).UnixMilli()), Member: fmt.Sprintf("digest-%d", i)}
		if err := rdb.ZAdd(ctx, "old:{42}", z).Err(); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if err := rdb.ZAdd(ctx, "old:{42}:sms", z).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, errOut, code := capper(t, nil, "migrate", "--config", s.path, "--from-prefix", "old", "--dry-run")
	if code != 0 || !strings.Contains(out, "users of the first version found: 1") || !strings.Contains(out, "records that would be written (dry run): 1") {
		t.Fatalf("migrate --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	if n, _ := rdb.Keys(ctx, s.cfg.Capping.KeyPrefix+":*").Result(); len(n) != 0 {
		t.Fatalf("a dry run wrote %v", n)
	}
	out, errOut, code = capper(t, nil, "migrate", "--config", s.path, "--from-prefix", "old")
	if code != 0 || !strings.Contains(out, "records written: 1") || !strings.Contains(out, "scopes filled from channel logs: channels sms") {
		t.Fatalf("migrate: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("migrate:\n%s", out)
	out, errOut, code = capper(t, nil, "inspect", "--config", s.path, "--user", "42")
	if code != 0 || !regexp.MustCompile(`(?m)^weekly\s+every intent\s+.*\s2\s+\d+\s`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^sms-weekly\s+channels sms\s+.*\s1\s+1\s`).MatchString(out) {
		t.Fatalf("inspect after the migration: exit %d\n%s%s", code, out, errOut)
	}
}

// exampleConfig is configs/capper.yaml with its policy, configs/policy.yaml,
// where policy.source names it.
func exampleConfig(t testing.TB) *config.Config {
	t.Helper()
	cfg, err := config.LoadWithEnv("../../configs/capper.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs("../../configs/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Policy.Source = "file://" + abs
	return cfg
}

// exampleRules are configs/policy.yaml's.
func exampleRules(t testing.TB) capping.Rules {
	t.Helper()
	d, problems, err := config.ReadPolicy("../../configs/policy.yaml")
	if err != nil || problems != nil {
		t.Fatal(err, problems)
	}
	r, _ := d.Rules()
	return r
}
