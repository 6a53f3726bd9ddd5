package capping

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

func newTestMemory(t testing.TB, rules Rules, idem time.Duration) *Memory {
	t.Helper()
	m, err := NewMemory(MemoryOptions{Rules: rules, PolicyVersion: "v-test", IdempotencyWindow: idem})
	if err != nil {
		t.Fatalf("NewMemory: %v", err)
	}
	return m
}

// memoryRun feeds the model's random traffic (gen) to a Memory, one request
// after another, and to want, which answers the same requests in batches
// (the reference model, or a Redis engine). It fails on the first decision
// that differs and returns how many requests it compared.
func memoryRun(t *testing.T, mem *Memory, seed uint64, start time.Time, intents int, want func([]Request) []Decision) int {
	t.Helper()
	return memoryRunWith(t, mem, seed, start, intents, false, want)
}

// memoryRunWith is memoryRun, with campaign plans in the traffic or not.
func memoryRunWith(t *testing.T, mem *Memory, seed uint64, start time.Time, intents int, plans bool, want func([]Request) []Decision) int {
	t.Helper()
	g := newGen(t, seed, 300, start)
	g.invalid, g.usePlans = true, plans
	outcomes := map[string]int{}
	done := 0
	for b := 0; done < intents; b++ {
		g.step(mem.set.rules)
		n := 1 + g.rng.IntN(200)
		if g.rng.IntN(4) == 0 {
			n = 1 + g.rng.IntN(5)
		}
		reqs := g.batch(n)
		ws := want(reqs)
		for i := range reqs {
			got := mem.Decide(&reqs[i])
			if err := compare(got, ws[i], compareOpts{}); err != nil {
				t.Fatalf("seed %d batch %d request %d %+v:\n%v", seed, b, i, reqs[i], err)
			}
			if got.Policy != "v-test" {
				t.Fatalf("Decision.Policy = %q, want v-test", got.Policy)
			}
			switch {
			case got.Err != nil:
				outcomes["invalid"]++
			case got.Outcome == Capped && got.HeldFor != "":
				outcomes["held "+got.Limit]++
			case got.Outcome == Capped:
				outcomes["capped "+got.Limit]++
			default:
				outcomes[got.Outcome.String()]++
			}
			if got.Err == nil && got.Outcome == Allowed {
				g.allowed = append(g.allowed, refSend{at: reqs[i].At.Unix(), r: reqs[i]})
			}
		}
		done += n
	}
	t.Logf("seed %d: %d requests until %s, %d users with a record: %v", seed, done, g.now.Format(time.DateOnly), mem.Users(), outcomes)
	for _, o := range []string{"allowed", "duplicate", "exempt", "invalid", "capped daily", "capped same-campaign", "capped news-week", "capped no-sms"} {
		if outcomes[o] == 0 {
			t.Errorf("no %s decision: the traffic no longer exercises it", o)
		}
	}
	return done
}

// TestMemoryModel: Memory decides the random model traffic exactly as the
// independent reference model does, across both DST changes.
func TestMemoryModel(t *testing.T) {
	for i, start := range []time.Time{spring, autumn} {
		t.Run(start.Format("2006-01"), func(t *testing.T) {
			idem := 2 * time.Hour
			rules := testRules()
			mem := newTestMemory(t, rules, idem)
			model := newRefModel(rules, idem)
			memoryRun(t, mem, *modelSeed+uint64(i)*100, start, 20000, func(reqs []Request) []Decision {
				out := make([]Decision, len(reqs))
				for i, r := range reqs {
					out[i] = model.decide(r)
				}
				return out
			})
		})
	}
}

// TestMemoryDetectsDifferences: the comparison has teeth. A Memory with a
// policy whose one limit allows one more send must part from the model.
func TestMemoryDetectsDifferences(t *testing.T) {
	rules := testRules()
	loose := testRules()
	loose.Segments[0].Policy.Limits[0].Max++ // new: daily 1 -> 2
	mem := newTestMemory(t, loose, 2*time.Hour)
	model := newRefModel(rules, 2*time.Hour)
	g := newGen(t, *modelSeed, 300, autumn)
	for b := range 2000 {
		g.step(rules)
		reqs := g.batch(1 + g.rng.IntN(50))
		for i := range reqs {
			want := model.decide(reqs[i])
			if err := compare(mem.Decide(&reqs[i]), want, compareOpts{}); err != nil {
				t.Logf("batch %d: the looser policy differs as it must: %v", b, err)
				return
			}
			if want.Err == nil && want.Outcome == Allowed {
				g.allowed = append(g.allowed, refSend{at: reqs[i].At.Unix(), r: reqs[i]})
			}
		}
	}
	t.Fatal("a Memory with another policy decided like the model: the comparison cannot fail")
}

