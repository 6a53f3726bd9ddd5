package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"go.yaml.in/yaml/v3"

	"github.com/capper-dev/capper/internal/testenv"
)

// costBaseline is the commit whose worker the Redis cost is compared
// with: main before the fence (a TIME per decision) and the verdicts'
// move into the script's round, at 0.67x of the first design.
const costBaseline = "509e047"

// targetRunCost: Redis CPU per allowed decision of a worker against the
// first design's (sorted sets), goal.
const targetRunCost = 0.65

// BenchmarkRunRedisCost measures what a `capper run` worker costs Redis
// per allowed decision, exactly as it runs: this version's binary and the
// binary of costBaseline (built from this repository's history), each
// with its own version's example config and the same policy (the
// baseline's example), drain the same 100k intents to 100k distinct users
// (every one allowed) through a recording proxy in front of a fresh
// redis-server; and beside them the first design, capper v1's sorted-set
// script (internal/capping/testdata/v1_sliding_log.lua) driven with the
// same intents and limits in pipelines of the worker's batch size, through
// the same proxy. What each sent, byte for byte on each connection, is then
// replayed on fresh redis-servers by this process alone, in turns (rounds
// alternate the order), so that the Redis figures of the three are taken
// on an equally quiet machine (a live worker shares the 2 cores with the
// broker). It prints, per allowed decision, the time Redis spent in the
// commands the client sent (INFO commandstats of those command names: a
// script's inner calls are not counted twice) and the Redis process's CPU
// (INFO cpu), with the ratios of this version to the first design (goal
// <= 0.65x) and to the baseline. The figures are the medians over rounds
// (CAPPER_BENCH_ROUNDS, 5).
func BenchmarkRunRedisCost(b *testing.B) {
	const n = 100_000
	rounds := 5
	if v, err := strconv.Atoi(os.Getenv("CAPPER_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	baseBin, baseSrc := buildAt(b, costBaseline)
	root, err := filepath.Abs("../..")
	if err != nil {
		b.Fatal(err)
	}
	policy := filepath.Join(baseSrc, "configs", "policy.yaml")
	s := newStack(b)
	msgs := benchIntents(n, 1_000_000)
	var peers []*costPeer
	for b.Loop() {
		peers = []*costPeer{
			s.recordWorker(b, "this version", binary, filepath.Join(root, "configs", "capper.yaml"), policy, "now", msgs),
			s.recordWorker(b, costBaseline, baseBin, filepath.Join(baseSrc, "configs", "capper.yaml"), policy, "base", msgs),
			recordV1(b, root, msgs),
		}
		for r := range rounds {
			for i := range peers {
				p := peers[(i+r)%len(peers)]
				p.figs = append(p.figs, p.replay(b))
			}
		}
	}
	this, base, v1 := peers[0].median(), peers[1].median(), peers[2].median()
	for _, p := range peers {
		b.Logf("%s sent: %s", p.name, p.sent())
	}
	for _, p := range peers {
		m := p.median()
		b.Logf("%-30s %6.2f us in its commands, %6.2f us Redis CPU per allowed decision (%d allowed; %.2f commands each, %d connections, %d bytes sent)",
			p.name, m.usec, m.cpu, m.allowed, m.calls, len(p.streams), p.bytes())
	}
	b.Logf("this version / first design: %.2fx in commands, %.2fx Redis CPU (goal <= %.2fx); / %s: %.2fx, %.2fx",
		this.usec/v1.usec, this.cpu/v1.cpu, targetRunCost, costBaseline, this.usec/base.usec, this.cpu/base.cpu)
	b.ReportMetric(this.usec, "us-cmd/allowed")
	b.ReportMetric(this.cpu, "us-cpu/allowed")
	b.ReportMetric(this.usec/v1.usec, "x-v1-cmd")
	b.ReportMetric(this.cpu/v1.cpu, "x-v1-cpu")
	b.ReportMetric(this.cpu/v1.cpu/targetRunCost, "x-of-0.65-goal")
	b.ReportMetric(this.usec/base.usec, "x-"+costBaseline+"-cmd")
	b.ReportMetric(this.cpu/base.cpu, "x-"+costBaseline+"-cpu")
}

type costFigures struct {
	usec, cpu, calls float64 // per allowed decision
	allowed          int64
}

// costPeer is one client's recorded traffic and the figures of its
// replays.
type costPeer struct {
	name    string
	streams [][]byte // what it sent, per connection, in the order they opened
	allowed int64
	figs    []costFigures
}

// sent counts the commands it sent, by name.
func (p *costPeer) sent() string {
	count := map[string]int{}
	for _, st := range p.streams {
		for _, name := range commandNames(st) {
			count[name]++
		}
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(count)) {
		out = append(out, fmt.Sprintf("%s %d", name, count[name]))
	}
	return strings.Join(out, ", ")
}

func (p *costPeer) bytes() int {
	n := 0
	for _, s := range p.streams {
		n += len(s)
	}
	return n
}

func (p *costPeer) median() costFigures {
	med := func(f func(costFigures) float64) float64 {
		v := make([]float64, len(p.figs))
		for i, x := range p.figs {
			v[i] = f(x)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return costFigures{usec: med(func(x costFigures) float64 { return x.usec }), cpu: med(func(x costFigures) float64 { return x.cpu }),
		calls: med(func(x costFigures) float64 { return x.calls }), allowed: p.allowed}
}

// replay sends each recorded connection's bytes to a fresh redis-server,
// one connection after the other (reading the replies), and returns what
// Redis spent on them per allowed decision.
func (p *costPeer) replay(b *testing.B) costFigures {
	b.Helper()
	r := testenv.StartRedis(b, testenv.RedisOptions{})
	defer r.Kill()
	c := r.Client()
	names := map[string]int{}
	for _, st := range p.streams {
		for _, name := range commandNames(st) {
			names[name]++
		}
	}
	before := redisCost(b, c, names)
	for _, st := range p.streams {
		conn, err := net.Dial("tcp", r.Addr())
		if err != nil {
			b.Fatal(err)
		}
		drained := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, conn)
			drained <- err
		}()
		if _, err := conn.Write(st); err != nil {
			b.Fatal(err)
		}
		// Redis runs everything it read before it sees the end, then
		// closes the connection.
		if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
			b.Fatal(err)
		}
		if err := <-drained; err != nil {
			b.Fatal(err)
		}
		_ = conn.Close()
	}
	return redisCost(b, c, names).minus(before).per(p.allowed)
}

// commandNames are the lower-case names of the commands in a RESP stream
// a client sent (arrays of bulk strings).
func commandNames(st []byte) []string {
	var names []string
	rd := bufio.NewReader(bytes.NewReader(st))
	for {
		line, err := rd.ReadString('\n')
		if err != nil || len(line) < 3 || line[0] != '*' {
			return names
		}
		n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		for i := range n {
			hdr, err := rd.ReadString('\n')
			if err != nil || hdr[0] != '$' {
				return names
			}
			size, _ := strconv.Atoi(strings.TrimSpace(hdr[1:]))
			arg := make([]byte, size+2)
			if _, err := io.ReadFull(rd, arg); err != nil {
				return names
			}
			if i == 0 {
				names = append(names, strings.ToLower(string(arg[:size])))
			}
		}
	}
}

// recorder is a TCP proxy in front of a Redis server that keeps what each
// client connection sent.
type recorder struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	streams []*bytes.Buffer
	conns   []net.Conn
	wg      sync.WaitGroup
}

