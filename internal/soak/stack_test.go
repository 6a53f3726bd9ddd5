package soak

// The servers and processes of a soak: the kfake broker (restartable on its
// port, from its data directory), Redis (one node, or a cluster with a
// replica per master), the stores the workers read, and the `capper run`
// processes.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.yaml.in/yaml/v3"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/config"
	"github.com/capper-dev/capper/internal/demo"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/plans"
	"github.com/capper-dev/capper/internal/testenv"
)

// Topics of a soak; every one has partitions partitions.
const (
	tIn         = "send-intents"
	tDeliveries = "deliveries"
	tSuppressed = "suppressed"
	tDLQ        = "send-intents-dlq"
	tStatus     = "delivery-status"
	tTier1      = "send-intents-delay-2s"
	tTier2      = "send-intents-delay-10s"
	tControl    = "capper-control"
	// tLanes is kafka.topics.lanes: the soak's budget's lanes wait in
	// <tLanes>.<budget>.<lane> (laneTopics).
	tLanes     = "send-intents-lanes"
	partitions = 4
	group      = "capper-soak"
)

// topics: the lanes' topics (as many partitions as the input, like every
// topic of the soak), and the compacted ones last.
var topics = append(append([]string{tIn, tDeliveries, tSuppressed, tDLQ, tStatus, tTier1, tTier2}, laneTopics()...), compacted...)

// compacted are the topics created compacted, with their configs: the
// control topic and the user-limits topic (whose tombstones are kept 7
// days, as capper topics create sets it).
var compacted = []string{tControl, tUserLimits}

var compactedConfigs = map[string]map[string]string{
	tControl:    {"cleanup.policy": "compact"},
	tUserLimits: {"cleanup.policy": "compact", "delete.retention.ms": "604800000"},
}

// broker is the kfake broker, which a fault may restart: the same port,
// the same data directory (written synchronously), so nothing it
// acknowledged is lost.
type broker struct {
	mu   sync.Mutex
	c    *kfake.Cluster
	port int
	dir  string
	addr string
}

func startBroker(t *testing.T) *broker {
	t.Helper()
	b := &broker{port: testenv.FreePort(t), dir: t.TempDir()}
	b.addr = fmt.Sprintf("127.0.0.1:%d", b.port)
	if err := b.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.stop)
	return b
}

func (b *broker) start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var err error
	for range 50 { // the old listener's port may linger a moment
		b.c, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(b.port), kfake.DataDir(b.dir), kfake.SyncWrites(),
			kfake.SeedTopics(partitions, topics[:len(topics)-len(compacted)]...))
		if err == nil {
			// The control and user-limits topics are compacted, as the
			// docs ask (a restart finds them in the data directory).
			for _, topic := range compacted {
				if err := b.c.CreateTopic(topic, partitions, compactedConfigs[topic]); err != nil &&
					!errors.Is(err, kerr.TopicAlreadyExists) {
					b.c.Close()
					return fmt.Errorf("create the compacted topic %s: %w", topic, err)
				}
			}
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("start kfake on port %d: %w", b.port, err)
}

// compact compacts every compacted topic now (the control and user-limits
// topics): only the latest record of each key is left (a partition's last
// batch whole).
func (b *broker) compact() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c != nil {
		b.c.Compact()
	}
}

