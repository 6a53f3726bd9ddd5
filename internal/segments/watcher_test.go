package segments

import (
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
			var cur Current
			w, err := NewWatcher(WatcherOptions{Store: st, Current: &cur, Registerer: reg, Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}

			// 1. Nothing published yet.
			err = w.Poll(ctx)
			if !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("poll without LATEST: %v", err)
			}
			if w.LoadFailures() != 1 || w.LastError() == nil || cur.Load() != nil || !w.LastCheck().IsZero() {
				t.Fatalf("failures %d, last error %v", w.LoadFailures(), w.LastError())
			}

			// 2. v1 appears.
			b1 := mustBuildCSV(t, BuilderOptions{Segments: []string{"new", "active"}}, "1,new\n2,active\n3,active\n")
			m1, err := Publish(ctx, st, b1, PublishOptions{Now: fixedNow(t0)})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Poll(ctx); err != nil {
				t.Fatal(err)
			}
			if w.Version() != m1.Version || cur.Lookup(1) != "new" || w.Loads() != 1 || w.LastError() != nil {
				t.Fatalf("after v1: version %q lookup %q loads %d", w.Version(), cur.Lookup(1), w.Loads())
			}
			if !w.LastCheck().Equal(now) || w.Age() != 90*time.Minute {
				t.Fatalf("last check %s, age %s", w.LastCheck(), w.Age())
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
			if cur.Load() != served || w.Loads() != 1 {
				t.Fatal("an unchanged LATEST swapped the snapshot")
			}

			// 4. v2 is published with a truncated object: every poll fails
			// and retries, v1 keeps serving.
			b2 := mustBuildCSV(t, BuilderOptions{Segments: []string{"new", "active"}}, "1,active\n2,new\n4,new\n")
			m2, err := Publish(ctx, st, b2, PublishOptions{Now: fixedNow(t0.Add(time.Hour))})
			if err != nil {
				t.Fatal(err)
			}
			bad := "snapshots/" + m2.Version + "/new.roaring"
			good := getBytes(t, st, bad)
			putBytes(t, st, bad, good[:len(good)/2])
			for i := range 2 {
				err := w.Poll(ctx)
				wantErrContains(t, err, "load snapshot "+m2.Version, "object "+bad, "size mismatch")
				if !errors.Is(w.LastError(), err) && w.LastError().Error() != err.Error() {
					t.Fatalf("LastError %v, want %v", w.LastError(), err)
				}
				if w.LoadFailures() != uint64(2+i) {
					t.Fatalf("failures = %d, want %d", w.LoadFailures(), 2+i)
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
			if w.Version() != m2.Version || cur.Lookup(1) != "active" || cur.Lookup(4) != "new" || w.LastError() != nil {
				t.Fatalf("after repair: version %q lookup(1) %q", w.Version(), cur.Lookup(1))
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
			if got := w.Users(); got["new"] != 2 || got["active"] != 1 {
				t.Fatalf("Users() = %v", got)
			}
		})
	}
}

// TestWatcherAcceptRejection: a snapshot the caller rejects is a failed load.
func TestWatcherAcceptRejection(t *testing.T) {
	ctx := context.Background()
	st := openDir(t, t.TempDir())
	publishSmall(t, st)
	w, err := NewWatcher(WatcherOptions{Store: st, Accept: func(s *Snapshot) error {
		return errors.New("segment dormant is not configured")
	}})
	if err != nil {
		t.Fatal(err)
	}
	wantErrContains(t, w.Poll(ctx), "rejected: segment dormant is not configured")
	if w.Current().Load() != nil || w.LoadFailures() != 1 {
		t.Fatal("a rejected snapshot must not be served")
	}
}

// TestWatcherRunStopsOnCancel runs the loop for real until it has loaded a
// snapshot, then cancels it.
func TestWatcherRunStopsOnCancel(t *testing.T) {
	st := openDir(t, t.TempDir())
	m := publishSmall(t, st)
	w, err := NewWatcher(WatcherOptions{Store: st, Interval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	deadline := time.After(30 * time.Second) // a hang guard, not a timing assertion
	for w.Version() != m.Version {
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
	if _, err := NewWatcher(WatcherOptions{}); err == nil {
		t.Fatal("a watcher without a store must be an error")
	}
	reg := prometheus.NewRegistry()
	st := openDir(t, t.TempDir())
	if _, err := NewWatcher(WatcherOptions{Store: st, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	_, err := NewWatcher(WatcherOptions{Store: st, Registerer: reg})
	wantErrContains(t, err, "register metrics")
}

// TestLookupsDuringSwaps: readers never see anything but a whole snapshot
// while the watcher swaps versions under them (run with -race).
func TestLookupsDuringSwaps(t *testing.T) {
	ctx := context.Background()
	st := openDir(t, t.TempDir())
	var cur Current
	w, err := NewWatcher(WatcherOptions{Store: st, Current: &cur})
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
		b := mustBuildCSV(t, BuilderOptions{}, sb.String())
		if _, err := Publish(ctx, st, b, PublishOptions{Now: fixedNow(t0.Add(timeHours(i)))}); err != nil {
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
	if w.Loads() != 10 {
		t.Fatalf("loads %d, want 10", w.Loads())
	}
}
