package capping

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestConcurrentWorkers runs 8 workers, each with its own client and engine,
// on the same users and partly the same intent ids (redeliveries to another
// worker), with clocks up to 3s apart. Afterwards an audit of every stored
// log finds no window above its max, and every intent counted at most once.
func TestConcurrentWorkers(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		r := testenv.StartRedis(t, testenv.RedisOptions{})
		concurrentWorkers(t, func() redis.UniversalClient { return r.Client() })
	})
	t.Run("cluster", func(t *testing.T) {
		cl := testenv.StartCluster(t, 3)
		concurrentWorkers(t, func() redis.UniversalClient { return cl.Client() })
	})
}

func concurrentWorkers(t *testing.T, client func() redis.UniversalClient) {
	const (
		workers = 8
		users   = 200
		batches = 60
		perB    = 60
	)
	rules := testRules()
	segs := testSegments()
	seg := func(uid uint64) string { return segs[uid%uint64(len(segs))] }
	ctx := context.Background()

	type result struct {
		req Request
		d   Decision
	}
	results := make([][]result, workers)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		e := newEngine(t, client(), Options{Rules: rules})
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			skew := time.Duration(rng.IntN(6000)-3000) * time.Millisecond
			for b := range batches {
				at := T0.Add(time.Duration(b)*45*time.Minute + skew)
				reqs := make([]Request, perB)
				for i := range reqs {
					uid := uint64(rng.IntN(users))
					reqs[i] = Request{
						UserID:   uid,
						Segment:  seg(uid),
						IntentID: fmt.Sprintf("u%d-b%d-%d", uid, b, rng.IntN(6)), // shared by workers
						Channel:  []string{"email", "push", "sms", "inapp"}[rng.IntN(4)],
						Category: "marketing",
						At:       at.Add(time.Duration(i) * time.Millisecond),
					}
				}
				ds, err := e.Decide(ctx, reqs)
				if err != nil {
					errs <- err
					return
				}
				for i, d := range ds {
					if d.Err != nil {
						errs <- d.Err
						return
					}
					results[w] = append(results[w], result{reqs[i], d})
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Each intent allowed at most once over all workers.
	allowed := map[string]Request{}
	outcomes := map[Outcome]int{}
	for _, rs := range results {
		for _, r := range rs {
			outcomes[r.d.Outcome]++
			if r.d.Outcome != Allowed {
				continue
			}
			if prev, dup := allowed[r.req.IntentID]; dup {
				t.Fatalf("intent %s allowed twice: %+v and %+v", r.req.IntentID, prev, r.req)
			}
			allowed[r.req.IntentID] = r.req
		}
	}
	t.Logf("%v", outcomes)
	if outcomes[Capped] == 0 || outcomes[Duplicate] == 0 {
		t.Fatalf("traffic did not reach the caps or repeat intents: %v", outcomes)
	}

	// Audit: the stored logs hold exactly the allowed intents (the run is
	// shorter than the retention) and no window of any limit above its max.
	c := client()
	e := newEngine(t, c, Options{Rules: rules})
	byUser := map[uint64]map[string]Request{}
	for id, r := range allowed {
		if byUser[r.UserID] == nil {
			byUser[r.UserID] = map[string]Request{}
		}
		byUser[r.UserID][id] = r
	}
	for uid := range uint64(users) {
		base := e.keys.user(uid)
		logs := map[string][]int64{}
		members := map[string]bool{}
		for _, z := range zlog(t, c, base) {
			logs[""] = append(logs[""], int64(z.Score))
			members[z.Member.(string)] = true
		}
		if len(members) != len(byUser[uid]) {
			t.Fatalf("user %d: log holds %d intents, %d were allowed", uid, len(members), len(byUser[uid]))
		}
		for id := range byUser[uid] {
			d := digest(id)
			if !members[string(d[:])] {
				t.Fatalf("user %d: allowed intent %s missing from the log", uid, id)
			}
		}
		for _, ch := range []string{"email", "push", "sms"} {
			for _, z := range zlog(t, c, base+":"+ch) {
				logs[ch] = append(logs[ch], int64(z.Score))
			}
		}
		pol := rules.PolicyOf(seg(uid))
		for _, l := range pol.Limits {
			if n := auditLog(logs[l.Channel], l.Window.Milliseconds()); n > l.Max {
				t.Fatalf("user %d limit %s: %d intents in one window, max %d", uid, l.Name, n, l.Max)
			}
		}
	}
}
