package pacing_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/pacing"
	"github.com/capper-dev/capper/internal/testenv"
)

// slowLeaser is Redis' leases with every other answer late (a loaded
// machine or network: the answer, or the worker's wake-up, comes well
// after Redis granted the tokens). It records when each call was sent.
type slowLeaser struct {
	*pacing.RedisLeaser
	late   time.Duration
	mu     sync.Mutex
	grants []slowGrant
}

type slowGrant struct {
	sent, back time.Time
	lease      pacing.Lease
}

func (l *slowLeaser) Lease(ctx context.Context, r pacing.LeaseRequest) (pacing.Lease, error) {
	sent := time.Now()
	got, err := l.RedisLeaser.Lease(ctx, r)
	l.mu.Lock()
	if len(l.grants)%2 == 1 {
		time.Sleep(l.late)
	}
	if err == nil && got.Granted > 0 {
		l.grants = append(l.grants, slowGrant{sent: sent, back: time.Now(), lease: got})
	}
	l.mu.Unlock()
	return got, err
}

// TestLateAnswersSpendNoStaleTokens: a worker whose lease answers come 40
// ms late (every other one) releases no token more than 10 ms after the
// time the bucket granted it for (the lease's time at the latest, plus its
// wait): a late grant is dropped, not released late, which would let any
// second's releases go above 1.01 x the rate plus the burst.
func TestLateAnswersSpendNoStaleTokens(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	leaser := &slowLeaser{RedisLeaser: &pacing.RedisLeaser{Client: r.Client(), Prefix: "t"}, late: 40 * time.Millisecond}
	p, err := pacing.New(pacing.Options{Leaser: leaser})
	if err != nil {
		t.Fatal(err)
	}
	p.SetBudgets(budgetSet(t, 1000, 10))
	ctx := context.Background()
	type release struct {
		at time.Time
		k  int
	}
	var rels []release
	for range 20 {
		k, at, err := p.Release(ctx, "push", 1, 100, true)
		if err != nil {
			t.Fatal(err)
		}
		rels = append(rels, release{at, k})
	}
	leaser.mu.Lock()
	defer leaser.mu.Unlock()
	late := 0
	for _, rel := range rels {
		// The pool holds one grant's tokens: the release took them from
		// the last grant answered before it.
		var g *slowGrant
		for i := range leaser.grants {
			if !leaser.grants[i].back.After(rel.at) {
				g = &leaser.grants[i]
			}
		}
		if g == nil {
			t.Fatalf("a release at %s before any grant", rel.at.Format(time.RFC3339Nano))
		}
		valid := g.sent.Add(time.Duration(g.lease.ValidMs) * time.Millisecond)
		if d := rel.at.Sub(valid); d > 10*time.Millisecond {
			t.Errorf("%d tokens released %v after their grant's time (sent %s + %d ms); at most 10 ms", rel.k, d, g.sent.Format(time.RFC3339Nano), g.lease.ValidMs)
			late++
		}
	}
	if late > 0 {
		t.Errorf("%d of %d releases spent stale tokens", late, len(rels))
	}
}
