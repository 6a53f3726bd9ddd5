package capping

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/capper-dev/capper/internal/testenv"
)

// windowModel is a pure-Go reference of sliding_window: counters per
// sub-interval, per user and (window, channel). The retry-after is found by
// bisection on the estimate (non-increasing in time when nothing is added),
// not by the script's walk over sub-intervals.
type windowModel struct {
	rules Rules
	subs  int
	users map[uint64]*windowUser
}

type windowUser struct {
	counters map[string]map[int64]int64 // windowSuffix -> sub-interval -> count
	allowed  map[string]int64           // intent id -> ms it was allowed at
	counted  map[string]string          // windowSuffix -> last intent id counted
	log      []allowedIntent
}

type allowedIntent struct {
	at      int64
	channel string
}

func newWindowModel(r Rules, subs int) *windowModel {
	return &windowModel{rules: r, subs: subs, users: map[uint64]*windowUser{}}
}

func (m *windowModel) user(uid uint64) *windowUser {
	u := m.users[uid]
	if u == nil {
		u = &windowUser{counters: map[string]map[int64]int64{}, allowed: map[string]int64{}, counted: map[string]string{}}
		m.users[uid] = u
	}
	return u
}

// estimate is the estimated count times s at t.
func modelEstimate(c map[int64]int64, t, w, s int64) int64 {
	lo := t - w + 1 // oldest ms inside the window
	i0 := lo / s    // t > w in the tests, so lo >= 0
	var e int64
	for i, n := range c {
		switch {
		case i > i0:
			e += s * n
		case i == i0:
			e += ((i0+1)*s - lo) * n
		}
	}
	return e
}

func (m *windowModel) decide(r Request) Decision {
	pol, final := screen(m.rules, r)
	if final != nil {
		return *final
	}
	t := r.At.UnixMilli()
	u := m.user(r.UserID)
	d := Decision{Counts: make([]int64, len(pol.Limits)), At: r.At}
	deny := -1
	for i, l := range pol.Limits {
		if !l.Applies(r.Channel) {
			continue
		}
		w := l.Window.Milliseconds()
		s := w / int64(m.subs)
		e := modelEstimate(u.counters[windowSuffix(w, l.Channel)], t, w, s)
		d.Counts[i] = (e + s - 1) / s
		if deny < 0 && e+s > int64(l.Max)*s {
			deny = i
		}
	}
	if at, ok := u.allowed[r.IntentID]; ok {
		return Decision{Outcome: Duplicate, Counts: make([]int64, len(pol.Limits)), At: time.UnixMilli(at)}
	}
	if deny >= 0 {
		l := pol.Limits[deny]
		d.Outcome, d.Limit, d.RetryAfter = Capped, l.Name, RetryAfter{Never: true}
		if l.Max > 0 {
			w := l.Window.Milliseconds()
			s := w / int64(m.subs)
			c := u.counters[windowSuffix(w, l.Channel)]
			ok := func(at int64) bool { return modelEstimate(c, at, w, s)+s <= int64(l.Max)*s }
			hi := t + 2*w + 2*s
			for i := range c {
				hi = max(hi, (i+2)*s+w)
			}
			lo := t // !ok(lo)
			for hi-lo > 1 {
				mid := lo + (hi-lo)/2
				if ok(mid) {
					hi = mid
				} else {
					lo = mid
				}
			}
			d.RetryAfter = RetryAfter{In: time.Duration(hi-t) * time.Millisecond}
		}
		return d
	}
	d.Outcome = Allowed
	u.allowed[r.IntentID] = r.At.UnixMilli()
	u.log = append(u.log, allowedIntent{t, r.Channel})
	// Every (window, channel) of any policy that counts this channel.
	for _, p := range m.rules.allPolicies() {
		for _, l := range p.Limits {
			if !l.Applies(r.Channel) {
				continue
			}
			w := l.Window.Milliseconds()
			k := windowSuffix(w, l.Channel)
			if u.counted[k] == r.IntentID {
				continue
			}
			if u.counters[k] == nil {
				u.counters[k] = map[int64]int64{}
			}
			u.counters[k][t/(w/int64(m.subs))]++
			u.counted[k] = r.IntentID
		}
	}
	return d
}

// checkBound checks the documented error bound at an allowed decision: in the
// window (t-W, t] there are at most max + floor((1-f)*c) allowed intents,
// where c is the count of the sub-interval holding t-W+1 and f the part of it
// inside the window. It counts from the recorded intents, not the counters,
// and returns how far above max the window is.
func checkBound(log []allowedIntent, t int64, l Limit, subs int) (excess int64, err error) {
	w := l.Window.Milliseconds()
	s := w / int64(subs)
	lo := t - w + 1
	i0 := lo / s
	var inWin, cs int64
	for _, a := range log {
		if l.Channel != "" && a.channel != l.Channel {
			continue
		}
		if a.at >= lo && a.at <= t {
			inWin++
		}
		if a.at/s == i0 {
			cs++
		}
	}
	inside := (i0+1)*s - lo
	bound := int64(l.Max) + (s-inside)*cs/s
	if inWin > bound {
		return 0, fmt.Errorf("limit %q: %d intents in (%d, %d], bound %d (max %d, straddling sub-interval count %d, inside %d/%d ms)",
			l.Name, inWin, t-w, t, bound, l.Max, cs, inside, s)
	}
	return inWin - int64(l.Max), nil
}

