package capping

// Tests of refunds: the rules on hand-made cases, the script against its Go
// port on random records, and random traffic with refunds against Memory
// and the reference model.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

// TestRefundRules runs the hand-made cases on a single node and a cluster.
func TestRefundRules(t *testing.T) {
	single := testenv.StartRedis(t, testenv.RedisOptions{}).Client()
	cluster := testenv.StartCluster(t, 3).Client()
	for _, c := range []struct {
		name   string
		client redis.UniversalClient
	}{{"single", single}, {"cluster", cluster}} {
		t.Run(c.name, func(t *testing.T) {
			t.Run("frees a slot", func(t *testing.T) { testRefundFreesSlot(t, c.client) })
			t.Run("ambiguous", func(t *testing.T) { testRefundAmbiguous(t, c.client) })
			t.Run("invalid", func(t *testing.T) { testRefundInvalid(t, c.client) })
			t.Run("trimmed", func(t *testing.T) { testRefundTrimmed(t, c.client) })
		})
	}
}

// refundEnv is an engine (with a refusal cache) and helpers that fail the
// test on any error.
type refundEnv struct {
	t   *testing.T
	e   *Engine
	reg *prometheus.Registry
}

func newRefundEnv(t *testing.T, c redis.UniversalClient, limits ...Limit) *refundEnv {
	reg := prometheus.NewRegistry()
	prefix := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	e := newEngine(t, c, Options{Rules: Rules{Default: Policy{Limits: limits}}, KeyPrefix: prefix,
		RefusalCacheSize: 100, RefusalCacheTTL: time.Hour, Registerer: reg})
	return &refundEnv{t: t, e: e, reg: reg}
}

// decide decides one intent of user 7 (channel "email" unless given) and
// checks the outcome.
func (v *refundEnv) decide(id, channel string, at time.Time, want Outcome) Decision {
	v.t.Helper()
	if channel == "" {
		channel = "email"
	}
	d, err := v.e.Decide(context.Background(), []Request{{UserID: 7, IntentID: id, Channel: channel, Category: "marketing", At: at}})
	if err != nil || d[0].Err != nil || d[0].Outcome != want {
		v.t.Fatalf("intent %s at %s: %+v (%v), want %s", id, at.Format(time.TimeOnly), d[0], err, want)
	}
	return d[0]
}

func (v *refundEnv) refund(id string, want RefundResult) {
	v.t.Helper()
	out, err := v.e.Refund(context.Background(), []RefundRequest{{UserID: 7, IntentID: id}})
	if err != nil || out[0].Err != nil || out[0].Result != want {
		v.t.Fatalf("refund %s: %+v (%v), want %s", id, out[0], err, want)
	}
}

// times are the user's section times, by section.
func (v *refundEnv) times() [][]int64 {
	v.t.Helper()
	raw, err := v.e.client.HGet(context.Background(), v.e.keys.bucket(7), field(7)).Bytes()
	if err != nil {
		v.t.Fatal(err)
	}
	rec, err := decodeRecord(raw)
	if err != nil {
		v.t.Fatal(err)
	}
	var out [][]int64
	for _, s := range rec.sections {
		out = append(out, s.times)
	}
	return out
}

func testRefundFreesSlot(t *testing.T, c redis.UniversalClient) {
	v := newRefundEnv(t, c, Limit{Name: "daily", Window: day, Max: 1})
	v.decide("a", "", T0, Allowed)
	v.decide("b", "", T0.Add(time.Minute), Capped)
	v.decide("b2", "", T0.Add(2*time.Minute), Capped)
	if hits := counterValue(t, v.reg, "capper_refusal_cache_hits_total", nil); hits != 1 {
		t.Fatalf("%v refusals answered from the cache, want 1 (b2)", hits)
	}
	ctx, key := context.Background(), v.e.keys.bucket(7)
	x := v.e.client.HGet(ctx, key, "x").Val()
	v.refund("a", RefundApplied)
	if x2, ttl := v.e.client.HGet(ctx, key, "x").Val(), v.e.client.TTL(ctx, key).Val(); x2 != x || ttl <= 0 {
		t.Fatalf("after the refund: x %q (was %q), TTL %s", x2, x, ttl)
	}
	// Not from the cache, which still remembered daily as full.
	v.decide("c", "", T0.Add(3*time.Minute), Allowed)
	v.refund("a", RefundNothing)
	v.refund("never", RefundUnknown)
	if d := v.decide("a", "", T0.Add(4*time.Minute), Duplicate); !d.At.Equal(T0) {
		t.Fatalf("redelivered a: counted at %s, want %s", d.At, T0)
	}
	v.decide("d", "", T0.Add(5*time.Minute), Capped) // c counts; a did not count again
	out, err := v.e.Refund(ctx, []RefundRequest{{UserID: 8, IntentID: "a"}})
	if err != nil || out[0].Err != nil || out[0].Result != RefundUnknown {
		t.Fatalf("refund of a user without a record: %+v %v", out, err)
	}
}