// writeTo writes msgs to one partition of topic as a raw producer would
// (acks=all, one batch), retrying while the broker restarts.
func (b *broker) writeTo(ctx context.Context, topic string, partition int, msgs ...kafka.Message) error {
	w := &kafka.Writer{Addr: kafka.TCP(b.addr), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond,
		Balancer: kafka.BalancerFunc(func(kafka.Message, ...int) int { return partition }), WriteTimeout: 3 * time.Second}
	defer w.Close()
	var err error
	for range 20 {
		if err = w.WriteMessages(ctx, msgs...); err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

func (b *broker) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.c != nil {
		b.c.Close()
		b.c = nil
	}
}

// topology is the Redis a soak runs against: always a deployment that
// keeps what it acknowledged (a master that restarts empty, before its
// replica took over, would make its replica resync from it and lose every
// record of its slots: Redis's documented hazard, not capper's; see
// docs/operations/failure-semantics.md).
type topology struct {
	single *testenv.Redis   // single mode (with an append-only file)
	clus   *testenv.Cluster // cluster mode: 3 masters, a replica each
	// persist: cluster nodes keep an append-only file (fsync always); else
	// none, and a killed master is restarted only once its replica has
	// taken over.
	persist bool
}

// aof are the redis-server arguments of a node that persists every write.
var aof = []string{"--appendonly", "yes", "--appendfsync", "always"}

func startRedis(t *testing.T, cluster, persist bool) *topology {
	t.Helper()
	if !cluster {
		return &topology{single: testenv.StartRedis(t, testenv.RedisOptions{Args: aof}), persist: true}
	}
	var args []string
	if persist {
		args = aof
	}
	c := testenv.StartClusterWith(t, 3, args...)
	c.AddReplicas()
	return &topology{clus: c, persist: persist}
}

func (tp *topology) name() string {
	switch {
	case tp.single != nil:
		return "single redis-server (append-only file)"
	case tp.persist:
		return "3-master Redis Cluster, a replica each, wait_replicas 1; every node with an append-only file (fsync always)"
	}
	return "3-master Redis Cluster, a replica each, wait_replicas 1; no persistence: a killed master is restarted only after its replica took over"
}

// nodes are every node, masters and replicas.
func (tp *topology) nodes() []*testenv.Redis {
	if tp.single != nil {
		return []*testenv.Redis{tp.single}
	}
	return append(append([]*testenv.Redis(nil), tp.clus.Nodes...), tp.clus.Replicas...)
}

// replication is a node's INFO replication as fields (none when it does
// not answer).
func replication(ctx context.Context, n *testenv.Redis) map[string]string {
	c := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1, DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return nil
	}
	f := map[string]string{}
	for l := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
			f[k] = v
		}
	}
	return f
}

// role is a cluster node's role now ("master", "slave"), from INFO.
func role(ctx context.Context, n *testenv.Redis) string { return replication(ctx, n)["role"] }

// replicaOf is the node that replicates master m and is in sync with it
// now, or nil.
func (tp *topology) replicaOf(ctx context.Context, m *testenv.Redis) *testenv.Redis {
	for _, n := range tp.nodes() {
		f := replication(ctx, n)
		if f["role"] == "slave" && f["master_link_status"] == "up" && f["master_port"] == strconv.Itoa(m.Port) {
			return n
		}
	}
	return nil
}

// masterOf is the address of replica r's master ("" when r says none).
func masterOf(ctx context.Context, r *testenv.Redis) string {
	f := replication(ctx, r)
	if f["master_host"] == "" || f["master_port"] == "" {
		return ""
	}
	return f["master_host"] + ":" + f["master_port"]
}

// byRole lists the cluster's nodes that have role now.
func (tp *topology) byRole(ctx context.Context, want string) []*testenv.Redis {
	var out []*testenv.Redis
	for _, n := range tp.nodes() {
		if role(ctx, n) == want {
			out = append(out, n)
		}
	}
	return out
}

// healthy reports whether Redis serves every slot, every master has a
// replica in sync (what wait_replicas needs), and every node answers.
func (tp *topology) healthy(ctx context.Context) bool {
	if tp.single != nil {
		c := redis.NewClient(&redis.Options{Addr: tp.single.Addr(), MaxRetries: -1, DialTimeout: 300 * time.Millisecond})
		defer c.Close()
		return c.Ping(ctx).Err() == nil
	}
	for _, n := range tp.nodes() {
		c := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1, DialTimeout: 300 * time.Millisecond, ReadTimeout: time.Second})
		info, err := c.ClusterInfo(ctx).Result()
		repl, err2 := c.Info(ctx, "replication").Result()
		c.Close()
		if err != nil || err2 != nil || !strings.Contains(info, "cluster_state:ok") {
			return false
		}
		if strings.Contains(repl, "role:master") && !strings.Contains(repl, "connected_slaves:1") {
			return false
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return false
		}
	}
	return true
}

// worker is one `capper run` process slot: the process now (nil while it
// is down) and its config.
type worker struct {
	name   string
	config string // path
	http   string // host:port
	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	log    *os.File
	starts int // incarnations so far
}

// running is the process now, or nil.
func (w *worker) running() *exec.Cmd {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cmd
}

