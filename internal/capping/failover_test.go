package capping

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestFailoverLosesNoSendWithWait kills a master whose last writes never
// reached its two replicas (they are cut off and stuck while the writes are
// made), lets Sentinel promote one, and counts the sends of one user allowed
// beyond a cap of 1: with asynchronous replication the send decided just
// before the failover is lost and the user gets a second one; with
// WaitReplicas the first answer is not given until a replica has it, so it
// fails, is decided again on the new master (whose replica is the other
// one), and caps hold.
func TestFailoverLosesNoSendWithWait(t *testing.T) {
	for _, tc := range []struct {
		name       string
		wait       int
		wantExcess int
	}{
		{"async replication", 0, 1},
		{"wait_replicas 1", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			master := testenv.StartRedis(t, testenv.RedisOptions{})
			replicas := []*testenv.Redis{testenv.ReplicaOf(t, master), testenv.ReplicaOf(t, master)}
			sentinel := testenv.StartSentinel(t, "capper", master.Port, testenv.SentinelOptions{DownAfter: 500 * time.Millisecond})
			sc := sentinel.Client(t)
			waitFor(t, "sentinel to know the replica", func() bool {
				rs, err := sc.Replicas(ctx, "capper").Result()
				return err == nil && len(rs) == 2
			})
			c, err := NewClient(ClientOptions{Mode: ModeSentinel, Addrs: []string{sentinel.Addr}, MasterName: "capper",
				DialTimeout: 200 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, MaxRetries: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			rules := Rules{Default: Policy{Limits: []Limit{{Name: "daily", Window: 24 * time.Hour, Max: 1}}}, TimeZone: time.UTC}
			e := newEngine(t, c, Options{Rules: rules, WaitReplicas: tc.wait, WaitTimeout: 300 * time.Millisecond})
			req := func(id string, at time.Time) Request {
				return Request{UserID: 7, Segment: "s", IntentID: id, Channel: "push", Category: "marketing", At: at}
			}
			decide := func(r Request) Decision {
				d, err := e.Decide(ctx, []Request{r})
				if err != nil {
					t.Fatal(err)
				}
				return d[0]
			}
			if d := decide(Request{UserID: 1, Segment: "s", IntentID: "warm", Channel: "push", Category: "marketing", At: T0}); d.Err != nil {
				t.Fatalf("warm-up: %v", d.Err)
			}

			// Cut the replicas off: stuck, and their links closed, so that
			// what the master writes now reaches no replica.
			for _, r := range replicas {
				r.Pause()
			}
			if err := master.Client().Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
				t.Fatal(err)
			}
			first := decide(req("x1", T0.Add(time.Minute)))
			if tc.wait == 0 && (first.Err != nil || first.Outcome != Allowed) {
				t.Fatalf("without WAIT the first intent is allowed at once: %+v", first)
			}
			var nr errNotReplicated
			if tc.wait > 0 && !errors.As(first.Err, &nr) {
				t.Fatalf("with WAIT the first answer must wait for a replica: %+v", first)
			}
			master.Kill()
			for _, r := range replicas {
				r.Resume()
			}
			waitFor(t, "sentinel to promote a replica", func() bool {
				addr, err := sc.GetMasterAddrByName(ctx, "capper").Result()
				return err == nil && addr[1] != strconv.Itoa(master.Port)
			})

			// The dispatcher decides an unanswered intent again; then the
			// user's next intent.
			allowed := 0
			if first.Err == nil && first.Outcome == Allowed {
				allowed++
			}
			todo := []Request{req("x2", T0.Add(2*time.Minute))}
			if first.Err != nil {
				todo = append([]Request{req("x1", T0.Add(2*time.Minute))}, todo...)
			}
			for _, r := range todo {
				var d Decision
				waitFor(t, "the new master to answer", func() bool { d = decide(r); return d.Err == nil })
				if d.Outcome == Allowed {
					allowed++
				}
			}
			excess := max(allowed-1, 0)
			t.Logf("%s: %d sends allowed beyond a cap of 1 across the failover", tc.name, excess)
			if excess != tc.wantExcess {
				t.Fatalf("%d sends beyond the cap, want %d", excess, tc.wantExcess)
			}
		})
	}
}