func startRecorder(b *testing.B, target string) *recorder {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	rec := &recorder{ln: ln, target: target}
	rec.wg.Add(1)
	go func() {
		defer rec.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			srv, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			buf := &bytes.Buffer{}
			rec.mu.Lock()
			rec.streams = append(rec.streams, buf)
			rec.conns = append(rec.conns, c, srv)
			rec.mu.Unlock()
			rec.wg.Add(2)
			go func() {
				defer rec.wg.Done()
				_, _ = io.Copy(srv, io.TeeReader(c, buf))
				_ = srv.Close()
			}()
			go func() {
				defer rec.wg.Done()
				_, _ = io.Copy(c, srv)
				_ = c.Close()
			}()
		}
	}()
	return rec
}

func (r *recorder) addr() string { return r.ln.Addr().String() }

// stop closes every connection and returns what each sent.
func (r *recorder) stop() [][]byte {
	_ = r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	var out [][]byte
	for _, b := range r.streams {
		if b.Len() > 0 {
			out = append(out, b.Bytes())
		}
	}
	return out
}

// buildAt builds cmd/capper as of commit (git archive of this repository)
// into the user's cache, once, and returns the binary and the source tree.
func buildAt(b *testing.B, commit string) (bin, src string) {
	b.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		b.Fatal(err)
	}
	src = filepath.Join(cache, "capper-bench", commit)
	bin = filepath.Join(src, "capper")
	if _, err := os.Stat(bin); err == nil {
		return bin, src
	}
	if err := os.RemoveAll(src); err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		b.Fatal(err)
	}
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C ../.. archive %s | tar -x -C %s", commit, src))
	if out, err := archive.CombinedOutput(); err != nil {
		b.Fatalf("check out %s (a clone with its history is needed): %v\n%s", commit, err, out)
	}
	build := exec.Command("go", "build", "-o", bin, "./cmd/capper")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build capper at %s: %v\n%s", commit, err, out)
	}
	return bin, src
}

