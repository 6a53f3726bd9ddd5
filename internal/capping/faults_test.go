package capping

import (
	"context"
	"errors"
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
		runModel(t, e, *modelSeed+2, 3000, compareOpts{}, func(b int) {
			if b == 5 || b == 20 {
				if err := r.Client().ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
		})
		if n := counterValue(t, reg, "capper_redis_noscript_reloads_total", nil); n == 0 {
			t.Fatal("no NOSCRIPT re-send counted")
		}
	})
	t.Run("cluster", func(t *testing.T) {
		cl := testenv.StartCluster(t, 3)
		reg := prometheus.NewRegistry()
		e := newEngine(t, cl.Client(), Options{Registerer: reg})
		m, _ := runModel(t, e, *modelSeed+3, 3000, compareOpts{}, func(b int) {
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
			for _, algo := range []Algorithm{SlidingLog, SlidingWindow} {
				e := newEngine(t, c, Options{Algorithm: algo, KeyPrefix: "resend-" + string(algo)})
				g := newGen(*modelSeed+4, 100)
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
				for i := range reqs {
					if first[i].Outcome == Allowed {
						allowedIDs[reqs[i].IntentID] = true
					}
				}
				for i := range reqs {
					if first[i].Err != nil || second[i].Err != nil {
						t.Fatalf("%s request %d: %v / %v", algo, i, first[i].Err, second[i].Err)
					}
					n[first[i].Outcome]++
					// The same id may come again later in the batch.
					want := Capped
					switch {
					case first[i].Outcome == Exempt:
						want = Exempt
					case allowedIDs[reqs[i].IntentID]:
						want = Duplicate
					}
					if second[i].Outcome != want {
						t.Fatalf("%s request %d %+v: first %s, again %s, want %s", algo, i, reqs[i], first[i].Outcome, second[i].Outcome, want)
					}
				}
				if n[Allowed] == 0 || n[Capped] == 0 {
					t.Fatalf("%s: batch outcomes %v: want allowed and denied ones", algo, n)
				}
				if algo == SlidingLog {
					for uid := range g.seg {
						allowed := 0
						for i, r := range reqs {
							if r.UserID == uid && first[i].Outcome == Allowed {
								allowed++
							}
						}
						if got := len(zlog(t, c, e.keys.user(uid))); got != allowed {
							t.Fatalf("user %d: %d stored, %d allowed", uid, got, allowed)
						}
					}
				}
			}
		})
	}
}