// TestMemoryRedis: the same traffic through a real Redis (Engine.Decide, in
// batches) and through Memory (one by one): every decision is equal,
// retry-after and the time of a duplicate included.
func TestMemoryRedis(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	c := r.Client()
	for i, start := range []time.Time{spring, autumn} {
		t.Run(start.Format("2006-01"), func(t *testing.T) {
			idem := 2 * time.Hour
			e := newEngine(t, c, Options{IdempotencyWindow: idem, KeyPrefix: fmt.Sprintf("mem%d", i), PolicyVersion: "v-test"})
			mem := newTestMemory(t, e.set.Load().rules, idem)
			memoryRun(t, mem, *modelSeed+uint64(i)*100+7, start, 12000, func(reqs []Request) []Decision {
				out, err := e.Decide(context.Background(), reqs)
				if err != nil {
					t.Fatalf("Decide: %v", err)
				}
				for _, d := range out {
					if d.Err != nil && !errors.Is(d.Err, ErrInvalidRequest) {
						t.Fatalf("Redis could not decide: %v", d.Err)
					}
				}
				return out
			})
		})
	}
}

// TestMemoryRecordsAsRedis: after the same traffic, Memory holds every
// user's record byte for byte as Redis does (the script's trimming and
// bucket sweeps included).
func TestMemoryRecordsAsRedis(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	c := r.Client()
	ctx := context.Background()
	idem := 2 * time.Hour
	e := newEngine(t, c, Options{IdempotencyWindow: idem, KeyPrefix: "memrec"})
	mem := newTestMemory(t, e.set.Load().rules, idem)
	memoryRun(t, mem, *modelSeed+3, autumn, 8000, func(reqs []Request) []Decision {
		out, err := e.Decide(ctx, reqs)
		if err != nil {
			t.Fatalf("Decide: %v", err)
		}
		return out
	})
	sameAsRedis(t, c, mem, "memrec")
}

// sameAsRedis checks that Redis holds under prefix what mem holds: every
// record and every bucket field, byte for byte.
func sameAsRedis(t *testing.T, c redis.UniversalClient, mem *Memory, prefix string) {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	stored := 0
	for _, k := range keys {
		all, err := c.HGetAll(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		var bk uint64
		if _, err := fmt.Sscanf(k, prefix+":{b%d}", &bk); err != nil {
			t.Fatalf("key %s: %v", k, err)
		}
		for f, v := range all {
			switch b := mem.buckets[bk]; f {
			case xField:
				if x, y, ok := readMark(v); !ok || x != b.x || y != b.y {
					t.Fatalf("bucket %s: mark %x in Redis, x %d y %d in Memory", k, v, b.x, b.y)
				}
			default:
				var fi uint64
				if _, err := fmt.Sscan(f, &fi); err != nil {
					t.Fatalf("bucket %s: field %q", k, f)
				}
				uid := bk*bucketSize + fi
				if got := mem.users[uid]; got != v {
					t.Fatalf("user %d: Memory holds %x, Redis %x", uid, got, v)
				}
				stored++
			}
		}
	}
	if stored != mem.Users() {
		t.Fatalf("Redis holds %d records, Memory %d", stored, mem.Users())
	}
	t.Logf("%d records equal byte for byte", stored)
}

// TestMemoryWithPlans: with campaign plans in the traffic, Memory answers
// as Redis does (the plan held for and the retry-after included) and holds
// the same records, byte for byte.
func TestMemoryWithPlans(t *testing.T) {
	c := testenv.StartRedis(t, testenv.RedisOptions{}).Client()
	ctx := context.Background()
	idem := 2 * time.Hour
	e := newEngine(t, c, Options{IdempotencyWindow: idem, KeyPrefix: "memplan"})
	mem := newTestMemory(t, e.set.Load().rules, idem)
	memoryRunWith(t, mem, *modelSeed+71, spring, 8000, true, func(reqs []Request) []Decision {
		out, err := e.Decide(ctx, reqs)
		if err != nil {
			t.Fatalf("Decide: %v", err)
		}
		return out
	})
	sameAsRedis(t, c, mem, "memplan")
}
