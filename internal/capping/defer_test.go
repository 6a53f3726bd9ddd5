package capping

import (
	"context"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/testenv"
)

// deferRules are the test rules with deferral: limits that defer (one
// whose max_defer is short enough to expire) and quiet hours for a segment.
func deferRules() Rules {
	r := testRules()
	set := func(seg, limit string, d time.Duration) {
		for i := range r.Segments {
			for j := range r.Segments[i].Limits {
				if l := &r.Segments[i].Limits[j]; r.Segments[i].Name == seg && l.Name == limit {
					l.OnCap, l.MaxDefer = Defer, d
				}
			}
		}
	}
	set("new", "daily", 36*time.Hour)
	set("active", "weekly", 2*time.Hour)
	set("active", "daily", 30*time.Hour)
	set("chatty", "push-10m", time.Hour)
	r.Default.Limits[0].OnCap, r.Default.Limits[0].MaxDefer = Defer, 24*time.Hour
	for i := range r.Segments {
		if r.Segments[i].Name == "chatty" {
			r.Segments[i].QuietHours = &QuietHours{From: 22 * 60, To: 7*60 + 30, Channels: []string{"push", "sms"}, Jitter: 10 * time.Minute}
		}
	}
	return r
}

// refHold is the model of deferral, written apart from defer.go: quiet
// hours first (nothing is counted), then the reference model's decision,
// deferred when the capping limit says so and its slot frees within
// max_defer of the first deferral.
func (m *refModel) refHold(r Request) Decision {
	if m.invalid(&r) {
		return Decision{Err: ErrInvalidRequest}
	}
	pol := m.rules.PolicyOf(r.Segment)
	if q := pol.QuietHours; q != nil && (q.IncludeExempt || !m.rules.IsExempt(r.Category)) {
		ch := len(q.Channels) == 0
		for _, c := range q.Channels {
			ch = ch || c == r.Channel
		}
		local := r.At.In(m.location(&r))
		mins := local.Hour()*60 + local.Minute()
		if in := (q.From <= q.To && mins >= q.From && mins < q.To) || (q.From > q.To && (mins >= q.From || mins < q.To)); ch && in {
			end := local
			for end.Hour()*60+end.Minute() != q.To || end.Second() != 0 || !end.After(local) {
				end = end.Truncate(time.Minute).Add(time.Minute)
			}
			h := fnv.New64a()
			h.Write([]byte(r.IntentID))
			j := time.Duration(h.Sum64()%uint64(q.Jitter/time.Second)) * time.Second
			return Decision{Outcome: Deferred, At: r.At, NotBefore: end.Add(j), Reason: ReasonQuietHours}
		}
	}
	d := m.decide(r)
	if d.Outcome != Capped || d.RetryAfter.Never {
		return d
	}
	for _, l := range pol.Limits {
		if l.Name != d.Limit || l.OnCap != Defer {
			continue
		}
		first := r.DeferredSince
		if first.IsZero() {
			first = r.At
		}
		nb := r.At.Add(d.RetryAfter.In)
		if nb.Sub(first) > l.MaxDefer {
			if !r.DeferredSince.IsZero() {
				d.Reason = ReasonDeferExpired
			}
			return d
		}
		d.Outcome, d.NotBefore, d.Reason = Deferred, nb, ReasonCap
	}
	return d
}

// TestDeferModel decides random traffic, with deferred intents coming back
// at their not-before as the delay tiers bring them, and compares every
// decision with the model: outcome, limit, not-before, reason.
func TestDeferModel(t *testing.T) {
	rdb := testenv.StartRedis(t, testenv.RedisOptions{})
	e := newEngine(t, rdb.Client(), Options{Rules: deferRules(), IdempotencyWindow: 48 * time.Hour})
	m := newRefModel(e.set.Load().rules, 48*time.Hour)
	g := newGen(t, *modelSeed, 200, spring)
	g.noBypass = true
	type waiting struct{ r Request }
	var queue []waiting
	counts := map[string]int{}
	for b := 0; b < 300; b++ {
		g.step(m.rules)
		reqs := g.batch(1 + g.rng.IntN(60))
		// The deferred intents due by now come back, decided now.
		rest := queue[:0]
		for _, w := range queue {
			if w.r.At.After(g.now) {
				rest = append(rest, w)
				continue
			}
			r := w.r
			r.At = g.now
			reqs = append(reqs, r)
		}
		queue = rest
		got, err := e.Decide(context.Background(), reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range reqs {
			want := m.refHold(r)
			if err := compare(got[i], want, compareOpts{}); err != nil || !got[i].NotBefore.Equal(want.NotBefore) || got[i].Reason != want.Reason {
				t.Fatalf("batch %d request %d %+v:\ngot  %+v\nwant %+v\n%v", b, i, r, got[i], want, err)
			}
			counts[fmt.Sprint(got[i].Outcome, "/", got[i].Reason)]++
			if got[i].Outcome == Deferred {
				r.DeferredSince = r.At
				if !reqs[i].DeferredSince.IsZero() {
					r.DeferredSince = reqs[i].DeferredSince
				}
				r.At = got[i].NotBefore // when it comes back
				queue = append(queue, waiting{r})
			}
		}
	}
	t.Logf("outcomes: %v", counts)
	for _, k := range []string{"deferred/cap", "deferred/quiet-hours", "capped/defer-expired", "allowed/"} {
		if counts[k] == 0 {
			t.Errorf("no %s decision: the test does not exercise it (%v)", k, counts)
		}
	}
}

// TestDeferralNext: a Deferred decision counts one more and the first one
// starts Since at its time; a later one keeps Since, and any other outcome
// changes nothing.
func TestDeferralNext(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 16, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	for _, tc := range []struct {
		name string
		from Deferral
		d    Decision
		want Deferral
	}{
		{"first deferral", Deferral{}, Decision{Outcome: Deferred, At: t0}, Deferral{Count: 1, Since: t0}},
		{"deferred again", Deferral{Count: 1, Since: t0}, Decision{Outcome: Deferred, At: t1}, Deferral{Count: 2, Since: t0}},
		{"allowed when due", Deferral{Count: 2, Since: t0}, Decision{Outcome: Allowed, At: t1}, Deferral{Count: 2, Since: t0}},
		{"expired", Deferral{Count: 1, Since: t0}, Decision{Outcome: Capped, At: t1, Reason: ReasonDeferExpired}, Deferral{Count: 1, Since: t0}},
		{"never deferred", Deferral{}, Decision{Outcome: Allowed, At: t0}, Deferral{}},
	} {
		if got := tc.from.Next(&tc.d); got.Count != tc.want.Count || !got.Since.Equal(tc.want.Since) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