// recordWorker runs bin with the example config at example (its topics,
// group and Redis replaced by a fresh set, Redis behind a recorder) until
// it has committed msgs, and returns what it sent Redis.
func (s *stack) recordWorker(b *testing.B, name, bin, example, policy, run string, msgs []kafka.Message) *costPeer {
	b.Helper()
	r := testenv.StartRedis(b, testenv.RedisOptions{})
	defer r.Kill()
	rec := startRecorder(b, r.Addr())
	in, del := "cost-in-"+run, "cost-del-"+run
	s.createTopic(b, in)
	s.createTopic(b, del)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(b))
	path := filepath.Join(b.TempDir(), "capper.yaml")
	writeCostConfig(b, example, path, map[string]any{
		"kafka.brokers": s.kafka.Addrs, "kafka.group_id": "cost-" + run, "kafka.topics.input": in,
		"kafka.topics.deliveries": del, "kafka.session_timeout": "6s", "kafka.heartbeat_interval": "200ms",
		"kafka.fetch_max_wait": "100ms", "redis.addrs": []string{rec.addr()}, "segments.source": s.cfg.Segments.Source,
		"policy.source": "file://" + policy, "http.address": addr, "log.level": "warn", "worker.shutdown_timeout": "10s",
	})
	p := startAt(b, bin, path, addr)
	s.kafka.Produce(b, in, msgs)
	s.waitGroupCommitted(b, "cost-"+run, in, len(msgs))
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		b.Fatal(err)
	}
	if err := p.wait(b, 30*time.Second); err != nil {
		b.Fatalf("%s run: %v\n%s", bin, err, p.logs)
	}
	allowed := s.endOffsets(b, del)
	if allowed < int64(len(msgs))*9/10 {
		b.Fatalf("%s allowed %d of %d intents to new users: not the allowed workload\n%s", bin, allowed, len(msgs), p.logs)
	}
	return &costPeer{name: name, streams: rec.stop(), allowed: allowed}
}

// recordV1 drives capper v1's sorted-set script with msgs at the wall
// clock, against the example policy's default limits (daily 1, weekly
// 3), through a recorder, and returns what it sent.
func recordV1(b *testing.B, root string, msgs []kafka.Message) *costPeer {
	b.Helper()
	src, err := os.ReadFile(filepath.Join(root, "internal", "capping", "testdata", "v1_sliding_log.lua"))
	if err != nil {
		b.Fatal(err)
	}
	r := testenv.StartRedis(b, testenv.RedisOptions{})
	defer r.Kill()
	rec := startRecorder(b, r.Addr())
	c := redis.NewClient(&redis.Options{Addr: rec.addr(), PoolSize: 1})
	ctx := context.Background()
	script := redis.NewScript(string(src))
	if err := script.Load(ctx, c).Err(); err != nil {
		b.Fatal(err)
	}
	const batch = 500
	dayMS, weekMS := (24 * time.Hour).Milliseconds(), (7 * 24 * time.Hour).Milliseconds()
	var allowed int64
	for i := 0; i < len(msgs); i += batch {
		pipe := c.Pipeline()
		var cmds []*redis.Cmd
		for _, m := range msgs[i:min(i+batch, len(msgs))] {
			d := sha1.Sum(m.Value)
			now := time.Now().UnixMilli()
			cmds = append(cmds, script.EvalSha(ctx, pipe, []string{"v1:{" + string(m.Key) + "}"},
				string(d[:8]), now, now-weekMS, weekMS, now, 0, "1", now-dayMS+1, 1, dayMS, "1", now-weekMS+1, 3, weekMS))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			b.Fatal(err)
		}
		for _, cmd := range cmds {
			if res, err := cmd.Int64Slice(); err != nil {
				b.Fatal(err)
			} else if res[0] == 0 {
				allowed++
			}
		}
	}
	_ = c.Close()
	return &costPeer{name: "first design (v1 sorted sets)", streams: rec.stop(), allowed: allowed}
}

