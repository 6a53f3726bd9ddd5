package pacing_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/testenv"
)

// slowLeaser is Redis' leases with every other answer late (a loaded
// machine or network: the answer, or the worker's wake-up, comes well
// after Redis granted the tokens). It records each grant.
type slowLeaser struct {
	*pacing.RedisLeaser
	late   time.Duration
	mu     sync.Mutex
	grants []slowGrant
}

type slowGrant struct {
	back  time.Time // when the worker had the answer (the wall clock)
	lease pacing.Lease
}

func (l *slowLeaser) Lease(ctx context.Context, r pacing.LeaseRequest) (pacing.Lease, error) {
	got, err := l.RedisLeaser.Lease(ctx, r)
	l.mu.Lock()
	if len(l.grants)%2 == 1 {
		time.Sleep(l.late)
	}
	if err == nil && got.Granted > 0 {
		l.grants = append(l.grants, slowGrant{back: time.Now(), lease: got})
	}
	l.mu.Unlock()
	return got, err
}

// release is one Release's tokens, at its time on the wall clock.
type release struct {
	at time.Time
	k  int
}

// TestLateAnswersSpendNoStaleTokens: a worker whose lease answers come 40
// ms late (every other one) releases no token more than 10 ms after the
// time the bucket granted it for (Redis' clock when it granted, plus the
// wait), and none before it: a late grant is dropped, not released late,
// which would let any second's releases go above 1.01 x the rate plus the
// burst. The worker's clock need not read Redis' time: it is hours ahead
// in one run and is set forward by an hour halfway through (as NTP or the
// demo's clock may do); the worker follows Redis' clock through both.
func TestLateAnswersSpendNoStaleTokens(t *testing.T) {
	for _, shift := range []time.Duration{0, 3 * time.Hour} {
		t.Run(fmt.Sprint("clock ahead by ", shift), func(t *testing.T) {
			r := testenv.StartRedis(t, testenv.RedisOptions{})
			leaser := &slowLeaser{RedisLeaser: &pacing.RedisLeaser{Client: r.Client(), Prefix: "t"}, late: 40 * time.Millisecond}
			var ahead atomic.Int64 // the worker's clock minus the wall clock
			ahead.Store(int64(shift))
			p, err := pacing.New(pacing.Options{Leaser: leaser, Now: func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }})
			if err != nil {
				t.Fatal(err)
			}
			p.SetBudgets(budgetSet(t, 1000, 10))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var rels []release
			for i := range 20 {
				if i == 10 && shift > 0 {
					ahead.Add(int64(time.Hour))
				}
				k, at, err := p.Release(ctx, "push", 1, 100, true)
				if err != nil {
					t.Fatalf("release %d: %v", i, err)
				}
				rels = append(rels, release{at.Add(-time.Duration(ahead.Load())), k})
			}
			checkReleases(t, leaser, rels)
		})
	}
}

// checkReleases: each release took the tokens of the last grant answered
// before it (a grant is 10 tokens, a release takes them all), within 10
// ms after their time on Redis' clock and not before it, give or take the
// worker's reading of Redis' clock (to the millisecond, and off by at
// most half the round trip it was read with: 3 ms allowed, a loaded
// machine's; the late answers are 40 ms).
func checkReleases(t *testing.T, leaser *slowLeaser, rels []release) {
	t.Helper()
	leaser.mu.Lock()
	defer leaser.mu.Unlock()
	bad := 0
	for _, rel := range rels {
		var g *slowGrant
		for i := range leaser.grants {
			if !leaser.grants[i].back.After(rel.at) {
				g = &leaser.grants[i]
			}
		}
		if g == nil {
			t.Fatalf("a release at %s before any grant", rel.at.Format(time.RFC3339Nano))
		}
		valid := g.lease.At.Add(time.Duration(g.lease.ValidMs) * time.Millisecond)
		if d := rel.at.Sub(valid); d > 13*time.Millisecond || d < -3*time.Millisecond {
			t.Errorf("%d tokens released %v after their time (Redis' %s + %d ms); want 0 to 10 ms", rel.k, d, g.lease.At.Format(time.RFC3339Nano), g.lease.ValidMs)
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d releases spent tokens outside their time", bad, len(rels))
	}
}
