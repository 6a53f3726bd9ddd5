package testenv

// Real redis-server processes owned by a test.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireServers reports whether a missing server binary must fail the test
// instead of skipping it.
func RequireServers() bool {
	return os.Getenv("CI") == "true" || os.Getenv("CAPPER_REQUIRE_SERVERS") == "1"
}

// RedisServerPath returns the path of redis-server, skipping the test when it
// is missing, or failing it under CI (see RequireServers).
func RedisServerPath(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		if RequireServers() {
			t.Fatalf("redis-server not found on PATH (make test installs it with apt-get): %v", err)
		}
		t.Skip("redis-server not found on PATH; run make test to install it")
	}
	return p
}

// Redis is one redis-server process owned by a test.
type Redis struct {
	t    testing.TB
	bin  string
	args []string
	Port int
	// BusPort is the cluster bus port (cluster nodes only).
	BusPort int
	Dir     string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the running process has been reaped
	out  *SyncBuffer
}

// SyncBuffer is a bytes.Buffer safe for one writer and concurrent readers:
// a process's output (exec copies into it from its own goroutine) or a
// logger's, read by a failing test.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// RedisOptions tunes StartRedis. The zero value starts a plain, persistence-free
// single node.
type RedisOptions struct {
	// Cluster starts the node with cluster-enabled yes (see StartCluster).
	Cluster bool
	// Args are extra redis-server arguments, e.g. "--maxmemory", "10mb".
	Args []string
}

// StartRedis starts a redis-server on a free loopback port and registers its
// stop with t.Cleanup.
func StartRedis(t testing.TB, opts RedisOptions) *Redis {
	t.Helper()
	bin := RedisServerPath(t)
	dir := t.TempDir()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port := FreePort(t)
		args := []string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--dir", dir, "--save", "", "--appendonly", "no",
			"--daemonize", "no", "--logfile", "",
			// capper's records need it (see capping.ListpackValue).
			"--hash-max-listpack-value", "1024",
		}
		bus := 0
		if opts.Cluster {
			bus = FreePort(t)
			args = append(args,
				"--cluster-enabled", "yes",
				"--cluster-port", strconv.Itoa(bus),
				"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)),
				"--cluster-node-timeout", "3000",
				"--cluster-require-full-coverage", "yes",
			)
		}
		args = append(args, opts.Args...)
		r := &Redis{t: t, bin: bin, args: args, Port: port, BusPort: bus, Dir: dir}
		if lastErr = r.start(); lastErr == nil {
			t.Cleanup(r.Kill)
			return r
		}
	}
	t.Fatalf("start redis-server: %v", lastErr)
	return nil
}

// Addr is the node's host:port.
func (r *Redis) Addr() string { return hostPort(r.Port) }

func (r *Redis) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := &SyncBuffer{}
	cmd := exec.Command(r.bin, r.args...)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group (a Kill here touches nothing else), and it dies
	// with the test binary however that ends.
	Own(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("exec %s: %w", r.bin, err)
	}
	exited := make(chan error, 1)
	done := make(chan struct{})
	go func() { exited <- cmd.Wait(); close(done) }()
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("redis-server on port %d exited: %v\n%s", r.Port, err, out.String())
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			r.cmd, r.done, r.out = cmd, done, out
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return fmt.Errorf("redis-server on port %d did not answer PING: %v\n%s", r.Port, err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the process at once (SIGKILL), as a crash would. It is safe to
// call more than once.
func (r *Redis) Kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	// Wait until it is reaped so that its port is free for a Restart.
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
	}
	r.cmd = nil
}

// Shutdown stops the server as an operator would (SHUTDOWN: with an
// append-only file, it is flushed first) and waits for the process to end.
func (r *Redis) Shutdown() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
	_ = c.Do(context.Background(), "SHUTDOWN").Err() // the connection drops: no answer
	_ = c.Close()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	r.cmd = nil
}

// Pause stops the process (SIGSTOP) without killing it: it answers nothing
// until Resume, as a stuck or partitioned node would.
func (r *Redis) Pause() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		_ = r.cmd.Process.Signal(syscall.SIGSTOP)
	}
}

// Resume continues a paused process (SIGCONT).
func (r *Redis) Resume() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Restart starts the node again on the same port and directory, e.g. after Kill.
func (r *Redis) Restart() {
	r.t.Helper()
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = r.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond) // the old socket may linger briefly
	}
	r.t.Fatalf("restart redis-server on port %d: %v", r.Port, err)
}

// Client returns a go-redis client for this node, closed at test end.
func (r *Redis) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	r.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Log returns what the process printed, for failure messages.
func (r *Redis) Log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.out == nil {
		return ""
	}
	return r.out.String()
}