func runWindowModel(t *testing.T, e *Engine, seed uint64, intents int) {
	t.Helper()
	ctx := context.Background()
	m := newWindowModel(e.rules, e.subs)
	g := newGen(seed, 300)
	outcomes := map[Outcome]int{}
	var worst int64
	for b, done := 0, 0; done < intents; b++ {
		g.step()
		n := 1 + g.rng.IntN(200)
		reqs := g.batch(n)
		got, err := e.Decide(ctx, reqs)
		if err != nil {
			t.Fatalf("seed %d batch %d: Decide: %v", seed, b, err)
		}
		for i, r := range reqs {
			want := m.decide(r)
			pol := e.rules.PolicyOf(r.Segment)
			if err := compare(pol, r, got[i], want, compareOpts{}); err != nil {
				t.Fatalf("seed %d (-capping.seed) batch %d request %d %+v:\n%v", seed, b, i, r, err)
			}
			outcomes[got[i].Outcome]++
			if got[i].Outcome != Allowed {
				continue
			}
			g.allowed = append(g.allowed, allowedAt{r.UserID, r.At.UnixMilli()})
			for _, l := range pol.Limits {
				if !l.Applies(r.Channel) {
					continue
				}
				ex, err := checkBound(m.users[r.UserID].log, r.At.UnixMilli(), l, e.subs)
				if err != nil {
					t.Fatalf("seed %d batch %d user %d: error bound broken: %v", seed, b, r.UserID, err)
				}
				worst = max(worst, ex)
			}
		}
		done += n
	}
	t.Logf("seed %d: %d intents: %v; largest excess over max in a window: %d", seed, intents, outcomes, worst)
	for _, o := range []Outcome{Allowed, Capped, Duplicate, Exempt} {
		if outcomes[o] == 0 {
			t.Errorf("no %s decision in the run", o)
		}
	}
}

func TestSlidingWindowModel(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	for _, subs := range []int{24, 5} {
		t.Run(fmt.Sprintf("subs=%d", subs), func(t *testing.T) {
			if err := r.Client().FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			e := newEngine(t, r.Client(), Options{Algorithm: SlidingWindow, SubIntervals: subs})
			runWindowModel(t, e, *modelSeed+uint64(subs), 5000)
		})
	}
}

func TestSlidingWindowCluster(t *testing.T) {
	cl := testenv.StartCluster(t, 3)
	e := newEngine(t, cl.Client(), Options{Algorithm: SlidingWindow})
	runWindowModel(t, e, *modelSeed+7, 3000)
}

// TestSlidingWindowBurst shows the bound is tight: a burst at the end of a
// sub-interval is weighted down as the window slides over it, while every
// intent of it is still inside the window.
func TestSlidingWindowBurst(t *testing.T) {
	r := testenv.StartRedis(t, testenv.RedisOptions{})
	rules := Rules{
		Segments: []Segment{{Name: "s", Policy: Policy{Limits: []Limit{{Name: "hourly", Window: time.Hour, Max: 4}}}}},
		Default:  Policy{Limits: []Limit{{Name: "daily", Window: 24 * time.Hour, Max: 2}}},
	}
	e := newEngine(t, r.Client(), Options{Algorithm: SlidingWindow, Rules: rules, SubIntervals: 4}) // s = 15m
	ctx := context.Background()
	s := 15 * time.Minute
	base := T0.Truncate(s) // T0 starts a sub-interval
	var log []allowedIntent
	id := 0
	decide := func(at time.Time) Decision {
		id++
		d, err := e.Decide(ctx, []Request{{UserID: 7, Segment: "s", IntentID: fmt.Sprint("b", id), Channel: "push", Category: "marketing", At: at}})
		if err != nil || d[0].Err != nil {
			t.Fatalf("Decide: %v %v", err, d[0].Err)
		}
		if d[0].Outcome == Allowed {
			log = append(log, allowedIntent{at.UnixMilli(), "push"})
		}
		return d[0]
	}
	// 4 intents in the last second of the first sub-interval.
	burst := base.Add(s - time.Second)
	for i := range 4 {
		if d := decide(burst.Add(time.Duration(i) * 100 * time.Millisecond)); d.Outcome != Allowed {
			t.Fatalf("burst intent %d: %s", i, d.Outcome)
		}
	}
	if d := decide(burst.Add(400 * time.Millisecond)); d.Outcome != Capped {
		t.Fatalf("5th intent in the burst: %s, want denied", d.Outcome)
	}
	// The window now starts at the burst: its sub-interval is weighted by
	// 1s/15m, so 3 more are allowed although the 4 are still in the window.
	at := base.Add(time.Hour + s - 1001*time.Millisecond)
	allowed := 0
	for range 5 {
		if decide(at).Outcome == Allowed {
			allowed++
		}
	}
	l := rules.Segments[0].Limits[0]
	ex, err := checkBound(log, at.UnixMilli(), l, 4)
	if err != nil {
		t.Fatal(err)
	}
	// f = 1s/15m, so floor((1-f)*4) = 3: the window holds max+3.
	if allowed != 3 || ex != 3 {
		t.Fatalf("allowed %d after the burst (excess %d), want 3 (the bound, tight)", allowed, ex)
	}
}
