package capping

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/capper-dev/capper/internal/testenv"
)

// v1Driver decides intents with capper v1's sliding_log script and policy
// (daily 3 and weekly 10 over every channel, sms-weekly 1 on a tracked sms
// log), as a v1 worker did.
type v1Driver struct {
	c   redis.UniversalClient
	sha string
}

func newV1Driver(t *testing.T, c redis.UniversalClient) *v1Driver {
	s := newScript(v1LogSrc)
	if err := c.ScriptLoad(context.Background(), s.src).Err(); err != nil {
		t.Fatal(err)
	}
	return &v1Driver{c: c, sha: s.sha}
}

func (v *v1Driver) decide(t *testing.T, reqs []Request) []bool {
	ctx := context.Background()
	dayMS, weekMS := day.Milliseconds(), (7 * day).Milliseconds()
	pipe := v.c.Pipeline()
	cmds := make([]*redis.Cmd, len(reqs))
	for i, r := range reqs {
		d := digest(r.IntentID)
		now := r.At.UnixMilli()
		base := "v1:{" + strconv.FormatUint(r.UserID, 10) + "}"
		keys := []string{base}
		smsKey, chRet := "0", int64(0)
		if r.Channel == "sms" {
			keys, smsKey, chRet = append(keys, base+":sms"), "2", weekMS
		}
		cmds[i] = pipe.EvalSha(ctx, v.sha, keys, string(d[:]), now, now-weekMS, weekMS, now-chRet, chRet,
			"1", now-dayMS+1, 3, dayMS, "1", now-weekMS+1, 10, weekMS, smsKey, now-weekMS+1, 1, weekMS)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	out := make([]bool, len(reqs))
	for i, cmd := range cmds {
		res, err := cmd.Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = res[0] == codeAllowed
	}
	return out
}

// v2Rules are v1's policy in v2 terms, plus a limit v1 could not express
// (it starts empty).
func v2Rules() Rules {
	r := testOptions(Options{}).Rules
	r.Segments = nil
	r.Default = Policy{Limits: []Limit{
		{Name: "daily", Window: day, Max: 3},
		{Name: "weekly", Window: 7 * day, Max: 10},
		{Name: "sms-weekly", Window: 7 * day, Max: 1, Where: Where{Channels: []string{"sms"}}},
		{Name: "promo-day", Calendar: Day, Max: 1, Where: Where{Tags: []string{"promo"}}},
	}}
	return r
}

// TestMigrateV1 fills Redis through capper v1's script, migrates, and goes on
// with this engine: every decision after the migration is the model's, fed
// with the sends v1 allowed (a user's counts survive the upgrade). A v1 worker
// and a v2 one would count apart, hence the documented step: stop the fleet,
// migrate, start the new version.
func TestMigrateV1(t *testing.T) {
	for _, mode := range []string{"single", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			var c redis.UniversalClient
			if mode == "single" {
				c = testenv.StartRedis(t, testenv.RedisOptions{}).Client()
			} else {
				c = testenv.StartCluster(t, 3).Client()
			}
			ctx := context.Background()
			v1 := newV1Driver(t, c)
			e := newEngine(t, c, Options{Rules: v2Rules(), KeyPrefix: "v2", IdempotencyWindow: 6 * time.Hour})
			m := newRefModel(e.set.Load().rules, 6*time.Hour)
			rng := rand.New(rand.NewPCG(7, 8))
			at := T0
			users := 150
			mk := func(n int, tags bool) []Request {
				reqs := make([]Request, n)
				for i := range reqs {
					at = at.Add(time.Duration(rng.IntN(40_000)) * time.Millisecond)
					u := uint64(rng.IntN(users)) * 7
					reqs[i] = Request{UserID: u, IntentID: fmt.Sprint("i-", u, "-", rng.IntN(40)), Channel: testChannels[rng.IntN(4)],
						Campaign: "c", Category: "marketing", At: at}
					if tags && rng.IntN(3) == 0 {
						reqs[i].Tags = []string{"promo"}
					}
				}
				return reqs
			}
			// Three days of v1.
			allowed := 0
			for range 40 {
				reqs := mk(150, false)
				for i, ok := range v1.decide(t, reqs) {
					if ok {
						allowed++
						s := refSend{at: reqs[i].At.Unix(), r: reqs[i]}
						u := m.user(reqs[i].UserID)
						u.sends, u.writes = append(u.sends, s), append(u.writes, s)
					}
				}
			}
			if _, err := c.Set(ctx, "v1:{9}:sw:86400000", "x", 0).Result(); err != nil { // a sliding_window key
				t.Fatal(err)
			}
			dry, err := e.MigrateV1(ctx, MigrateOptions{FromPrefix: "v1", At: at, DryRun: true})
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := c.Keys(ctx, "v2:*").Result(); len(n) != 0 {
				t.Fatalf("a dry run wrote %d keys", len(n))
			}
			rep, err := e.MigrateV1(ctx, MigrateOptions{FromPrefix: "v1", At: at})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d allowed by v1; migration: %+v", allowed, rep)
			if rep.Users != users || rep.Migrated == 0 || rep.Migrated != dry.Migrated || rep.Sends != dry.Sends || rep.WindowKeys != 1 ||
				len(rep.FromLog) != 1 || len(rep.FromChannel) != 1 || len(rep.Empty) != 1 {
				t.Fatalf("report %+v (dry run %+v)", rep, dry)
			}
			// Running it again changes nothing.
			if _, err := e.MigrateV1(ctx, MigrateOptions{FromPrefix: "v1", At: at}); err != nil {
				t.Fatal(err)
			}
			// Two more days, on v2, compared with the model.
			n := 0
			for b := range 30 {
				reqs := mk(150, true)
				got, err := e.Decide(ctx, reqs)
				if err != nil {
					t.Fatal(err)
				}
				for i, r := range reqs {
					want := m.decide(r)
					if err := compare(got[i], want, compareOpts{}); err != nil {
						t.Fatalf("batch %d request %d %+v: %v", b, i, r, err)
					}
					if want.Outcome == Capped || want.Outcome == Duplicate {
						n++
					}
				}
			}
			if n == 0 {
				t.Fatal("no capped or duplicate answer after the migration: the history was not exercised")
			}
			checkStored(t, c, e, m)
		})
	}
}
