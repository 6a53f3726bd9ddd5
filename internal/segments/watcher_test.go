package segments_test

import (
	"github.com/capper-dev/capper/internal/segbuild"
	"github.com/capper-dev/capper/internal/segments"

	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestWatcherSwapsAndSurvivesBadVersions walks a watcher through a missing
// LATEST, a first load, unchanged polls, a broken new version (retried on
// every poll while the old snapshot keeps serving) and its repair.
func TestWatcherSwapsAndSurvivesBadVersions(t *testing.T) {
	for _, sc := range storeCases() {
		t.Run(sc.name, func(t *testing.T) {
			ctx := context.Background()
			st := sc.open(t)
			reg := prometheus.NewRegistry()
			now := t0.Add(90 * time.Minute)
			var cur segments.Current
			w, err := segments.NewWatcher(segments.WatcherOptions{Interval: time.Hour, Store: st, Current: &cur, Registerer: reg, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}

			// 1. Nothing published yet.
			err = w.Poll(ctx)
			if !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("poll without LATEST: %v", err)
			}
			if f, check := metric(t, reg, "capper_snapshot_load_failures_total"), metric(t, reg, "capper_snapshot_last_check_timestamp_seconds"); f != 1 || cur.Load() != nil || check != 0 {
				t.Fatalf("failures %v, last check %v", f, check)
			}

			// 2. v1 appears.
			b1 := mustBuildCSV(t, segbuild.BuilderOptions{Segments: []string{"new", "active"}}, "1,new\n2,active\n3,active\n")
			m1, err := segbuild.Publish(ctx, st, b1, segbuild.PublishOptions{Now: fixedNow(t0)})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Poll(ctx); err != nil {
				t.Fatal(err)
			}
			if cur.Load().Version() != m1.Version || cur.Lookup(1) != "new" || metric(t, reg, "capper_snapshot_loads_total") != 1 {
				t.Fatalf("after v1: version %q lookup %q", cur.Load().Version(), cur.Lookup(1))
			}
			if check, age := metric(t, reg, "capper_snapshot_last_check_timestamp_seconds"), metric(t, reg, "capper_snapshot_age_seconds"); check != float64(now.Unix()) || age != 90*60 {
				t.Fatalf("last check %v, age %vs", check, age)
			}

			// 3. Unchanged LATEST: the manifest is not read again (it is
			// gone and the poll still succeeds) and nothing is swapped.
			deleteKey(t, st, "snapshots/"+m1.Version+"/manifest.json")
			served := cur.Load()
			for range 2 {
				if err := w.Poll(ctx); err != nil {
					t.Fatalf("unchanged poll re-read the snapshot: %v", err)
				}
			}
			if cur.Load() != served || metric(t, reg, "capper_snapshot_loads_total") != 1 {
				t.Fatal("an unchanged LATEST swapped the snapshot")
			}

			// 4. v2 is published with a truncated object: every poll fails
			// and retries, v1 keeps serving.
			b2 := mustBuildCSV(t, segbuild.BuilderOptions{Segments: []string{"new", "active"}}, "1,active\n2,new\n4,new\n")
			m2, err := segbuild.Publish(ctx, st, b2, segbuild.PublishOptions{Now: fixedNow(t0.Add(time.Hour))})
			if err != nil {
				t.Fatal(err)
			}
			bad := "snapshots/" + m2.Version + "/new.roaring"
			good := getBytes(t, st, bad)
			putBytes(t, st, bad, good[:len(good)/2])
			for i := range 2 {
				err := w.Poll(ctx)
				wantErrContains(t, err, "load snapshot "+m2.Version, "object "+bad, "size mismatch")
				if f := metric(t, reg, "capper_snapshot_load_failures_total"); f != float64(2+i) {
					t.Fatalf("failures = %v, want %d", f, 2+i)
				}
				if cur.Load() != served || cur.Lookup(1) != "new" {
					t.Fatal("a failed load replaced the serving snapshot")
				}
			}
			if err := testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(`
# HELP capper_snapshot_info The segment snapshot in use (1 for its version).
# TYPE capper_snapshot_info gauge
capper_snapshot_info{version=%q} 1
# HELP capper_snapshot_load_failures_total Polls that failed to read LATEST or to load the version it names.
# TYPE capper_snapshot_load_failures_total counter
capper_snapshot_load_failures_total 3
`, m1.Version)), "capper_snapshot_info", "capper_snapshot_load_failures_total"); err != nil {
				t.Fatal(err)
			}

			// 5. Repaired: the next poll loads v2 and swaps it in.
			putBytes(t, st, bad, good)
			now = t0.Add(2 * time.Hour)
			if err := w.Poll(ctx); err != nil {
				t.Fatal(err)
			}
			if cur.Load().Version() != m2.Version || cur.Lookup(1) != "active" || cur.Lookup(4) != "new" {
				t.Fatalf("after repair: version %q lookup(1) %q", cur.Load().Version(), cur.Lookup(1))
			}
			if err := testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(`
# HELP capper_snapshot_age_seconds Seconds since the snapshot in use was created (manifest created_at).
# TYPE capper_snapshot_age_seconds gauge
capper_snapshot_age_seconds 3600
# HELP capper_snapshot_info The segment snapshot in use (1 for its version).
# TYPE capper_snapshot_info gauge
capper_snapshot_info{version=%q} 1
# HELP capper_snapshot_last_check_timestamp_seconds Unix time of the last successful poll of LATEST.
# TYPE capper_snapshot_last_check_timestamp_seconds gauge
capper_snapshot_last_check_timestamp_seconds %d
# HELP capper_snapshot_load_failures_total Polls that failed to read LATEST or to load the version it names.
# TYPE capper_snapshot_load_failures_total counter
capper_snapshot_load_failures_total 3
# HELP capper_snapshot_loads_total Snapshots loaded and swapped in.
# TYPE capper_snapshot_loads_total counter
capper_snapshot_loads_total 2
# HELP capper_snapshot_users Users per segment in the snapshot in use.
# TYPE capper_snapshot_users gauge
capper_snapshot_users{segment="active"} 1
capper_snapshot_users{segment="new"} 2
`, m2.Version, now.Unix()))); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWatcherAcceptRejection: a snapshot the caller rejects is a failed load.
func TestWatcherAcceptRejection(t *testing.T) {
	ctx := context.Background()
	st := openDir(t, t.TempDir())
	publishSmall(t, st)
	reg := prometheus.NewRegistry()
	var cur segments.Current
	w, err := segments.NewWatcher(segments.WatcherOptions{Interval: time.Hour, Store: st, Current: &cur, Registerer: reg, Accept: func(s *segments.Snapshot) error {
		return errors.New("segment dormant is not configured")
	}})
	if err != nil {
		t.Fatal(err)
	}
	wantErrContains(t, w.Poll(ctx), "rejected: segment dormant is not configured")
	if cur.Load() != nil || metric(t, reg, "capper_snapshot_load_failures_total") != 1 {
		t.Fatal("a rejected snapshot must not be served")
	}
}

// TestWatcherRunStopsOnCancel runs the loop for real until it has loaded a
// snapshot, then cancels it.
func TestWatcherRunStopsOnCancel(t *testing.T) {
	st := openDir(t, t.TempDir())
	m := publishSmall(t, st)
	var cur segments.Current
	w, err := segments.NewWatcher(segments.WatcherOptions{Store: st, Current: &cur, Interval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	deadline := time.After(30 * time.Second) // a hang guard, not a timing assertion
	for cur.Load().Version() != m.Version {
		select {
		case <-deadline:
			t.Fatal("Run never loaded the snapshot")
		case <-time.After(time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v on cancel, want nil", err)
	}
}

func TestWatcherNeedsStoreAndRegistersOnce(t *testing.T) {
	if _, err := segments.NewWatcher(segments.WatcherOptions{Interval: time.Hour}); err == nil {
		t.Fatal("a watcher without a store must be an error")
	}
	if _, err := segments.NewWatcher(segments.WatcherOptions{Store: openDir(t, t.TempDir())}); err == nil {
		t.Fatal("a watcher without an interval must be an error")
	}
	reg := prometheus.NewRegistry()
	st := openDir(t, t.TempDir())
	if _, err := segments.NewWatcher(segments.WatcherOptions{Interval: time.Hour, Store: st, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	_, err := segments.NewWatcher(segments.WatcherOptions{Interval: time.Hour, Store: st, Registerer: reg})
	wantErrContains(t, err, "register metrics")
}

// TestLookupsDuringSwaps: readers never see anything but a whole snapshot
// while the watcher swaps versions under them (run with -race).
func TestLookupsDuringSwaps(t *testing.T) {
	ctx := context.Background()
	st := openDir(t, t.TempDir())
	var cur segments.Current
	reg := prometheus.NewRegistry()
	w, err := segments.NewWatcher(segments.WatcherOptions{Interval: time.Hour, Store: st, Current: &cur, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	// Version i puts users 0..999 in "even" or "odd" by (user+i)%2, and
	// user 5000+i in "marker": a reader that sees marker i must see the
	// matching assignment in the same snapshot.
	publish := func(i int) {
		var sb strings.Builder
		for u := range 1000 {
			seg := "even"
			if (u+i)%2 == 1 {
				seg = "odd"
			}
			fmt.Fprintf(&sb, "%d,%s\n", u, seg)
		}
		fmt.Fprintf(&sb, "%d,marker\n", 5000+i)
		b := mustBuildCSV(t, segbuild.BuilderOptions{}, sb.String())
		if _, err := segbuild.Publish(ctx, st, b, segbuild.PublishOptions{Now: fixedNow(t0.Add(timeHours(i)))}); err != nil {
			t.Fatal(err)
		}
		if err := w.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	publish(0)
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for r := range 4 {
		go func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				s := cur.Load()
				i := -1
				for v := range 10 {
					if s.Lookup(uint64(5000+v)) == "marker" {
						i = v
					}
				}
				u := uint64((n*7 + r) % 1000)
				want := "even"
				if (int(u)+i)%2 == 1 {
					want = "odd"
				}
				if got := s.Lookup(u); i < 0 || got != want {
					errs <- fmt.Errorf("snapshot %s: marker %d, Lookup(%d) = %q, want %q", s.Version(), i, u, got, want)
					return
				}
			}
		}()
	}
	for i := 1; i < 10; i++ {
		publish(i)
	}
	close(stop)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := metric(t, reg, "capper_snapshot_loads_total"); n != 10 {
		t.Fatalf("loads %v, want 10", n)
	}
}

// metric reads a gauge or counter without labels from reg.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			m := mf.GetMetric()[0]
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return 0
}
