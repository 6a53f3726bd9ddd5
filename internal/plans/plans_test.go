package plans_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/plans"
	"github.com/capper-dev/capper/internal/policy"
	"github.com/capper-dev/capper/internal/testenv"
)

const testPolicy = `
channels: [push, email, sms]
categories: [marketing, transactional]
exempt_categories: [transactional]
default_policy:
  limits:
    - {name: daily, calendar: day, max: 1}
`

func rules(t *testing.T) capping.Rules {
	t.Helper()
	d, err := policy.Parse([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	r, ps := d.Rules()
	if err := ps.Err(); err != nil {
		t.Fatal(err)
	}
	return r
}

const goodPlan = `
campaign: cart-rescue
priority: high
starts: 2026-11-24T18:00:00Z
ends: 2026-11-24T20:00:00Z
message: {channel: push, category: marketing, tags: [cart]}
audience: [users.csv]
`

// TestCheck: every problem of a plan is reported at its key.
func TestCheck(t *testing.T) {
	for _, c := range []struct {
		name, edit, want string
	}{
		{"unknown channel", "channel: push,channel: fax", `message.channel: "fax" is not one of the policy's channels (push, email, sms)`},
		{"ends before starts", "ends: 2026-11-24T20:00:00Z,ends: 2026-11-24T17:00:00Z", "ends: 2026-11-24T17:00:00Z is not after starts (2026-11-24T18:00:00Z)"},
		{"empty window", "ends: 2026-11-24T20:00:00Z,ends: 2026-11-24T18:00:00Z", "ends: 2026-11-24T18:00:00Z is not after starts"},
		{"unknown priority", "priority: high,priority: urgent", "priority: "},
		{"priority out of range", "priority: high,priority: 101", "priority: "},
		{"unknown category", "category: marketing,category: news", `message.category: "news" is not one of the policy's categories`},
		{"exempt category", "category: marketing,category: transactional", `message.category: "transactional" is exempt`},
		{"no campaign", "campaign: cart-rescue,campaign: ''", "campaign: must be 1 to 256 bytes, got 0"},
		{"no audience", "audience: [users.csv],audience: []", "audience: is required"},
		{"bad tag", "tags: [cart],tags: ['']", `message.tags[0]: "" must be 1 to`},
	} {
		t.Run(c.name, func(t *testing.T) {
			from, to, _ := strings.Cut(c.edit, ",")
			src := strings.Replace(goodPlan, from, to, 1)
			if src == goodPlan {
				t.Fatalf("edit %q changed nothing", c.edit)
			}
			s, err := plans.ParseSpec([]byte(src))
			if err != nil {
				t.Fatal(err)
			}
			_, ps := s.Check(rules(t))
			if err := ps.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
		})
	}
	s, err := plans.ParseSpec([]byte(goodPlan))
	if err != nil {
		t.Fatal(err)
	}
	p, ps := s.Check(rules(t))
	if err := ps.Err(); err != nil || p != capping.High {
		t.Fatalf("good plan: priority %d, %v", p, err)
	}
	if _, err := plans.ParseSpec([]byte(goodPlan + "audiance: [x]\n")); err == nil || !strings.Contains(err.Error(), "line 8") {
		t.Fatalf("unknown key: %v, want an error naming line 8", err)
	}
}

func stores(t *testing.T) map[string]objstore.Store {
	t.Helper()
	s3 := testenv.StartS3(t, "plans")
	s3.SetEnv(t)
	st, err := objstore.Open(context.Background(), "s3://plans/store", objstore.Options{S3: objstore.S3Options{
		Region: s3.Region, Endpoint: s3.URL, UsePathStyle: true}})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]objstore.Store{"dir": mustOpen(t, t.TempDir()), "s3": st}
}

func mustOpen(t *testing.T, dir string) objstore.Store {
	t.Helper()
	st, err := objstore.Open(context.Background(), dir, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

var t0 = time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC)

// publish publishes a plan of users ids, checked like the CLI's.
func publish(t *testing.T, st objstore.Store, campaign, prio string, starts, ends time.Time, ids ...uint32) *plans.Manifest {
	t.Helper()
	s := &plans.Spec{Campaign: campaign, Priority: prio, Starts: starts, Ends: ends,
		Message: plans.Message{Channel: "push"}, Audience: []string{"test"}}
	p, ps := s.Check(rules(t))
	if err := ps.Err(); err != nil {
		t.Fatal(err)
	}
	data, err := roaring.BitmapOf(ids...).ToBytes()
	if err != nil {
		t.Fatal(err)
	}
	m, err := plans.Publish(context.Background(), st, s, p, data, uint64(len(ids)), t0)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func campaigns(ps []capping.Planned) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.Campaign)
	}
	return strings.Join(s, ",")
}

