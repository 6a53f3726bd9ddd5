package control

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// checkTargetNs is the goal for campaign control's cost per intent.
const checkTargetNs = 50

// BenchmarkCheck: the control check of one intent (Snapshot.Check, what
// the worker runs per intent before the engine; an intent with plan
// bookings also asks Stopped for each, when a campaign is stopped), with
// 10,000 campaigns in the state (a tenth stopped, a tenth paused, some
// with a send-by), for intents of campaigns with and without a record;
// prints ns/intent and its ratio to the 50 ns target.
func BenchmarkCheck(b *testing.B) {
	const campaigns = 10_000
	now := time.Date(2026, 11, 25, 18, 0, 0, 0, time.UTC)
	m := make(map[string]*Entry, campaigns)
	for i := range campaigns {
		st := Active
		switch i % 10 {
		case 0:
			st = Stopped
		case 1:
			st = Paused
		}
		r := Record{Campaign: fmt.Sprintf("campaign-%05d-spring-sale", i), State: st, Since: now.Add(-time.Hour)}
		if i%7 == 0 {
			r.SendBy = now.Add(time.Hour)
		}
		m[r.Campaign] = &Entry{Record: r}
	}
	s := newSnapshot(m, nil)
	// Intents name 20,000 campaigns: half have a record.
	rng := rand.New(rand.NewPCG(1, 2))
	names := make([]string, 4096)
	for i := range names {
		names[i] = fmt.Sprintf("campaign-%05d-spring-sale", rng.IntN(2*campaigns))
	}
	b.ReportAllocs()
	b.ResetTimer()
	var go_ int
	for i := range b.N {
		c := names[i&4095]
		if v := s.Check(c, false, time.Time{}, now, 24*time.Hour); v.Action == Go {
			go_++
		}
	}
	b.StopTimer()
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(ns, "ns/intent")
	b.ReportMetric(ns/checkTargetNs, "x-of-50ns-target")
	if go_ == 0 {
		b.Fatal("no intent went on")
	}
}
