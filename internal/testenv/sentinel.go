package testenv

// A Redis Sentinel (redis-server --sentinel) watching one master.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is one sentinel process owned by a test.
type Sentinel struct {
	Addr string
	out  *SyncBuffer
}

// SentinelOptions tunes StartSentinel.
type SentinelOptions struct {
	// DownAfter is how long the master must be unreachable before a
	// failover (default 1s: short, for tests).
	DownAfter time.Duration
}

// StartSentinel starts a sentinel on a free loopback port that monitors the
// master at masterPort as name, with quorum 1, and waits until it knows the
// master. It is killed at test end.
func StartSentinel(t testing.TB, name string, masterPort int, o SentinelOptions) *Sentinel {
	t.Helper()
	if o.DownAfter <= 0 {
		o.DownAfter = time.Second
	}
	bin := RedisServerPath(t)
	dir := t.TempDir()
	for attempt := 0; ; attempt++ {
		port := FreePort(t)
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", attempt))
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d 1\n"+
			"sentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 10000\n",
			port, dir, name, masterPort, name, o.DownAfter.Milliseconds(), name)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, conf, "--sentinel")
		Own(cmd)
		out := &SyncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
		s := &Sentinel{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), out: out}
		if s.waitMaster(name, done) {
			return s
		}
		if attempt == 4 {
			t.Fatalf("sentinel did not start:\n%s", out.String())
		}
	}
}

// Client returns a sentinel client, closed at test end.
func (s *Sentinel) Client(t testing.TB) *redis.SentinelClient {
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Log returns what the sentinel printed.
func (s *Sentinel) Log() string { return s.out.String() }

// waitMaster waits until the sentinel knows the master, or its process exits.
func (s *Sentinel) waitMaster(name string, exited <-chan struct{}) bool {
	c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := c.GetMasterAddrByName(ctx, name).Result()
		cancel()
		if err == nil {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// ReplicaOf starts a redis-server that replicates master and waits until
// the link is up on both sides: the replica says so, and the master lists
// it online (it acknowledges writes: WAIT counts it). The replica reports
// its link up a moment before the master has its first acknowledgement.
func ReplicaOf(t testing.TB, master *Redis) *Redis {
	t.Helper()
	r := StartRedis(t, RedisOptions{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port)}})
	c, mc := r.Client(), master.Client()
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			var minfo string
			if minfo, err = mc.Info(context.Background(), "replication").Result(); err == nil && replicaOnline(minfo, r.Port) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica of %s never linked up: %v\n%s", master.Addr(), err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// replicaOnline reports whether a master's INFO replication lists the
// replica on port online, with a known lag of at most a second.
func replicaOnline(info string, port int) bool {
	for _, line := range strings.Split(info, "\n") {
		_, fields, ok := strings.Cut(strings.TrimSpace(line), ":ip=")
		if !ok || !strings.HasPrefix(line, "slave") {
			continue
		}
		kv := map[string]string{}
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			kv[k] = v
		}
		if kv["port"] != strconv.Itoa(port) {
			continue
		}
		lag, err := strconv.Atoi(kv["lag"])
		return kv["state"] == "online" && err == nil && lag <= 1
	}
	return false
}
