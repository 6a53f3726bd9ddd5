package plans

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"

	"github.com/capper-dev/capper/internal/capping"
)

// Blast-day scale: 50 plans in force, each of 10M users drawn at random
// from 270M.
const (
	benchPlans    = 50
	benchAudience = 10_000_000
	benchUsers    = 270_000_000
)

// benchAudiences draws the audiences chunk by chunk (sorted lows per
// chunk: much faster than sorting 10M ids).
func benchAudiences(seed uint64) []*roaring.Bitmap {
	out := make([]*roaring.Bitmap, benchPlans)
	chunks := (benchUsers + 1<<16 - 1) >> 16
	per := benchAudience / chunks
	vals := make([]uint32, 0, 2*per)
	for i := range out {
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		bm := roaring.New()
		for hb := range uint32(chunks) {
			vals = vals[:0]
			for range per + r.IntN(3) - 1 {
				vals = append(vals, hb<<16|uint32(r.IntN(1<<16)))
			}
			slices.Sort(vals)
			bm.AddMany(slices.Compact(vals))
		}
		out[i] = bm
	}
	return out
}

// BenchmarkPlanLookup: the worker's cost of campaign plans per intent,
// Set.For for a random user of 270M with 50 plans of 10M users in force,
// every one of a priority above the intent's (each must be asked), and its
// peer, asking the 50 audience bitmaps; the plans' memory (the index)
// against the bitmaps'. Targets: <= 1 us per intent, memory about the
// bitmaps'.
func BenchmarkPlanLookup(b *testing.B) {
	t0 := time.Now()
	bms := benchAudiences(1)
	gen := time.Since(t0)
	var bitmapBytes uint64
	for _, bm := range bms {
		bitmapBytes += bm.GetSizeInBytes()
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	t0 = time.Now()
	idx := buildIndex(nil, make([]int, len(bms)), bms)
	build := time.Since(t0)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	s := &Set{idx: idx}
	for i := range benchPlans {
		c := fmt.Sprint("plan-", i)
		s.plans = append(s.plans, &Plan{Manifest: &Manifest{Campaign: c, Priority: capping.Priority(100 - i), Ends: at.Add(time.Hour)},
			planned: capping.Planned{Campaign: c, Priority: capping.Priority(100 - i), Starts: at, Ends: at.Add(time.Hour), Channel: "push", Category: "marketing"}})
	}
	r := rand.New(rand.NewPCG(9, 9))
	users := make([]uint64, 1<<20)
	for i := range users {
		users[i] = uint64(r.IntN(benchUsers))
	}
	// Each sub-benchmark leaves its last run's ns per intent here.
	var byIndex, byBitmaps float64
	b.Run("index", func(b *testing.B) {
		dst := make([]capping.Planned, 0, benchPlans)
		found, i, t := 0, 0, time.Now()
		for b.Loop() {
			dst = s.For(dst[:0], users[i&(len(users)-1)], capping.Low, at)
			found += len(dst)
			i++
		}
		byIndex = float64(time.Since(t).Nanoseconds()) / float64(i)
		b.ReportMetric(float64(found)/float64(i), "plans/intent")
	})
	b.Run("bitmaps", func(b *testing.B) {
		n, i, t := 0, 0, time.Now()
		for b.Loop() {
			u := uint32(users[i&(len(users)-1)])
			for _, bm := range bms {
				if bm.Contains(u) {
					n++
				}
			}
			i++
		}
		byBitmaps = float64(time.Since(t).Nanoseconds()) / float64(i)
		if n == 0 {
			b.Fatal("no user in any audience")
		}
	})
	indexBytes := idx.bytes()
	heap := m1.HeapAlloc - m0.HeapAlloc
	b.Logf("%d plans of %d users over %d: Set.For %.0f ns per intent (target <= 1000: %.1fx better), asking the bitmaps %.0f ns (%.1fx the index); "+
		"index %d MB (%.2f B per membership; heap grew %d MB), bitmaps %d MB: %.2fx; index built in %s (audiences drawn in %s)",
		benchPlans, benchAudience, benchUsers, byIndex, 1000/byIndex, byBitmaps, byBitmaps/byIndex,
		indexBytes>>20, float64(indexBytes)/benchPlans/benchAudience, heap>>20, bitmapBytes>>20, float64(indexBytes)/float64(bitmapBytes),
		build.Round(time.Millisecond), gen.Round(time.Millisecond))
	b.ReportMetric(byIndex, "ns/intent")
	b.ReportMetric(float64(indexBytes)/float64(bitmapBytes), "index-x-bitmaps")
}
