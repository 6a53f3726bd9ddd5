package capping

import (
	"context"
	"errors"
	"maps"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestScriptFlush flushes the script cache of one master in the middle of a
// run, later of every master: no error reaches the caller and every decision
// still equals the model's (NOSCRIPT means the script did not run, so the
// EVAL re-send is exact).
func TestScriptFlush(t *testing.T) {
	ctx := context.Background()
	t.Run("single", func(t *testing.T) {
		r := testenv.StartRedis(t, testenv.RedisOptions{})
		reg := prometheus.NewRegistry()
		e := newEngine(t, r.Client(), Options{Registerer: reg})
		m, _ := runModel(t, e, *modelSeed+2, T0, 3000, compareOpts{}, func(b int) {
			if b == 5 || b == 20 {
				if err := r.Client().ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
		})
		if n := counterValue(t, reg, "capper_redis_noscript_reloads_total", nil); n == 0 {
			t.Fatal("no NOSCRIPT re-send counted")
		}
		checkStored(t, r.Client(), e, m)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := testenv.StartCluster(t, 3)
		reg := prometheus.NewRegistry()
		e := newEngine(t, cl.Client(), Options{Registerer: reg})
		m, _ := runModel(t, e, *modelSeed+3, T0, 3000, compareOpts{}, func(b int) {
			switch b {
			case 5:
				if err := cl.Nodes[1].Client().ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			case 20:
				for _, n := range cl.Nodes {
					if err := n.Client().ScriptFlush(ctx).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
		if n := counterValue(t, reg, "capper_redis_noscript_reloads_total", nil); n == 0 {
			t.Fatal("no NOSCRIPT re-send counted")
		}
		if n := counterValue(t, reg, "capper_redis_errors_total", nil); n != 0 {
			t.Fatalf("%v Redis errors counted", n)
		}
		checkStored(t, cl.Client(), e, m)
	})
}

// TestResentBatch decides the same batch twice, as a worker does after a
// crash before committing: every intent allowed the first time is a duplicate
// the second time, nothing else changes, and each is stored once.
func TestResentBatch(t *testing.T) {
	for _, mode := range []string{"single", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			var c redis.UniversalClient
			if mode == "single" {
				c = testenv.StartRedis(t, testenv.RedisOptions{}).Client()
			} else {
				c = testenv.StartCluster(t, 3).Client()
			}
			e := newEngine(t, c, Options{})
			g := newGen(t, *modelSeed+4, 100, T0)
			reqs := g.batch(800)
			first, err := e.Decide(context.Background(), reqs)
			if err != nil {
				t.Fatal(err)
			}
			second, err := e.Decide(context.Background(), reqs)
			if err != nil {
				t.Fatal(err)
			}
			n := map[Outcome]int{}
			allowedIDs := map[string]bool{}
			perUser := map[uint64]int{}
			for i, r := range reqs {
				if first[i].Err == nil && first[i].Outcome == Allowed {
					allowedIDs[r.IntentID] = true
					perUser[r.UserID]++
				}
			}
			for i, r := range reqs {
				if first[i].Err != nil || second[i].Err != nil {
					t.Fatalf("request %d: %v / %v", i, first[i].Err, second[i].Err)
				}
				n[first[i].Outcome]++
				// The same id may come again later in the batch.
				want := Capped
				switch {
				case first[i].Outcome == Exempt:
					want = Exempt
				case allowedIDs[r.IntentID]:
					want = Duplicate
				}
				if second[i].Outcome != want {
					t.Fatalf("request %d %+v: first %s, again %s, want %s", i, r, first[i].Outcome, second[i].Outcome, want)
				}
			}
			if n[Allowed] == 0 || n[Capped] == 0 {
				t.Fatalf("batch outcomes %v: want allowed and capped ones", n)
			}
			for uid := range g.seg {
				raw, err := c.HGet(context.Background(), e.keys.bucket(uid), field(uid)).Bytes()
				if err != nil && !errors.Is(err, redis.Nil) {
					t.Fatal(err)
				}
				rec, _ := decodeRecord(raw)
				if len(rec.idem) != perUser[uid] {
					t.Fatalf("user %d: %d stored, %d allowed", uid, len(rec.idem), perUser[uid])
				}
			}
		})
	}
}

// TestReadTimeoutResend swallows the replies of the connection that carries
// the pipeline: the server runs the scripts, the client's read times out and
// go-redis re-sends the whole (sub-)batch on a new connection. The re-run
// must answer Duplicate for every intent the unseen run allowed, and the
// records must hold each intent once. (The read timeout is long enough that
// a busy machine does not cause a re-send of its own.)
func TestReadTimeoutResend(t *testing.T) {
	ctx := context.Background()
	t.Run("single", func(t *testing.T) {
		r := testenv.StartRedis(t, testenv.RedisOptions{})
		p := startProxy(t, r.Addr())
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 1500 * time.Millisecond, MaxRetries: 3})
		t.Cleanup(func() { _ = c.Close() })
		e := newEngine(t, c, Options{})
		m := newRefModel(e.set.Load().rules, time.Duration(e.set.Load().idem)*time.Second)
		g := newGen(t, *modelSeed+5, 150, T0)
		for b := range 6 {
			g.step(m.rules)
			reqs := g.batch(300)
			if b%2 == 1 {
				p.armed.Store(true)
			}
			first := firstRound(e, reqs)
			got, err := e.Decide(ctx, reqs)
			if err != nil {
				t.Fatal(err)
			}
			resent := !p.armed.Load() && b%2 == 1
			allowed := 0
			for i, r := range reqs {
				want := m.decide(r)
				if err := compare(got[i], want, compareOpts{resent: resent}); err != nil {
					t.Fatalf("batch %d request %d %+v: %v", b, i, r, err)
				}
				if want.Outcome == Allowed && first[i] {
					allowed++
					if resent && got[i].Outcome != Duplicate {
						t.Fatalf("batch %d request %d: %s after a re-send, want duplicate", b, i, got[i].Outcome)
					}
				}
			}
			if resent && allowed == 0 {
				t.Fatalf("batch %d: nothing allowed, the re-send proves nothing", b)
			}
		}
		if p.muted.Load() != 3 {
			t.Fatalf("%d connections muted, want 3", p.muted.Load())
		}
		checkStored(t, r.Client(), e, m)
	})
	t.Run("cluster", func(t *testing.T) {
		cl := testenv.StartCluster(t, 3)
		victim := cl.Nodes[2].Addr()
		p := startProxy(t, victim)
		c := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:       cl.Addrs(),
			ReadTimeout: 1500 * time.Millisecond,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if addr == victim {
					addr = p.Addr()
				}
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			},
		})
		t.Cleanup(func() { _ = c.Close() })
		e := newEngine(t, c, Options{})
		m := newRefModel(e.set.Load().rules, time.Duration(e.set.Load().idem)*time.Second)
		g := newGen(t, *modelSeed+6, 150, T0)
		g.step(m.rules)
		reqs := g.batch(400)
		first := firstRound(e, reqs)
		p.armed.Store(true)
		got, err := e.Decide(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		if p.muted.Load() != 1 {
			t.Fatalf("%d connections muted, want 1", p.muted.Load())
		}
		onVictim, dups := 0, 0
		for i, r := range reqs {
			want := m.decide(r)
			victimUser := cl.SlotOwner(ctx, userSlot(r.UserID)) == 2
			if err := compare(got[i], want, compareOpts{resent: victimUser}); err != nil {
				t.Fatalf("request %d %+v (victim node: %v): %v", i, r, victimUser, err)
			}
			if want.Outcome == Allowed && victimUser && first[i] {
				onVictim++
				if got[i].Outcome == Duplicate {
					dups++
				}
			}
		}
		if onVictim == 0 || dups != onVictim {
			t.Fatalf("%d intents allowed on the muted node, %d answered duplicate after the re-send; want all", onVictim, dups)
		}
		checkStored(t, cl.Client(), e, m)
	})
}