// testRefundTrimmed: a policy tightened while the user is above the new
// max trims the scope's section at the next write; a refund then takes
// nothing from it (an older, dropped send still counts) until a kept send
// has left the retention.
func testRefundTrimmed(t *testing.T, c redis.UniversalClient) {
	ctx := context.Background()
	week := 7 * day
	push := func(max int) Limit {
		return Limit{Name: "push-week", Where: Where{Channels: []string{"push"}}, Window: week, Max: max}
	}
	email := Limit{Name: "email-day", Where: Where{Channels: []string{"email"}}, Window: day, Max: 10}
	v := newRefundEnv(t, c, push(3), email)
	for i := range 3 {
		v.decide(fmt.Sprint("p", i+1), "push", T0.Add(time.Duration(i)*time.Minute), Allowed)
	}
	v.decide("p4", "push", T0.Add(3*time.Minute), Capped)
	rules := v.e.set.Load().rules
	rules.Default.Limits = []Limit{push(2), email}
	if err := v.e.SetPolicy(ctx, rules, "tight"); err != nil {
		t.Fatal(err)
	}
	v.decide("e1", "email", T0.Add(4*time.Minute), Allowed) // rewrites the push section: 3 sends, keep 2
	section := func(id string) section {
		t.Helper()
		raw, err := v.e.client.HGet(ctx, v.e.keys.bucket(7), field(7)).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		rec, err := decodeRecord(raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range rec.sections {
			if len(s.times) > 0 && s.times[len(s.times)-1] == T0.Add(time.Minute*map[string]time.Duration{"push": 2, "email": 4}[id]).Unix() {
				return s
			}
		}
		t.Fatalf("no %s section in %+v", id, rec.sections)
		return section{}
	}
	if s := section("push"); !s.trimmed || len(s.times) != 2 {
		t.Fatalf("push section after the tightening: %+v, want the 2 newest sends and trimmed", s)
	}
	states, err := v.e.Inspect(ctx, 7, "", InspectOptions{At: T0.Add(5 * time.Minute)})
	if err != nil || len(states) != 2 || !states[0].Trimmed || states[0].Count != 2 || states[1].Trimmed {
		t.Fatalf("inspect: %+v (%v), want push-week trimmed at 2, email-day not", states, err)
	}
	v.decide("p5", "push", T0.Add(5*time.Minute), Capped)
	// p3 is one of the kept sends; taking it would leave one time, under
	// the max of 2, while p1, p2 and p3 minus one (two sends) still count.
	v.refund("p3", RefundNothing)
	v.decide("p6", "push", T0.Add(6*time.Minute), Capped)
	if s := section("push"); !s.trimmed || len(s.times) != 2 {
		t.Fatalf("push section after the refund: %+v", s)
	}
	// Past the retention of p2 (the oldest kept), a write drops it and the
	// mark with it: refunds apply again.
	later := T0.Add(week + 10*time.Minute)
	v.decide("p7", "push", later, Allowed)
	raw, err := v.e.client.HGet(ctx, v.e.keys.bucket(7), field(7)).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := decodeRecord(raw)
	if err != nil || len(rec.sections) != 1 || rec.sections[0].trimmed || len(rec.sections[0].times) != 1 {
		t.Fatalf("record a week later: %+v (%v), want one untrimmed push section", rec.sections, err)
	}
	v.refund("p7", RefundApplied)
	v.decide("p8", "push", later.Add(time.Minute), Allowed)
	v.decide("p9", "push", later.Add(2*time.Minute), Allowed)
	v.decide("p10", "push", later.Add(3*time.Minute), Capped)
}

// testRefundAmbiguous: sends of one user in the same second are told apart
// only by the scopes they count in.
func testRefundAmbiguous(t *testing.T, c redis.UniversalClient) {
	t.Run("other scopes", func(t *testing.T) {
		v := newRefundEnv(t, c, Limit{Name: "email", Window: day, Max: 1, Where: Where{Channels: []string{"email"}}},
			Limit{Name: "push", Window: day, Max: 1, Where: Where{Channels: []string{"push"}}})
		v.decide("e", "email", T0, Allowed)
		v.decide("p", "push", T0.Add(900*time.Millisecond), Allowed) // the same second
		// Each section has one send of that second of two: either's.
		v.refund("e", RefundNothing)
		v.refund("p", RefundNothing)
		v.decide("e2", "email", T0.Add(time.Minute), Capped) // kept: over-counted
		// Sends in other seconds are told apart.
		v.decide("p2", "push", T0.Add(day+time.Minute), Allowed)
		v.decide("e3", "email", T0.Add(day+2*time.Minute), Allowed)
		v.refund("p2", RefundApplied)
		v.decide("p3", "push", T0.Add(day+3*time.Minute), Allowed)
		v.decide("e4", "email", T0.Add(day+4*time.Minute), Capped)
	})
	t.Run("same scope", func(t *testing.T) {
		v := newRefundEnv(t, c, Limit{Name: "daily", Window: day, Max: 2})
		v.decide("a", "email", T0, Allowed)
		v.decide("b", "push", T0, Allowed)
		v.decide("x", "email", T0.Add(time.Minute), Capped)
		v.refund("a", RefundApplied) // both were counted there: one goes
		at := T0.Unix()
		if got := v.times(); len(got) != 1 || len(got[0]) != 1 || got[0][0] != at {
			t.Fatalf("after one refund: %v, want [[%d]]", got, at)
		}
		v.refund("a", RefundNothing)
		v.refund("b", RefundNothing) // one of two left: whose is unknown
		v.decide("c", "email", T0.Add(2*time.Minute), Allowed)
		v.decide("d", "email", T0.Add(3*time.Minute), Capped)
	})
	t.Run("partly", func(t *testing.T) {
		v := newRefundEnv(t, c, Limit{Name: "daily", Window: day, Max: 2},
			Limit{Name: "email", Window: day, Max: 1, Where: Where{Channels: []string{"email"}}})
		v.decide("e", "email", T0, Allowed)
		v.decide("p", "push", T0, Allowed)
		v.refund("e", RefundApplied) // from daily (both there), not from email (one of two)
		v.decide("e2", "email", T0.Add(time.Minute), Capped)
		v.decide("p2", "push", T0.Add(2*time.Minute), Allowed)
		v.decide("p3", "push", T0.Add(3*time.Minute), Capped)
	})
}

func testRefundInvalid(t *testing.T, c redis.UniversalClient) {
	v := newRefundEnv(t, c, Limit{Name: "daily", Window: day, Max: 1})
	v.decide("a", "", T0, Allowed)
	out, err := v.e.Refund(context.Background(), []RefundRequest{{UserID: 7}, {UserID: 7, IntentID: strings.Repeat("x", MaxIntentID+1)},
		{UserID: 7, IntentID: "a"}})
	if err != nil || len(out) != 3 {
		t.Fatalf("Refund: %v %+v", err, out)
	}
	for i, want := range []string{"intent id of 0 bytes", "intent id of 129 bytes"} {
		if !errors.Is(out[i].Err, ErrInvalidRequest) || !strings.Contains(out[i].Err.Error(), want) {
			t.Errorf("refund %d: %v, want an invalid request error with %q", i, out[i].Err, want)
		}
	}
	if out[2].Err != nil || out[2].Result != RefundApplied {
		t.Errorf("valid refund next to invalid ones: %+v", out[2])
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if out, err := v.e.Refund(ctx, []RefundRequest{{UserID: 7, IntentID: "a"}}); !errors.Is(err, context.Canceled) || out[0].Err == nil {
		t.Fatalf("Refund with a canceled context: %v %+v", err, out)
	}
	for r, want := range map[RefundResult]string{RefundApplied: "applied", RefundUnknown: "unknown", RefundNothing: "nothing", 9: "refund(9)"} {
		if r.String() != want {
			t.Errorf("RefundResult(%d) = %q, want %q", r, r, want)
		}
	}
}

// TestRefundScriptAsGo: the refund script in redis-server and in miniredis (the
// demo's gopher-lua) does what refundRecord does, on random records made to
// share seconds and digests, with unaligned digest matches and counts
// crossing the one-byte varint.
func TestRefundScriptAsGo(t *testing.T) {
	mr := miniredis.RunT(t)
	mc := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = mc.Close() })
	ctx := context.Background()
	refund, err := newRefundScript()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		c    *redis.Client
	}{{"redis-server", testenv.StartRedis(t, testenv.RedisOptions{}).Client()}, {"miniredis", mc}} {
		rng := rand.New(rand.NewPCG(*modelSeed, 11))
		results := map[RefundResult]int{}
		for i := range 3000 {
			rec, d5 := randomRefundRecord(rng)
			if rec == "" {
				c.c.HDel(ctx, "k", "f")
			} else if err := c.c.HSet(ctx, "k", "f", rec).Err(); err != nil {
				t.Fatal(err)
			}
			// Half of them give-backs ("f", or "g": attempts answered, not
			// voided), naming some of the seconds the records use (the
			// entry's own among them, or not).
			giveBack := ""
			if rng.IntN(2) == 0 {
				giveBack = string("fg"[rng.IntN(2)])
				for _, t := range []int64{1_800_000_000, 1_800_000_001, 1_800_003_600, 0x6b49d200 + 0x42} {
					if rng.IntN(2) == 0 {
						giveBack += packTime(t)
					}
				}
			}
			forget := giveBack != ""
			args := []any{"f", d5}
			if forget {
				args = append(args, giveBack, 86400)
			}
			res, err := c.c.Eval(ctx, refund.src, []string{"k"}, args...).Int64()
			if err != nil {
				t.Fatalf("%s: record %x: %v", c.name, rec, err)
			}
			got, _ := c.c.HGet(ctx, "k", "f").Result()
			want, wantRes := refundRecord(rec, d5, giveBack)
			if RefundResult(res) != wantRes || got != want {
				t.Fatalf("%s: case %d, record %x, digest %x, forget %v: script %d %x, Go %s %x", c.name, i, rec, d5, forget, res, got, wantRes, want)
			}
			if forget && wantRes != RefundUnknown && slices.Contains(entriesOf(got), d5) {
				t.Fatalf("%s: case %d: forgotten digest %x still has an entry in %x", c.name, i, d5, got)
			}
			if forget && giveBack[0] == 'g' {
				// Nothing voided: only entries the record held before.
				if wantRes == RefundUnknown && got != rec {
					t.Fatalf("%s: case %d: an answered give-back of %x that found nothing wrote %x over %x", c.name, i, d5, got, rec)
				}
				for _, e := range entryStrings(got) {
					if !slices.Contains(entryStrings(rec), e) {
						t.Fatalf("%s: case %d: record %x after an answered give-back of %x has an entry %x it did not hold", c.name, i, got, d5, e)
					}
				}
			}
			if forget && giveBack[0] == 'f' && !slices.Contains(entriesOf(got), d5) {
				// Nothing answers a late attempt Duplicate: each is voided.
				for q := 1; q < len(giveBack); q += timeSize {
					if !slices.Contains(entryStrings(got), voidDigest(d5)+giveBack[q:q+timeSize]) {
						t.Fatalf("%s: case %d: record %x after a give-back of %x does not void the attempt at %d", c.name, i, got, d5, u32(giveBack, q))
					}
				}
			}
			results[wantRes]++
		}
		t.Logf("%s: %v", c.name, results)
		if len(results) != 3 {
			t.Fatalf("%s: not every result: %v", c.name, results)
		}
	}
}