// TestStore: publish, load, For, replace, withdraw, on a directory and on
// S3.
func TestStore(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			if s, err := plans.Load(ctx, st, "", nil, time.Time{}); err != nil || len(s.Plans()) != 0 {
				t.Fatalf("empty store: %v, %v", s.Plans(), err)
			}
			publish(t, st, "newsletter", "low", t0.Add(time.Hour), t0.Add(2*time.Hour), 1, 2, 3)
			publish(t, st, "cart-rescue", "high", t0.Add(9*time.Hour), t0.Add(11*time.Hour), 2, 3, 4)
			publish(t, st, "flash", "60", t0.Add(9*time.Hour), t0.Add(10*time.Hour), 3)
			s, err := plans.Load(ctx, st, "", nil, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				user uint64
				prio capping.Priority
				at   time.Time
				want string
			}{
				{3, 0, t0, "cart-rescue,flash,newsletter"}, // highest first
				{3, capping.Low, t0, "cart-rescue,flash"},  // equal: no booking
				{3, capping.Normal, t0, "cart-rescue,flash"},
				{3, 60, t0, "cart-rescue"},
				{3, capping.High, t0, ""},
				{1, capping.Normal, t0, ""},
				{4, capping.Normal, t0, "cart-rescue"},
				{5, capping.Low, t0, ""},
				{3, 0, t0.Add(2 * time.Hour), "cart-rescue,flash"}, // newsletter ended
				{3, capping.Low, t0.Add(11 * time.Hour), ""},
				{1 << 33, capping.Low, t0, ""},
			} {
				if got := campaigns(s.For(nil, c.user, c.prio, c.at)); got != c.want {
					t.Errorf("For(user %d, priority %d, %s) = %q, want %q", c.user, c.prio, c.at.Format(time.TimeOnly), got, c.want)
				}
			}
			// A new plan of a campaign replaces its old one; the others are
			// reused, not read again.
			publish(t, st, "flash", "60", t0.Add(9*time.Hour), t0.Add(10*time.Hour), 5)
			s2, err := plans.Load(ctx, st, "", s, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if got := campaigns(s2.For(nil, 5, capping.Low, t0)); got != "flash" {
				t.Errorf("after republishing flash: user 5 has %q", got)
			}
			if s2.Plans()[0] != s.Plans()[0] {
				t.Errorf("cart-rescue was read again, not reused")
			}
			if err := plans.Withdraw(ctx, st, "cart-rescue", t0); err != nil {
				t.Fatal(err)
			}
			if err := plans.Withdraw(ctx, st, "cart-rescue", t0); err == nil || !strings.Contains(err.Error(), `no active plan of campaign "cart-rescue"`) {
				t.Errorf("second withdrawal: %v", err)
			}
			s3, err := plans.Load(ctx, st, "", s2, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if got := campaigns(s3.For(nil, 3, 0, t0)); got != "newsletter" {
				t.Errorf("after withdrawing cart-rescue: user 3 has %q", got)
			}
			// A worker loads only what has not ended; a replay (zero time)
			// everything, the older set too.
			if s4, err := plans.Load(ctx, st, "", nil, t0.Add(5*time.Hour)); err != nil || len(s4.Plans()) != 1 {
				t.Errorf("at 14:00: %d plans (%v), want flash only", len(s4.Plans()), err)
			}
			if s5, err := plans.Load(ctx, st, s.Version(), nil, time.Time{}); err != nil || len(s5.Plans()) != 3 {
				t.Errorf("set %s: %d plans (%v), want 3", s.Version(), len(s5.Plans()), err)
			}
			// An ended plan stays Retention after the latest end.
			publish(t, st, "later", "high", t0.Add(plans.Retention), t0.Add(plans.Retention+3*time.Hour), 9)
			idx, err := plans.ReadIndex(ctx, st)
			if err != nil {
				t.Fatal(err)
			}
			var kept []string
			for _, r := range idx.Plans {
				kept = append(kept, r.Campaign)
			}
			if got := strings.Join(kept, ","); got != "flash,later" {
				t.Errorf("after a plan %s later: the index keeps %s, want flash,later (newsletter ended over %s before)", plans.Retention, got, plans.Retention)
			}
		})
	}
}

