package segments_test

import (
	"github.com/capper-dev/capper/internal/objstore"
	"github.com/capper-dev/capper/internal/segbuild"
	"github.com/capper-dev/capper/internal/segments"

	"context"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	benchUsers          = 50_000_000
	lookupTargetNs      = 250.0
	benchRandomLookups  = 1 << 20
	benchSegmentsNumber = 4
)

// benchSegmentOf spreads dense ids over 4 segments of different sizes
// (40/30/20/10 %), pseudo-randomly so that every bitmap container is mixed.
func benchSegmentOf(id uint64) string {
	h := id * 0x9e3779b97f4a7c15 // Fibonacci hashing: cheap and well spread
	switch r := (h >> 32) % 10; {
	case r < 4:
		return "active"
	case r < 7:
		return "new"
	case r < 9:
		return "dormant"
	default:
		return "lapsed"
	}
}

// bench50M builds the 50M-user snapshot once per benchmark binary run.
var bench50M = sync.OnceValues(func() (*segbuild.Build, error) {
	b := segbuild.NewBuilder(segbuild.BuilderOptions{Segments: []string{"new", "active", "dormant", "lapsed"}})
	for id := uint64(0); id < benchUsers; id++ {
		if err := b.Add(id, benchSegmentOf(id), segbuild.Position{}); err != nil {
			return nil, err
		}
	}
	return b.Finish(context.Background())
})

// publishedBench50M publishes the 50M snapshot to a fresh directory store.
func publishedBench50M(b *testing.B) objstore.Store {
	b.Helper()
	build, err := bench50M()
	if err != nil {
		b.Fatal(err)
	}
	st := openDir(b, b.TempDir())
	if _, err := segbuild.Publish(context.Background(), st, build, segbuild.PublishOptions{Now: fixedNow(t0)}); err != nil {
		b.Fatal(err)
	}
	return st
}

var lookupSink string

// BenchmarkLookup50M: random users against 50M dense ids in 4 segments, the
// snapshot loaded from a directory store as a worker would.
func BenchmarkLookup50M(b *testing.B) {
	st := publishedBench50M(b)
	s, err := segments.Load(context.Background(), st, segments.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	ids := make([]uint64, benchRandomLookups)
	for i := range ids {
		ids[i] = r.Uint64N(benchUsers)
	}
	var c segments.Current
	c.Store(s)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		lookupSink = c.Lookup(ids[i&(benchRandomLookups-1)])
	}
	nsPerOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(nsPerOp/lookupTargetNs, "x-of-250ns-target")
}

// BenchmarkLookup50MParallel: the same, from all cores at once.
func BenchmarkLookup50MParallel(b *testing.B) {
	st := publishedBench50M(b)
	s, err := segments.Load(context.Background(), st, segments.LoadOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var c segments.Current
	c.Store(s)
	b.ReportAllocs()
	b.ResetTimer()
	var seed sync.Mutex
	n := uint64(0)
	b.RunParallel(func(pb *testing.PB) {
		seed.Lock()
		n++
		r := rand.New(rand.NewPCG(n, 3))
		seed.Unlock()
		var sink string
		for pb.Next() {
			sink = c.Lookup(r.Uint64N(benchUsers))
		}
		_ = sink
	})
}

// BenchmarkLoad50M: LATEST -> manifest -> objects, with every check, from a
// directory store.
func BenchmarkLoad50M(b *testing.B) {
	st := publishedBench50M(b)
	var bytes int64
	var index int
	b.ResetTimer()
	for b.Loop() {
		s, err := segments.Load(context.Background(), st, segments.LoadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		index = s.IndexBytes()
		bytes = 0
		for _, in := range s.Segments() {
			bytes += in.Bytes
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/load")
	b.ReportMetric(float64(bytes)/(1<<20), "MiB")
	// The dense-range lookup index, in memory on top of the bitmaps.
	b.ReportMetric(float64(index)/(1<<20), "index-MiB")
	b.ReportMetric(float64(bytes)/benchUsers, "bytes/user")
	b.SetBytes(bytes)
}

// BenchmarkBuilderAdd50M: the in-process build of the same 50M users through
// segbuild.Builder.Add (no parsing), serialization and self-check included.
func BenchmarkBuilderAdd50M(b *testing.B) {
	for b.Loop() {
		start := time.Now()
		bl := segbuild.NewBuilder(segbuild.BuilderOptions{Segments: []string{"new", "active", "dormant", "lapsed"}})
		for id := uint64(0); id < benchUsers; id++ {
			if err := bl.Add(id, benchSegmentOf(id), segbuild.Position{}); err != nil {
				b.Fatal(err)
			}
		}
		build, err := bl.Finish(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(benchUsers/time.Since(start).Seconds(), "rows/s")
		b.ReportMetric(float64(build.Bytes())/float64(build.Users()), "bytes/user")
	}
}

// BenchmarkSnapshot270M builds and publishes a 270M-user, 4-segment
// snapshot (dense ids: the worst case for the lookup index, the best for
// the bitmaps), then loads it in a child process as a worker would and
// reports the objects' size, the load time and the child's resident memory,
// against the targets (200 MB of objects, 512 MiB of RSS).
func BenchmarkSnapshot270M(b *testing.B) {
	const users = 270_000_000
	dir := b.TempDir()
	bin := filepath.Join(b.TempDir(), "loadrss")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/loadrss").CombinedOutput(); err != nil {
		b.Fatalf("build loadrss: %v\n%s", err, out)
	}
	for b.Loop() {
		bl := segbuild.NewBuilder(segbuild.BuilderOptions{Segments: []string{"new", "active", "dormant", "lapsed"}})
		for id := uint64(0); id < users; id++ {
			if err := bl.Add(id, benchSegmentOf(id), segbuild.Position{}); err != nil {
				b.Fatal(err)
			}
		}
		build, err := bl.Finish(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		m, err := segbuild.Publish(context.Background(), openDir(b, dir), build, segbuild.PublishOptions{Now: fixedNow(t0)})
		if err != nil {
			b.Fatal(err)
		}
		var objects int64
		for _, s := range m.Segments {
			objects += s.Bytes
		}
		out, err := exec.Command(bin, dir).CombinedOutput()
		if err != nil {
			b.Fatalf("loadrss: %v\n%s", err, out)
		}
		got := map[string]float64{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			k, v, _ := strings.Cut(line, " ")
			got[k], _ = strconv.ParseFloat(v, 64)
		}
		if got["segments"] != 4 {
			b.Fatalf("loadrss loaded %v segments:\n%s", got["segments"], out)
		}
		b.ReportMetric(float64(objects)/1e6, "object-MB")
		b.ReportMetric(float64(objects)/200e6, "x-of-200MB-target")
		b.ReportMetric(got["load_ms"], "load-ms")
		b.ReportMetric(got["rss_kb"]/1024, "worker-RSS-MiB")
		b.ReportMetric(got["hwm_kb"]/1024, "worker-peak-RSS-MiB")
		b.ReportMetric(got["hwm_kb"]/1024/512, "x-of-512MiB-target")
		b.ReportMetric(got["index_bytes"]/(1<<20), "index-MiB")
	}
}