// entriesOf is the digests of a record's idempotency entries.
func entriesOf(rec string) []string {
	var out []string
	for _, e := range entryStrings(rec) {
		out = append(out, e[:digestSize])
	}
	return out
}

// entryStrings is a record's idempotency entries, digest and time.
func entryStrings(rec string) []string {
	cur := cursor{rec: rec}
	ib, sb := cur.entries()
	var out []string
	for p := ib; p < sb; p += idemEntrySize {
		out = append(out, rec[p:p+idemEntrySize])
	}
	return out
}

// randomRefundRecord is a record ("": none) and a digest to refund.
func randomRefundRecord(rng *rand.Rand) (rec, d5 string) {
	times := []int64{1_800_000_000, 1_800_000_001, 1_800_003_600, 0x6b49d200 + 0x42}
	var digests [][5]byte
	for range 3 {
		var d [5]byte
		for i := range d {
			d[i] = byte(rng.IntN(256))
		}
		digests = append(digests, d)
	}
	// Matches across entries: a digest's last byte and a time.
	var tb [4]byte
	copy(tb[:], packTime(times[0]))
	digests = append(digests, [5]byte{digests[0][4], tb[0], tb[1], tb[2], tb[3]})
	if rng.IntN(30) == 0 {
		return "", string(digests[0][:])
	}
	var r record
	ni, nt, spread := rng.IntN(7), 6, len(times)
	if rng.IntN(10) == 0 { // about 128 sends in one second: a count's varint may shrink
		ni = 128 + rng.IntN(3)
		nt, spread = ni, 1
	}
	for range ni {
		r.idem = append(r.idem, idemEntry{digest: digests[rng.IntN(len(digests))], at: times[rng.IntN(spread)]})
	}
	for s := range rng.IntN(5) {
		sec := section{id: uint32(s + 1), trimmed: rng.IntN(4) == 0}
		if rng.IntN(3) == 0 {
			sec.id |= perCampaignFlag
			sec.campaign = [3]byte{byte(rng.IntN(256)), 0, byte(s)}
		}
		n := 1 + rng.IntN(nt)
		if spread == 1 && rng.IntN(2) == 0 {
			n = nt
		}
		for range n {
			sec.times = append(sec.times, times[rng.IntN(spread)])
		}
		r.sections = append(r.sections, sec)
	}
	d := digests[rng.IntN(len(digests))]
	if rng.IntN(8) == 0 {
		d = [5]byte{1, 2, 3, 4, 5}
	}
	return string(r.encode()), string(d[:])
}