// TestBadPlanNeverReplaces: a set with a plan that does not verify (its
// audience changed, or a manifest that lies) is refused, counted and
// named, and the set in use stays.
func TestBadPlanNeverReplaces(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			reg := prometheus.NewRegistry()
			w, err := plans.NewWatcher(plans.WatcherOptions{Store: st, Interval: time.Second, Registerer: reg,
				Now: func() time.Time { return t0 }})
			if err != nil {
				t.Fatal(err)
			}
			publish(t, st, "cart-rescue", "high", t0.Add(9*time.Hour), t0.Add(11*time.Hour), 2, 3, 4)
			if err := w.Poll(ctx); err != nil {
				t.Fatal(err)
			}
			good := w.Current().Load()
			m := publish(t, st, "flash", "60", t0.Add(9*time.Hour), t0.Add(10*time.Hour), 3)
			other, _ := roaring.BitmapOf(7).ToBytes()
			if err := st.Put(ctx, m.Audience.Key, bytes.NewReader(other)); err != nil {
				t.Fatal(err)
			}
			err = w.Poll(ctx)
			if err == nil || !strings.Contains(err.Error(), `plan `+m.Version+` of campaign "flash"`) ||
				!strings.Contains(err.Error(), "bytes, the manifest says") && !strings.Contains(err.Error(), "sha256") {
				t.Fatalf("poll with a changed audience: %v", err)
			}
			if w.Current().Load() != good {
				t.Fatal("a set with a bad plan replaced the one in use")
			}
			// The same size, other bits: the sha256 catches it.
			same := roaring.BitmapOf(4)
			data, _ := same.ToBytes()
			if len(data) != len(other) {
				t.Fatalf("test needs audiences of one size: %d, %d", len(data), len(other))
			}
			m2 := publish(t, st, "flash", "60", t0.Add(9*time.Hour), t0.Add(10*time.Hour), 3)
			if err := st.Put(ctx, m2.Audience.Key, bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
			if err := w.Poll(ctx); err == nil || !strings.Contains(err.Error(), "audience sha256 is") {
				t.Fatalf("poll with an audience of another sha256: %v", err)
			}
			if w.Current().Load() != good {
				t.Fatal("a set with a bad plan replaced the one in use")
			}
			if got := value(t, reg, "capper_plan_load_failures_total"); got != 2 {
				t.Fatalf("capper_plan_load_failures_total = %v, want 2", got)
			}
			// Published again, whole: it is swapped in.
			publish(t, st, "flash", "60", t0.Add(9*time.Hour), t0.Add(10*time.Hour), 3)
			if err := w.Poll(ctx); err != nil {
				t.Fatal(err)
			}
			if got := campaigns(w.Current().Load().For(nil, 3, capping.Low, t0)); got != "cart-rescue,flash" {
				t.Fatalf("after a good publish: %q", got)
			}
			if n := value(t, reg, "capper_plans_active"); n != 2 {
				t.Fatalf("capper_plans_active = %v, want 2", n)
			}
		})
	}
}

// value is the value of the counter or gauge name in reg (0: none).
func value(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return 0
}

// TestWatcherDropsEnded: a plan whose window ended leaves the set in use at
// the next poll, LATEST unchanged, and a worker loads only plans in force.
func TestWatcherDropsEnded(t *testing.T) {
	st := mustOpen(t, t.TempDir())
	ctx := context.Background()
	publish(t, st, "morning", "high", t0, t0.Add(time.Hour), 1, 2)
	publish(t, st, "evening", "high", t0.Add(9*time.Hour), t0.Add(10*time.Hour), 2, 3)
	now := t0
	reg := prometheus.NewRegistry()
	w, err := plans.NewWatcher(plans.WatcherOptions{Store: st, Interval: time.Second, Registerer: reg, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(w.Current().Load().Plans()); n != 2 || value(t, reg, "capper_plans_memory_bytes") == 0 {
		t.Fatalf("%d plans, %v bytes", n, value(t, reg, "capper_plans_memory_bytes"))
	}
	now = t0.Add(2 * time.Hour)
	if got := value(t, reg, "capper_plans_active"); got != 1 {
		t.Fatalf("capper_plans_active = %v after morning ended, want 1", got)
	}
	if err := w.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	s := w.Current().Load()
	if got := campaigns(s.For(nil, 2, capping.Low, now)); len(s.Plans()) != 1 || got != "evening" {
		t.Fatalf("after the next poll: %d plans, user 2 has %q; want evening only", len(s.Plans()), got)
	}
	// A worker started now loads evening only.
	w2, _ := plans.NewWatcher(plans.WatcherOptions{Store: st, Interval: time.Second, Now: func() time.Time { return now }})
	if err := w2.Poll(ctx); err != nil || len(w2.Current().Load().Plans()) != 1 {
		t.Fatalf("a new watcher: %v, %d plans", err, len(w2.Current().Load().Plans()))
	}
}