// firstRound reports which requests of a batch go to Redis in its first
// round (a user's first that needs the script): the muted pipeline is that
// round's; a user's later requests follow in later rounds.
func firstRound(e *Engine, reqs []Request) []bool {
	var a assembly
	var known periods
	e.set.Load().assemble(&a, reqs, nil, &known)
	first := make([]bool, len(reqs))
	for _, c := range a.calls {
		first[c.i] = true
	}
	return first
}

// TestNodeDown cuts one master off (its connections are refused): its
// requests fail one by one, the others of the same batch are decided.
func TestNodeDown(t *testing.T) {
	ctx := context.Background()
	cl := testenv.StartCluster(t, 3)
	victim := cl.Nodes[0].Addr()
	p := startProxy(t, victim)
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:           cl.Addrs(),
		MaxRedirects:    1,
		DialTimeout:     200 * time.Millisecond,
		MinRetryBackoff: time.Millisecond,
		MaxRetryBackoff: 5 * time.Millisecond,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == victim {
				addr = p.Addr()
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() { _ = c.Close() })
	reg := prometheus.NewRegistry()
	e := newEngine(t, c, Options{Registerer: reg})
	m := newRefModel(e.set.Load().rules, time.Duration(e.set.Load().idem)*time.Second)
	g := newGen(t, *modelSeed+8, 150, T0)
	g.step(m.rules)
	reqs := g.batch(300)
	p.close() // the node is unreachable from now on
	got, err := e.Decide(ctx, reqs)
	if err != nil {
		t.Fatalf("Decide: %v (want per-request errors only)", err)
	}
	failed, waiting, decided := 0, 0, 0
	failedUsers := map[uint64]bool{}
	for i, r := range reqs {
		want := m.decide(r)
		onVictim := cl.SlotOwner(ctx, userSlot(r.UserID)) == 0
		// Exempt, uncounted and invalid requests never reach Redis; a
		// user's requests after one that failed wait for it, whatever
		// they are (but invalid).
		if onVictim && want.Err == nil && (want.Outcome != Exempt || failedUsers[r.UserID]) {
			switch {
			case got[i].Err == nil:
				t.Fatalf("request %d on the unreachable node: %+v, want an error", i, got[i])
			case errors.Is(got[i].Err, ErrInvalidRequest):
				t.Fatalf("request %d: a Redis failure must not look like an invalid request: %v", i, got[i].Err)
			case errors.Is(got[i].Err, ErrEarlierUndecided):
				if !failedUsers[r.UserID] {
					t.Fatalf("request %d waits for an earlier one, but none of its user failed", i)
				}
				waiting++
			default:
				if failedUsers[r.UserID] {
					t.Fatalf("request %d was sent after an earlier one of its user failed: %v", i, got[i].Err)
				}
				failed++
			}
			failedUsers[r.UserID] = true
			delete(m.users, r.UserID) // the model recorded what Redis did not
			continue
		}
		if onVictim {
			continue
		}
		if err := compare(got[i], want, compareOpts{}); err != nil {
			t.Fatalf("request %d %+v: %v", i, r, err)
		}
		decided++
	}
	if failed == 0 || waiting == 0 || decided == 0 {
		t.Fatalf("%d failed, %d waited for them, %d decided: want each", failed, waiting, decided)
	}
	if n := counterValue(t, reg, "capper_redis_errors_total", map[string]string{"kind": kindConnection}); n != float64(failed) {
		t.Fatalf("capper_redis_errors_total{kind=connection} = %v, want %d", n, failed)
	}
}

