package capping

import (
	"bytes"
	"context"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// T0 is the start of simulated time in the tests (ms precision matters).
var T0 = time.Date(2026, 11, 21, 16, 0, 0, 0, time.UTC)

// testRules covers every shape: several limits, channel limits, max 0, a
// short window, the default policy.
func testRules() Rules {
	return Rules{
		Segments: []Segment{
			{Name: "new", Policy: Policy{Limits: []Limit{
				{Name: "daily", Window: 24 * time.Hour, Max: 1},
				{Name: "weekly", Window: 7 * 24 * time.Hour, Max: 3},
			}}},
			{Name: "active", Policy: Policy{Limits: []Limit{
				{Name: "daily", Window: 24 * time.Hour, Max: 3},
				{Name: "weekly", Window: 7 * 24 * time.Hour, Max: 10},
				{Name: "sms-weekly", Window: 7 * 24 * time.Hour, Max: 1, Channel: "sms"},
			}}},
			{Name: "chatty", Policy: Policy{Limits: []Limit{
				{Name: "push-10m", Window: 10 * time.Minute, Max: 1, Channel: "push"},
				{Name: "hourly", Window: time.Hour, Max: 4},
				{Name: "daily", Window: 24 * time.Hour, Max: 12},
				{Name: "email-daily", Window: 24 * time.Hour, Max: 2, Channel: "email"},
			}}},
			{Name: "blocked", Policy: Policy{Limits: []Limit{
				{Name: "no-sms", Window: time.Hour, Max: 0, Channel: "sms"},
				{Name: "daily", Window: 24 * time.Hour, Max: 2},
			}}},
		},
		Default: Policy{Limits: []Limit{
			{Name: "daily", Window: 24 * time.Hour, Max: 2},
		}},
		Channels:         []string{"email", "push", "sms", "inapp"},
		ExemptCategories: []string{"transactional"},
	}
}

func testSegments() []string { return []string{"new", "active", "chatty", "blocked", "none"} }

// testOptions fills what the tests leave out with the configuration's
// defaults (internal/config owns them; this package cannot import it).
func testOptions(o Options) Options {
	if o.Rules.Segments == nil && o.Rules.Default.Limits == nil {
		o.Rules = testRules()
	}
	if o.Rules.Channels == nil {
		o.Rules.Channels = []string{"email", "push", "sms", "inapp"}
	}
	if o.Rules.ExemptCategories == nil {
		o.Rules.ExemptCategories = []string{"transactional"}
	}
	if o.Algorithm == "" {
		o.Algorithm = SlidingLog
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "capper"
	}
	if o.IdempotencyWindow == 0 {
		o.IdempotencyWindow = 24 * time.Hour
	}
	if o.SubIntervals == 0 {
		o.SubIntervals = 24
	}
	if o.SkewWarn == 0 {
		o.SkewWarn = 500 * time.Millisecond
	}
	return o
}

func newEngine(t testing.TB, c redis.UniversalClient, o Options) *Engine {
	t.Helper()
	o.Client = c
	e, err := New(context.Background(), testOptions(o))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

// counterValue reads a counter or gauge (summed over labels matching
// labels) from a registry.
func counterValue(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}

// crc16 is Redis Cluster's key hash (XMODEM).
func crc16(b string) uint16 {
	var crc uint16
	for i := 0; i < len(b); i++ {
		crc ^= uint16(b[i]) << 8
		for j := 0; j < 8; j++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// userSlot is the cluster slot of a user's keys (their hash tag is the id).
func userSlot(uid uint64) int {
	return int(crc16(uintString(uid)) % 16384)
}

func uintString(u uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + u%10)
		u /= 10
		if u == 0 {
			break
		}
	}
	return string(b[i:])
}

// zlog reads a sorted set as (member, score) pairs, oldest first.
func zlog(t testing.TB, c redis.UniversalClient, key string) []redis.Z {
	t.Helper()
	z, err := c.ZRangeWithScores(context.Background(), key, 0, -1).Result()
	if err != nil {
		t.Fatalf("ZRANGE %s: %v", key, err)
	}
	return z
}

// auditLog checks that no half-open window of length w holds more than max
// scores, and returns the largest count seen.
func auditLog(scores []int64, w int64) int {
	sort.Slice(scores, func(i, j int) bool { return scores[i] < scores[j] })
	best, lo := 0, 0
	for hi := range scores {
		for scores[lo] <= scores[hi]-w {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}

// proxy is a TCP forwarder in front of a real redis-server that can swallow
// every reply of one connection: the client's read times out, as after a lost
// network packet, while the server has run the commands.
type proxy struct {
	ln      net.Listener
	target  string
	armed   atomic.Bool // the next connection that sends EVALSHA is muted
	muted   atomic.Int32
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
	closing atomic.Bool
}

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		var mute atomic.Bool
		p.wg.Add(2)
		go func() { // client -> server
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					// Only the connection carrying the script calls; go-redis
					// writes command names in lower case.
					if bytes.Contains(buf[:n], []byte("evalsha")) && p.armed.CompareAndSwap(true, false) {
						mute.Store(true)
						p.muted.Add(1)
					}
					if _, werr := s.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			_ = s.Close()
		}()
		go func() { // server -> client
			defer p.wg.Done()
			buf := make([]byte, 64<<10)
			for {
				n, err := s.Read(buf)
				if n > 0 && !mute.Load() {
					if _, werr := c.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			_ = c.Close()
		}()
	}
}

func (p *proxy) close() {
	if p.closing.Swap(true) {
		return
	}
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// cmdStat is one line of INFO commandstats.
type cmdStat struct {
	calls       int64
	usec        int64
	usecPerCall float64
}

// commandStat reads INFO commandstats of one node for a command (lower case).
func commandStat(c *redis.Client, name string) (cmdStat, error) {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return cmdStat{}, err
	}
	var s cmdStat
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				s.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				s.usec, _ = strconv.ParseInt(v, 10, 64)
			case "usec_per_call":
				s.usecPerCall, _ = strconv.ParseFloat(v, 64)
			}
		}
	}
	return s, nil
}