// start runs the binary; it does not wait for readiness (a worker may
// start while Redis or the broker is down).
func (w *worker) start(t *testing.T, bin, dir string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd != nil {
		return
	}
	w.starts++
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.log", w.name, w.starts)))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", w.config)
	cmd.Stdout, cmd.Stderr = f, f
	testenv.Own(cmd) // it dies with the soak, however that ends
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", w.name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = f.Close(); close(done) }()
	w.cmd, w.done, w.log = cmd, done, f
}

// signal sends sig and, for a stop, waits for the process to end (a
// SIGTERM'd worker finishes its batch first).
func (w *worker) signal(sig syscall.Signal, wait time.Duration) {
	w.mu.Lock()
	cmd, done := w.cmd, w.done
	w.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(wait):
		_ = cmd.Process.Kill()
		<-done
	}
	w.mu.Lock()
	w.cmd = nil
	w.mu.Unlock()
}

// get fetches a path of the worker's HTTP endpoint.
func (w *worker) get(path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.http+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// workerConfig is the config every worker runs with (its HTTP address
// aside): short windows, two delay tiers, refunds, plans and a policy file
// polled every second.
func workerConfig(t *testing.T, b *broker, tp *topology, dir string) *config.Config {
	t.Helper()
	cfg := config.Default()
	k := &cfg.Kafka
	k.Brokers = []string{b.addr}
	k.GroupID = group
	k.Topics = config.Topics{Input: tIn, Deliveries: tDeliveries, Suppressed: tSuppressed, DeadLetter: tDLQ, DeliveryStatus: tStatus, Control: tControl,
		Lanes: tLanes, UserLimits: tUserLimits}
	k.DelayTiers = []config.DelayTier{{Delay: config.Duration(2 * time.Second), Topic: tTier1}, {Delay: config.Duration(10 * time.Second), Topic: tTier2}}
	k.FetchMaxWait = config.Duration(100 * time.Millisecond)
	k.SessionTimeout = config.Duration(6 * time.Second) // kfake's minimum
	k.RebalanceTimeout = config.Duration(6 * time.Second)
	k.HeartbeatInterval = config.Duration(500 * time.Millisecond)
	k.WriteTimeout = config.Duration(3 * time.Second)
	k.LagInterval = config.Duration(2 * time.Second)
	r := &cfg.Redis
	if tp.single != nil {
		r.Mode, r.Addrs = "single", []string{tp.single.Addr()}
	} else {
		r.Mode, r.Addrs = "cluster", tp.clus.Addrs()
		r.WaitReplicas, r.WaitTimeout = 1, config.Duration(300*time.Millisecond)
	}
	r.DialTimeout, r.ReadTimeout, r.WriteTimeout = config.Duration(300*time.Millisecond), config.Duration(time.Second), config.Duration(time.Second)
	cfg.Segments.Source = "file://" + filepath.Join(dir, "segments")
	cfg.Segments.PollInterval = config.Duration(2 * time.Second)
	cfg.Policy.Source = "file://" + filepath.Join(dir, "policy.yaml")
	cfg.Policy.PollInterval = config.Duration(time.Second)
	cfg.Plans.Source = filepath.Join(dir, "plans")
	cfg.Plans.PollInterval = config.Duration(time.Second)
	w := &cfg.Worker
	w.BatchSize, w.BatchWait = 100, config.Duration(20*time.Millisecond)
	w.RetryInitial, w.RetryMax = config.Duration(50*time.Millisecond), config.Duration(500*time.Millisecond)
	w.ShutdownTimeout = config.Duration(8 * time.Second)
	cfg.HTTP.Pprof = true // stuck() keeps every worker's goroutines
	cfg.Log.Level = "info"
	if l := os.Getenv("CAPPER_SOAK_LOG_LEVEL"); l != "" {
		cfg.Log.Level = l // debug names the intents a batch could not decide
	}
	return &cfg
}

// writeConfig writes cfg with addr as its HTTP address (kafka.lane_records
// only when it is not the default). Without campaign
// control, send pacing or users' own limits (an older build) the keys they
// added are left out: such a build refuses keys it does not know.
func writeConfig(t *testing.T, cfg *config.Config, addr, path string, legacyGroups bool) {
	t.Helper()
	c := *cfg
	c.HTTP.Address = addr
	if err := c.Validate(); err != nil {
		t.Fatalf("soak worker config: %v", err)
	}
	y, err := c.Effective()
	if err != nil {
		t.Fatal(err)
	}
	headers := c.Kafka.LaneRecords == config.Default().Kafka.LaneRecords
	if c.Kafka.Topics.Control == "" || c.Kafka.Topics.Lanes == "" || c.Kafka.Topics.UserLimits == "" || legacyGroups || headers {
		var doc map[string]any
		if err := yaml.Unmarshal(y, &doc); err != nil {
			t.Fatal(err)
		}
		topics := doc["kafka"].(map[string]any)["topics"].(map[string]any)
		if headers { // the default: an older build does not know the key
			delete(doc["kafka"].(map[string]any), "lane_records")
		}
		if legacyGroups { // an older build: one membership, eager, no watchdog
			for _, k := range []string{"group_instance_id", "group_protocol", "leave_on_shutdown"} {
				delete(doc["kafka"].(map[string]any), k)
			}
			delete(doc["worker"].(map[string]any), "stuck_timeout")
		}
		if c.Kafka.Topics.Control == "" {
			delete(doc, "control")
			delete(topics, "control")
		}
		if c.Kafka.Topics.Lanes == "" {
			delete(topics, "lanes")
		}
		if c.Kafka.Topics.UserLimits == "" {
			delete(topics, "user_limits")
		}
		if y, err = yaml.Marshal(doc); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, y, 0o644); err != nil {
		t.Fatal(err)
	}
}

// publishSegments writes the segment snapshot of users [0, users).
func publishSegments(t *testing.T, dir string, users int, seed uint64) {
	t.Helper()
	st, err := objstore.Open(context.Background(), filepath.Join(dir, "segments"), objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := demo.BuildSnapshot(context.Background(), st, users, seed, time.Now); err != nil {
		t.Fatal(err)
	}
}

// plan is the campaign plan of a soak: a high-priority push to every fifth
// user, for a window inside the traffic.
type plan struct {
	campaign       string
	starts, ends   time.Time
	audience       *roaring.Bitmap
	priority       capping.Priority
	channel, categ string
}

func (p *plan) has(user uint64) bool { return user <= 1<<32-1 && p.audience.Contains(uint32(user)) }

func publishPlan(t *testing.T, dir string, users int, starts, ends time.Time) *plan {
	t.Helper()
	p := &plan{campaign: "vip", starts: starts, ends: ends, audience: roaring.New(), priority: capping.High, channel: "push", categ: "marketing"}
	for u := 5; u < users; u += 5 {
		p.audience.Add(uint32(u))
	}
	var buf bytes.Buffer
	if _, err := p.audience.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	st, err := objstore.Open(context.Background(), filepath.Join(dir, "plans"), objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	spec := &plans.Spec{Campaign: p.campaign, Priority: strconv.Itoa(int(p.priority)), Starts: starts, Ends: ends,
		Message: plans.Message{Channel: p.channel, Category: p.categ}}
	if _, err := plans.Publish(context.Background(), st, spec, p.priority, buf.Bytes(), p.audience.GetCardinality(), time.Now()); err != nil {
		t.Fatal(err)
	}
	return p
}

// hasPacing reports whether the binary has send pacing: whether it takes
// a policy with budgets (policy, a file). An older build, run through
// CAPPER_SOAK_BIN, refuses the key.
func hasPacing(bin, policy string) bool {
	return exec.Command(bin, "policy", "check", policy).Run() == nil
}

// hasControl reports whether the binary has campaign control (`capper
// campaign`): an older build, run through CAPPER_SOAK_BIN to see what the
// soak finds there, has not.
func hasControl(bin string) bool { return exec.Command(bin, "campaign", "--help").Run() == nil }

// hasGroups reports whether the binary has static membership and
// cooperative rebalancing (`capper group leave`).
func hasGroups(bin string) bool { return exec.Command(bin, "group", "leave", "--help").Run() == nil }

// buildBinary builds `capper` (or takes CAPPER_SOAK_BIN: a build of
// another revision, to show what the soak finds there).
func buildBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("CAPPER_SOAK_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "capper")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/capper-dev/capper/cmd/capper").CombinedOutput()
	if err != nil {
		t.Fatalf("build capper: %v\n%s", err, out)
	}
	return bin
}