// TestReadTimeoutResend swallows the replies of the connection that carries
// the pipeline: the server runs the scripts, the client's read times out and
// go-redis re-sends the whole (sub-)batch on a new connection. The re-run
// must answer Duplicate for every intent the unseen run allowed, and the logs
// must hold each intent once. (The read timeout is long enough that a busy
// machine does not cause a re-send of its own.)
func TestReadTimeoutResend(t *testing.T) {
	ctx := context.Background()
	t.Run("single", func(t *testing.T) {
		r := testenv.StartRedis(t, testenv.RedisOptions{})
		p := startProxy(t, r.Addr())
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 1500 * time.Millisecond, MaxRetries: 3})
		t.Cleanup(func() { _ = c.Close() })
		e := newEngine(t, c, Options{})
		m := newLogModel(e.rules, time.Duration(e.retention)*time.Millisecond)
		g := newGen(*modelSeed+5, 150)
		for b := range 6 {
			g.step()
			reqs := g.batch(300)
			if b%2 == 1 {
				p.armed.Store(true)
			}
			got, err := e.Decide(ctx, reqs)
			if err != nil {
				t.Fatal(err)
			}
			resent := p.armed.Load() == false && b%2 == 1
			allowed := 0
			for i, r := range reqs {
				want := m.decide(r)
				pol := e.rules.PolicyOf(r.Segment)
				if err := compare(pol, r, got[i], want, compareOpts{resent: resent}); err != nil {
					t.Fatalf("batch %d request %d %+v: %v", b, i, r, err)
				}
				if want.Outcome == Allowed {
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
		m := newLogModel(e.rules, time.Duration(e.retention)*time.Millisecond)
		g := newGen(*modelSeed+6, 150)
		victimUsers := 0
		for _, u := range g.users {
			if cl.SlotOwner(ctx, userSlot(u)) == 2 {
				victimUsers++
			}
		}
		if victimUsers == 0 {
			t.Fatal("no user on the victim node")
		}
		g.step()
		reqs := g.batch(400)
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
			pol := e.rules.PolicyOf(r.Segment)
			victimUser := cl.SlotOwner(ctx, userSlot(r.UserID)) == 2
			if err := compare(pol, r, got[i], want, compareOpts{resent: victimUser}); err != nil {
				t.Fatalf("request %d %+v (victim node: %v): %v", i, r, victimUser, err)
			}
			if want.Outcome == Allowed && victimUser {
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
	m := newLogModel(e.rules, time.Duration(e.retention)*time.Millisecond)
	g := newGen(*modelSeed+8, 150)
	g.step()
	reqs := g.batch(300)
	p.close() // the node is unreachable from now on
	got, err := e.Decide(ctx, reqs)
	if err != nil {
		t.Fatalf("Decide: %v (want per-request errors only)", err)
	}
	failed, decided := 0, 0
	for i, r := range reqs {
		cat := r.Category
		onVictim := cl.SlotOwner(ctx, userSlot(r.UserID)) == 0
		if onVictim && cat != "transactional" {
			if got[i].Err == nil {
				t.Fatalf("request %d on the unreachable node: %+v, want an error", i, got[i])
			}
			if errors.Is(got[i].Err, ErrInvalidRequest) {
				t.Fatalf("request %d: a Redis failure must not look like an invalid request: %v", i, got[i].Err)
			}
			failed++
			continue
		}
		want := m.decide(r)
		pol := e.rules.PolicyOf(r.Segment)
		if err := compare(pol, r, got[i], want, compareOpts{}); err != nil {
			t.Fatalf("request %d %+v: %v", i, r, err)
		}
		decided++
	}
	if failed == 0 || decided == 0 {
		t.Fatalf("%d failed, %d decided: want both", failed, decided)
	}
	if n := counterValue(t, reg, "capper_redis_errors_total", map[string]string{"kind": kindConnection}); n != float64(failed) {
		t.Fatalf("capper_redis_errors_total{kind=connection} = %v, want %d", n, failed)
	}
}

// TestSlotMigration moves a slot holding hot users from one master to another
// while batches run: the importing node has no script (ASK-redirected EVALSHA
// meets NOSCRIPT there) and keys move a few at a time, so a user's base and
// channel logs can sit on different nodes for a while (TRYAGAIN for calls
// with both keys: the worker retries them in a later batch, as the
// dispatcher does), then the slot is reassigned.
//
// Users of other slots must get exactly the model's answers. For the users
// of the migrating slot, a call re-sent after TRYAGAIN is decided after the
// user's later single-key calls of its batch, so the model's order does not
// apply; for them the test audits the invariants instead: no window of any
// limit holds more than its max, no intent is allowed twice, and the logs
// hold exactly the allowed intents.
func TestSlotMigration(t *testing.T) {
	ctx := context.Background()
	cl := testenv.StartCluster(t, 3)
	c := cl.Client()
	reg := prometheus.NewRegistry()
	e := newEngine(t, c, Options{Registerer: reg})

	// Hot users: 12 of them share one slot.
	const slot = 4242
	src := cl.SlotOwner(ctx, slot)
	dst := (src + 1) % 3
	g := newGen(*modelSeed+9, 300)
	g.noMoves = true
	inSlot := map[uint64]bool{}
	for u, i := uint64(0), 0; i < 12; u++ {
		if userSlot(u) == slot {
			old := g.users[i]
			g.users[i] = u
			g.seg[u] = g.seg[old]
			inSlot[u] = true
			i++
		}
	}
	type allowed struct {
		at      int64
		channel string
	}
	slotAllowed := map[uint64]map[string][]allowed{} // user -> intent -> when
	moved, retried := 0, 0
	var retry []Request // undecided (the dispatcher retries them)
	m := newLogModel(e.rules, time.Duration(e.retention)*time.Millisecond)
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
		case b > 5 && b < 20:
			n, err := cl.MoveSlotKeys(ctx, slot, src, dst, 2)
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
		g.step()
		reqs := g.batch(150)
		for _, r := range retry {
			r.At = g.now
			reqs = append([]Request{r}, reqs...)
		}
		retry = nil
		got, err := e.Decide(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range reqs {
			if !inSlot[r.UserID] {
				want := m.decide(r)
				pol := e.rules.PolicyOf(r.Segment)
				if err := compare(pol, r, got[i], want, compareOpts{}); err != nil {
					t.Fatalf("batch %d request %d %+v: %v", b, i, r, err)
				}
				outcomes[got[i].Outcome]++
				continue
			}
			if err := got[i].Err; err != nil {
				if b >= 20 || !redis.HasErrorPrefix(errors.Unwrap(err), "TRYAGAIN") {
					t.Fatalf("batch %d request %d %+v: %v", b, i, r, err)
				}
				retry = append(retry, r)
				retried++
				continue
			}
			outcomes[got[i].Outcome]++
			if got[i].Outcome != Allowed {
				continue
			}
			if slotAllowed[r.UserID] == nil {
				slotAllowed[r.UserID] = map[string][]allowed{}
			}
			prev := slotAllowed[r.UserID][r.IntentID]
			if len(prev) > 0 && prev[len(prev)-1].at > r.At.UnixMilli()-e.retention {
				t.Fatalf("batch %d: intent %s of user %d allowed twice within the retention", b, r.IntentID, r.UserID)
			}
			slotAllowed[r.UserID][r.IntentID] = append(prev, allowed{r.At.UnixMilli(), r.Channel})
		}
	}
	if len(retry) > 0 {
		t.Fatalf("%d requests still undecided after the migration", len(retry))
	}
	t.Logf("%d keys moved; %v; %d calls met TRYAGAIN and were retried; NOSCRIPT re-sends %v",
		moved, outcomes, retried, counterValue(t, reg, "capper_redis_noscript_reloads_total", nil))
	if moved == 0 {
		t.Fatal("no key moved: the slot held no data")
	}
	if cl.SlotOwner(ctx, slot) != dst {
		t.Fatal("slot not moved")
	}
	if counterValue(t, reg, "capper_redis_noscript_reloads_total", nil) == 0 {
		t.Fatal("the importing node never answered NOSCRIPT")
	}
	// Other users: the logs equal the model's.
	for u := range inSlot {
		delete(m.users, u)
	}
	checkStored(t, c, e, m)
	// Users of the migrating slot: caps held over the allowed decisions, and
	// the logs hold them (those the retention has not evicted) once.
	for u, intents := range slotAllowed {
		pol := e.rules.PolicyOf(g.seg[u])
		for _, l := range pol.Limits {
			var times []int64
			for _, as := range intents {
				for _, a := range as {
					if l.Applies(a.channel) {
						times = append(times, a.at)
					}
				}
			}
			if n := auditLog(times, l.Window.Milliseconds()); n > l.Max {
				t.Fatalf("user %d limit %s: %d allowed in one window, max %d", u, l.Name, n, l.Max)
			}
		}
		var last int64
		for _, as := range intents {
			last = max(last, as[len(as)-1].at)
		}
		stored := map[string]bool{}
		for _, z := range zlog(t, c, e.keys.user(u)) {
			stored[z.Member.(string)] = true
		}
		for id, as := range intents {
			d := digest(id)
			if as[len(as)-1].at > last-e.retention && !stored[string(d[:])] {
				t.Fatalf("user %d: allowed intent %s not in the log", u, id)
			}
			delete(stored, string(d[:]))
		}
		if len(stored) > 0 {
			t.Fatalf("user %d: %d logged intents were never allowed", u, len(stored))
		}
	}
}

// TestMigrationSplitUser pins a go-redis v9.23 hazard: when the first command
// of a node's sub-batch answers TRYAGAIN (a user's logs split by a slot
// migration) and another one ASK, go-redis re-sends the whole sub-batch and
// also sends the ASK-redirected command twice, concurrently (a data race the
// race detector reports, and a spurious ASK error). The engine's single-key
// probe in front of a user's first multi-key call keeps that path closed.
func TestMigrationSplitUser(t *testing.T) {
	ctx := context.Background()
	cl := testenv.StartCluster(t, 3)
	c := cl.Client()
	e := newEngine(t, c, Options{})
	const slot = 777
	var users []uint64
	for u := uint64(0); len(users) < 2; u++ {
		if userSlot(u) == slot {
			users = append(users, u)
		}
	}
	split, fresh := users[0], users[1]
	src := cl.SlotOwner(ctx, slot)
	dst := (src + 1) % 3
	// Push is capped on its own (a second key); inapp is not (one key).
	req := func(uid uint64, id string, at time.Time) Request {
		ch := "push"
		if uid == fresh {
			ch = "inapp"
		}
		return Request{UserID: uid, Segment: "chatty", IntentID: id, Channel: ch, Category: "marketing", At: at}
	}
	// The split user has a base and a push log on src.
	if d, err := e.Decide(ctx, []Request{req(split, "a1", T0)}); err != nil || d[0].Outcome != Allowed {
		t.Fatalf("setup: %v %+v", err, d)
	}
	if err := cl.BeginSlotMigration(ctx, slot, src, dst); err != nil {
		t.Fatal(err)
	}
	// Move only its push log.
	if err := cl.Nodes[src].Client().Do(ctx, "MIGRATE", "127.0.0.1", cl.Nodes[dst].Port, e.keys.user(split)+":push", 0, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	at := T0.Add(time.Hour)
	d, err := e.Decide(ctx, []Request{req(split, "a2", at), req(fresh, "b1", at)})
	if err != nil {
		t.Fatal(err)
	}
	if !redis.HasErrorPrefix(errors.Unwrap(d[0].Err), "TRYAGAIN") || errors.Is(d[0].Err, ErrInvalidRequest) {
		t.Fatalf("split user: %+v, want a TRYAGAIN error (retry later)", d[0])
	}
	if d[1].Err != nil || d[1].Outcome != Allowed { // ASK: decided on dst
		t.Fatalf("fresh user in the migrating slot: %+v, want allowed", d[1])
	}
	// Once the rest has moved, the split user is decided.
	if _, err := cl.MoveSlotKeys(ctx, slot, src, dst, 100); err != nil {
		t.Fatal(err)
	}
	if err := cl.FinishSlotMigration(ctx, slot, dst); err != nil {
		t.Fatal(err)
	}
	d, err = e.Decide(ctx, []Request{req(split, "a2", at), req(fresh, "b1", at)})
	if err != nil || d[0].Err != nil || d[0].Outcome != Allowed || d[1].Outcome != Duplicate {
		t.Fatalf("after the migration: %v %+v, want allowed and duplicate", err, d)
	}
}