// TestSlotMigration moves a slot holding hot users from one master to
// another while batches run: the importing node has no script (an
// ASK-redirected EVALSHA meets NOSCRIPT there and is re-sent as EVAL) and
// buckets move a few at a time, then the slot is reassigned. A user's record
// is one field of one key, so each call runs whole on one node, in the
// user's batch order: every decision equals the model's, through the
// migration.
func TestSlotMigration(t *testing.T) {
	ctx := context.Background()
	cl := testenv.StartCluster(t, 3)
	c := cl.Client()
	reg := prometheus.NewRegistry()
	e := newEngine(t, c, Options{Registerer: reg})

	// Hot users: 40 users in 4 buckets of one slot.
	const slot = 4242
	src := cl.SlotOwner(ctx, slot)
	dst := (src + 1) % 3
	g := newGen(t, *modelSeed+9, 300, T0)
	g.noMoves = true
	i := 0
	for b := uint64(0); i < 40; b++ {
		if userSlot(b*bucketSize) != slot {
			continue
		}
		for k := range uint64(10) {
			u := b*bucketSize + k*3
			old := g.users[i]
			g.users[i] = u
			g.seg[u], g.tz[u] = g.seg[old], g.tz[old]
			i++
		}
	}
	moved := 0
	m := newRefModel(e.set.Load().rules, time.Duration(e.set.Load().idem)*time.Second)
	outcomes := map[Outcome]int{}
	for b := range 40 {
		switch {
		case b == 5:
			if err := cl.BeginSlotMigration(ctx, slot, src, dst); err != nil {
				t.Fatal(err)
			}
			if err := cl.Nodes[dst].Client().ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		case b > 5 && b < 20 && b%3 == 0:
			n, err := cl.MoveSlotKeys(ctx, slot, src, dst, 1)
			if err != nil {
				t.Fatal(err)
			}
			moved += n
		case b == 20:
			n, err := cl.MoveSlotKeys(ctx, slot, src, dst, 1000)
			if err != nil {
				t.Fatal(err)
			}
			moved += n
			if err := cl.FinishSlotMigration(ctx, slot, dst); err != nil {
				t.Fatal(err)
			}
		}
		g.step(m.rules)
		reqs := g.batch(150)
		got, err := e.Decide(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range reqs {
			want := m.decide(r)
			if err := compare(got[i], want, compareOpts{}); err != nil {
				t.Fatalf("batch %d request %d %+v (slot %d): %v", b, i, r, userSlot(r.UserID), err)
			}
			outcomes[got[i].Outcome]++
		}
	}
	t.Logf("%d keys moved; %v; NOSCRIPT re-sends %v", moved, outcomes, counterValue(t, reg, "capper_redis_noscript_reloads_total", nil))
	if moved < 2 {
		t.Fatalf("%d keys moved: the slot held too little data", moved)
	}
	if cl.SlotOwner(ctx, slot) != dst {
		t.Fatal("slot not moved")
	}
	if counterValue(t, reg, "capper_redis_noscript_reloads_total", nil) == 0 {
		t.Fatal("the importing node never answered NOSCRIPT")
	}
	checkStored(t, c, e, m)
}

// TestRedisErrorsStartAtZero: every kind of capper_redis_errors_total is
// exported at 0 from the start, so a dashboard shows 0, not "No data".
func TestRedisErrorsStartAtZero(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	reg := prometheus.NewRegistry()
	newEngine(t, r.Client(), Options{Registerer: reg})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "capper_redis_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "kind" {
					kinds[lp.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	want := map[string]float64{kindTimeout: 0, kindConnection: 0, kindCluster: 0, kindOther: 0}
	if !maps.Equal(kinds, want) {
		t.Fatalf("capper_redis_errors_total by kind = %v, want %v", kinds, want)
	}
}
