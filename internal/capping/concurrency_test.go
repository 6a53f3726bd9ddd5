package capping

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestConcurrentWorkers runs 8 workers, each with its own client and engine,
// on the same users and partly the same intent ids (redeliveries to another
// worker), with clocks up to 3s apart, batch by batch (a batch every 45
// simulated minutes, all workers at once). Afterwards an audit of the allowed
// decisions finds every intent allowed at most once and, for every limit,
// no rolling window and no calendar period above its max.
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
	engines := make([]*Engine, workers)
	rngs := make([]*rand.Rand, workers)
	skews := make([]time.Duration, workers)
	for w := range workers {
		engines[w] = newEngine(t, client(), Options{Rules: rules})
		rngs[w] = rand.New(rand.NewPCG(uint64(w), 99))
		skews[w] = time.Duration(rngs[w].IntN(6000)-3000) * time.Millisecond
	}
	for b := range batches {
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			rng, e := rngs[w], engines[w]
			at := T0.Add(time.Duration(b)*45*time.Minute + skews[w])
			reqs := make([]Request, perB)
			for i := range reqs {
				uid := uint64(rng.IntN(users))
				r := Request{
					UserID:   uid,
					Segment:  seg(uid),
					IntentID: fmt.Sprintf("u%d-b%d-%d", uid, b, rng.IntN(6)), // shared by workers
					Campaign: testCampaigns[rng.IntN(len(testCampaigns))],
					Channel:  testChannels[rng.IntN(len(testChannels))],
					Category: []string{"marketing", "lifecycle"}[rng.IntN(2)],
					Priority: Priority(rng.IntN(3)),
					At:       at.Add(time.Duration(i) * time.Millisecond),
				}
				if rng.IntN(2) == 0 {
					r.Tags = []string{testTags[rng.IntN(len(testTags))]}
				}
				reqs[i] = r
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
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
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
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

	// Audit every limit over the allowed sends, at the times they were
	// recorded (each worker's own clock, in whole seconds).
	byUser := map[uint64][]Request{}
	for _, r := range allowed {
		byUser[r.UserID] = append(byUser[r.UserID], r)
	}
	audited := 0
	for uid, sends := range byUser {
		for _, l := range rules.PolicyOf(seg(uid)).Limits {
			groups := map[string][]int64{}
			for _, r := range sends {
				if !refMatches(l.Where, &r) {
					continue
				}
				k := ""
				if l.Per == PerCampaign {
					k = r.Campaign
				}
				if l.Calendar != None {
					start, _ := refPeriod(l.Calendar, r.At, rules.TimeZone, rules.WeekStart)
					k += fmt.Sprint("@", start)
				}
				groups[k] = append(groups[k], r.At.Unix())
			}
			for k, times := range groups {
				slices.Sort(times)
				n := len(times)
				if l.Calendar == None {
					n = 0
					for i := range times { // the sends in [t - W, t]
						j, _ := slices.BinarySearch(times, times[i]-int64(l.Window/time.Second))
						n = max(n, i-j+1)
					}
				}
				if n > l.Max {
					t.Fatalf("user %d limit %s (%s): %d sends in one window, max %d: %v", uid, l.Name, k, n, l.Max, times)
				}
				audited++
			}
		}
	}
	if audited == 0 {
		t.Fatal("nothing audited")
	}
}