// engineSide answers with an engine; any error but an invalid request's
// fails the test.
func engineSide(t *testing.T, e *Engine) refundSide {
	ctx := context.Background()
	check := func(what string, err error, errs ...error) {
		for _, e := range errs {
			if err == nil && e != nil && !errors.Is(e, ErrInvalidRequest) {
				err = e
			}
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	return refundSide{
		decide: func(reqs []Request) []Decision {
			out, err := e.Decide(ctx, reqs)
			for _, d := range out {
				check("Decide", err, d.Err)
			}
			return out
		},
		refund: func(reqs []RefundRequest) []RefundOutcome {
			out, err := e.Refund(ctx, reqs)
			for _, o := range out {
				check("Refund", err, o.Err)
			}
			return out
		},
	}
}

// oneByOne answers one request after another (Memory, the model); a
// refund Engine.Refund refuses as invalid is answered so.
func oneByOne(decide func(*Request) Decision, refund func(RefundRequest) RefundResult) refundSide {
	return refundSide{
		decide: func(reqs []Request) []Decision {
			out := make([]Decision, len(reqs))
			for i := range reqs {
				out[i] = decide(&reqs[i])
			}
			return out
		},
		refund: func(reqs []RefundRequest) []RefundOutcome {
			out := make([]RefundOutcome, len(reqs))
			for i, r := range reqs {
				if n := len(r.IntentID); n == 0 || n > MaxIntentID {
					out[i].Err = ErrInvalidRequest
				} else {
					out[i].Result = refund(r)
				}
			}
			return out
		},
	}
}

// TestRefundMemoryAsRedis: the same random traffic and refunds (bypasses,
// moves and sweeps included) through Redis and Memory: the same answers,
// and every record and bucket mark equal byte for byte.
func TestRefundMemoryAsRedis(t *testing.T) {
	c := testenv.StartRedis(t, testenv.RedisOptions{}).Client()
	idem := 2 * time.Hour
	e := newEngine(t, c, Options{IdempotencyWindow: idem, KeyPrefix: "refmem", PolicyVersion: "v-test"})
	mem := newTestMemory(t, e.set.Load().rules, idem)
	seed := *modelSeed + 50
	g := newGen(t, seed, 300, spring)
	g.invalid = true
	refundTraffic(t, g, seed, 8000, engineSide(t, e), oneByOne(mem.Decide, mem.Refund), func(uint64) bool { return true })
	sameAsRedis(t, c, mem, "refmem")
}
