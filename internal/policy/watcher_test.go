package policy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/capper-dev/capper/internal/objstore"
)

const (
	storeV1  = "default_policy:\n  limits: [{name: daily, window: 24h, max: 1}]\n"
	storeV2  = "default_policy:\n  limits: [{name: daily, window: 24h, max: 2}]\n"
	storeBad = "default_policy:\n  limits: [{name: daily, window: 24h}]\n"
)

// TestWatcherFollowsStore: a worker's watcher follows a store's LATEST. A
// version with a problem, or whose bytes do not match the hash in its
// name, is refused and counted, the one in use stays; the next good one is
// applied.
func TestWatcherFollowsStore(t *testing.T) {
	ctx := context.Background()
	st, err := objstore.Open(ctx, t.TempDir(), objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var applied []string
	reg := prometheus.NewRegistry()
	w, err := NewWatcher(WatcherOptions{Store: st, Interval: time.Second, Registerer: reg,
		Apply: func(_ context.Context, l *Loaded) error { applied = append(applied, l.Version); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Poll(ctx); err == nil {
		t.Fatal("an empty store gave a policy")
	}
	t0 := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	v1, err := Publish(ctx, st, []byte(storeV1), t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Poll(ctx); err != nil || w.Current().Version != v1.Version {
		t.Fatalf("after publishing %s: %v, current %v", v1.Version, err, w.Current())
	}
	if err := w.Poll(ctx); err != nil || len(applied) != 1 {
		t.Fatalf("an unchanged LATEST was applied again: %v %v", err, applied)
	}
	if _, err := Publish(ctx, st, []byte(storeBad), t0.Add(time.Minute)); err == nil || !strings.Contains(err.Error(), "max: is required") {
		t.Fatalf("publish of a bad policy: %v", err)
	}
	// Written around Publish, as a hand-made upload would be.
	put := func(v, data string) {
		t.Helper()
		if err := st.Put(ctx, "policies/"+v+"/policy.yaml", strings.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		if err := st.Put(ctx, LatestKey, strings.NewReader(v+"\n")); err != nil {
			t.Fatal(err)
		}
	}
	bad := NewVersion([]byte(storeBad), t0.Add(2*time.Minute))
	put(bad, storeBad)
	if err := w.Poll(ctx); err == nil || !strings.Contains(err.Error(), "max: is required") {
		t.Fatalf("bad version: %v", err)
	}
	corrupt := NewVersion([]byte(storeV2), t0.Add(3*time.Minute))
	put(corrupt, storeV2+"# changed after publishing\n")
	if err := w.Poll(ctx); err == nil || !strings.Contains(err.Error(), "does not match the version") {
		t.Fatalf("corrupt version: %v", err)
	}
	if w.Current().Version != v1.Version || len(applied) != 1 {
		t.Fatalf("a refused version replaced %s: %v", v1.Version, applied)
	}
	if f := counter(t, reg, "capper_policy_load_failures_total"); f != 3 {
		t.Fatalf("failures %v, want 3 (empty store, bad, corrupt)", f)
	}
	v2, err := Publish(ctx, st, []byte(storeV2), t0.Add(4*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Poll(ctx); err != nil || w.Current().Version != v2.Version || w.Current().Rules.Default.Limits[0].Max != 2 {
		t.Fatalf("after publishing %s: %v, current %v", v2.Version, err, w.Current())
	}
	if v, err := testutil.GatherAndCount(reg, "capper_policy_info"); err != nil || v != 1 {
		t.Fatalf("capper_policy_info series %d, %v", v, err)
	}
}

// counter reads the value of a counter reg gathers.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}
