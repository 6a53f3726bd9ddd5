package capping

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

func TestNewClientErrors(t *testing.T) {
	for _, tc := range []struct {
		o    ClientOptions
		want string
	}{
		{ClientOptions{Mode: "single"}, "addrs: at least one address"},
		{ClientOptions{Mode: "single", Addrs: []string{"a:1", "b:1"}}, "addrs: mode single takes one address"},
		{ClientOptions{Mode: "cluster", Addrs: []string{"a:1"}, DB: 2}, "db: Redis Cluster has only database 0"},
		{ClientOptions{Mode: "sentinel", Addrs: []string{"a:1"}}, "master_name: is required with mode sentinel"},
		{ClientOptions{Mode: "single", Addrs: []string{"a:1"}, MasterName: "m"}, "master_name: is only used with mode sentinel"},
		{ClientOptions{Mode: "ring", Addrs: []string{"a:1"}}, `mode: "ring" is not one of`},
		{ClientOptions{Addrs: []string{"a:1"}}, `mode: "" is not one of`},
	} {
		if _, err := NewClient(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.o, err, tc.want)
		}
	}
}

// decideOne decides one fresh intent and fails unless it is allowed.
func decideOne(t *testing.T, e *Engine, uid uint64) {
	t.Helper()
	d, err := e.Decide(context.Background(), []Request{{UserID: uid, Segment: "new", IntentID: fmt.Sprint("c-", uid), Channel: "email", Category: "marketing", At: T0}})
	if err != nil || d[0].Err != nil || d[0].Outcome != Allowed {
		t.Fatalf("Decide: %v %+v", err, d)
	}
}

// TestClientCluster: one seed address is enough for a cluster.
func TestClientCluster(t *testing.T) {
	cl := testenv.StartCluster(t, 3)
	c, err := NewClient(ClientOptions{Mode: ModeCluster, Addrs: cl.Addrs()[:1]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, ok := c.(*redis.ClusterClient); !ok {
		t.Fatalf("mode cluster built a %T", c)
	}
	e := newEngine(t, c, Options{})
	for u := range uint64(30) { // 30 buckets land on every master
		decideOne(t, e, u*bucketSize)
	}
	for i, n := range cl.Nodes {
		if evalCalls(t, n.Client()) == 0 {
			t.Errorf("master %d got no call", i)
		}
	}
}

// TestClientACL: the engine works as an ACL user restricted to its key
// prefix, and fails without the credentials.
func TestClientACL(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	ctx := context.Background()
	admin := r.Client()
	if err := admin.Do(ctx, "ACL", "SETUSER", "capper", "on", ">s3cret", "~capper:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "default", "off").Err(); err != nil {
		t.Fatal(err)
	}
	bad, err := NewClient(ClientOptions{Mode: ModeSingle, Addrs: []string{r.Addr()}, Username: "capper", Password: "wrong", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bad.Close() })
	if _, err := New(ctx, testOptions(Options{Client: bad})); err == nil {
		t.Fatal("New with a wrong password succeeded")
	}
	c, err := NewClient(ClientOptions{Mode: ModeSingle, Addrs: []string{r.Addr()}, Username: "capper", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	e := newEngine(t, c, Options{})
	decideOne(t, e, 1)
	// The ACL confines the user to its prefix: the script touches nothing else.
	e2 := newEngine(t, c, Options{KeyPrefix: "other"})
	d, err := e2.Decide(ctx, []Request{{UserID: 1, Segment: "new", IntentID: "x", Channel: "email", Category: "marketing", At: T0}})
	if err != nil || d[0].Err == nil {
		t.Fatalf("a prefix outside the ACL worked: %v %+v", err, d)
	}
}

// TestClientTLS talks to redis-server's TLS port with a private CA.
func TestClientTLS(t *testing.T) {
	ca := testenv.NewCA(t)
	port := testenv.FreePort(t)
	testenv.StartRedis(t, testenv.RedisOptions{Args: []string{
		"--tls-port", strconv.Itoa(port), "--tls-cert-file", ca.CertFile, "--tls-key-file", ca.KeyFile,
		"--tls-ca-cert-file", ca.CAFile, "--tls-auth-clients", "no",
	}})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c, err := NewClient(ClientOptions{Mode: ModeSingle, Addrs: []string{addr}, TLS: ca.Client})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	e := newEngine(t, c, Options{})
	decideOne(t, e, 1)

	plain, err := NewClient(ClientOptions{Mode: ModeSingle, Addrs: []string{addr}, MaxRetries: -1, ReadTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plain.Close() })
	if _, err := New(context.Background(), testOptions(Options{Client: plain})); err == nil {
		t.Fatal("plain TCP to the TLS port worked")
	}
}

// TestClientSentinel runs a real sentinel (redis-server --sentinel) that
// monitors a real master; the engine reaches the master through it.
func TestClientSentinel(t *testing.T) {
	master := testenv.StartRedis(t, testenv.RedisOptions{})
	sentinel := testenv.StartSentinel(t, "capper", master.Port, testenv.SentinelOptions{}).Addr
	c, err := NewClient(ClientOptions{Mode: ModeSentinel, Addrs: []string{sentinel}, MasterName: "capper"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	e := newEngine(t, c, Options{})
	decideOne(t, e, 1)
	// The intent is in the master.
	if n, err := master.Client().HLen(context.Background(), e.keys.bucket(1)).Result(); err != nil || n != 2 {
		t.Fatalf("master holds %d fields (%v), want the user's record and the bucket's mark", n, err)
	}
	skews, err := e.CheckClock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := skews[master.Addr()]; !ok || len(skews) != 1 {
		t.Fatalf("clock check through the sentinel measured %v, want the master %s", skews, master.Addr())
	}
}