// costSample is a server's counters at one moment.
type costSample struct {
	usec, calls int64   // commandstats of the commands the client sent
	cpu         float64 // used_cpu_sys + used_cpu_user, seconds
}

func (a costSample) minus(o costSample) costSample {
	return costSample{usec: a.usec - o.usec, calls: a.calls - o.calls, cpu: a.cpu - o.cpu}
}

func (a costSample) per(allowed int64) costFigures {
	n := float64(allowed)
	return costFigures{usec: float64(a.usec) / n, cpu: a.cpu * 1e6 / n, calls: float64(a.calls) / n, allowed: allowed}
}

// redisCost reads INFO commandstats and cpu: the commands named, as many
// as were sent (a command also called by scripts counts the share of its
// time the sent ones are of its calls).
func redisCost(b *testing.B, c *redis.Client, names map[string]int) costSample {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats", "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var s costSample
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "cmdstat_"); ok {
			name, stats, _ := strings.Cut(rest, ":")
			sent, sub := names[strings.SplitN(name, "|", 2)[0]], strings.Contains(name, "|")
			if sent == 0 {
				continue
			}
			var calls, usec int64
			for _, kv := range strings.Split(stats, ",") {
				k, v, _ := strings.Cut(kv, "=")
				x, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "calls":
					calls = x
				case "usec":
					usec = x
				}
			}
			if !sub && calls > int64(sent) {
				usec, calls = usec*int64(sent)/calls, int64(sent)
			}
			s.calls += calls
			s.usec += usec
		}
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				x, _ := strconv.ParseFloat(v, 64)
				s.cpu += x
			}
		}
	}
	return s
}

// writeCostConfig writes the YAML file example with the dotted keys of
// set replaced, to path.
func writeCostConfig(b *testing.B, example, path string, set map[string]any) {
	b.Helper()
	data, err := os.ReadFile(example)
	if err != nil {
		b.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		b.Fatalf("%s: %v", example, err)
	}
	for k, v := range set {
		parts := strings.Split(k, ".")
		m := doc
		for _, p := range parts[:len(parts)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				b.Fatalf("%s has no %s", example, k)
			}
			m = next
		}
		m[parts[len(parts)-1]] = v
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		b.Fatal(err)
	}
}

// waitGroupCommitted waits until group has committed n offsets of topic
// (4 partitions).
func (s *stack) waitGroupCommitted(b *testing.B, group, topic string, n int) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		sum := int64(0)
		for _, off := range s.kafka.Committed(b, group, topic, 4) {
			sum += max(off, 0)
		}
		if sum >= int64(n) {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("group %s committed %d of %d offsets of %s", group, sum, n, topic)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// endOffsets is how many records topic holds (4 partitions).
func (s *stack) endOffsets(b *testing.B, topic string) int64 {
	b.Helper()
	c := &kafka.Client{Addr: kafka.TCP(s.kafka.Addrs...), Timeout: 10 * time.Second}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for p := range 4 {
		req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p))
	}
	resp, err := c.ListOffsets(context.Background(), req)
	if err != nil {
		b.Fatal(err)
	}
	var sum int64
	for _, p := range resp.Topics[topic] {
		if p.Error != nil {
			b.Fatal(p.Error)
		}
		sum += p.LastOffset
	}
	return sum
}
