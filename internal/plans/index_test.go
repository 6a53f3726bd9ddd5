package plans

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
)

// randomAudiences are n audiences over ids of a few chunks each: some
// chunks dense (above denseFrom memberships), most sparse, some empty.
func randomAudiences(r *rand.Rand, n int) []*roaring.Bitmap {
	out := make([]*roaring.Bitmap, n)
	for i := range out {
		bm := roaring.New()
		for _, hb := range []uint32{0, 1, 3, 7, 1 << 15, 1<<16 - 1} {
			density := []float64{0, 0.001, 0.05, 0.6}[r.IntN(4)]
			for lo := range uint32(1 << 16) {
				if r.Float64() < density {
					bm.Add(hb<<16 | lo)
				}
			}
		}
		out[i] = bm
	}
	return out
}

func holders(bms []*roaring.Bitmap, user uint32) []uint8 {
	var want []uint8
	for i, bm := range bms {
		if bm != nil && bm.Contains(user) {
			want = append(want, uint8(i))
		}
	}
	return want
}

// checkIndex compares every lookup of x with the bitmaps, over the chunks
// they use.
func checkIndex(t *testing.T, x *index, bms []*roaring.Bitmap) {
	t.Helper()
	dense := 0
	for _, c := range x.chunks {
		if c != nil && c.counts != nil {
			dense++
		}
	}
	if dense == 0 {
		t.Fatal("no dense chunk: the test covers one form only")
	}
	for _, hb := range []uint32{0, 1, 2, 3, 7, 1 << 15, 1<<16 - 1} {
		for lo := range uint32(1 << 16) {
			u := hb<<16 | lo
			if got, want := x.lookup(u), holders(bms, u); !slices.Equal(got, want) {
				t.Fatalf("user %d: index says %v, the bitmaps %v", u, got, want)
			}
		}
	}
}

// TestIndex: the index answers what the bitmaps do, built from audiences,
// and rebuilt from an earlier index with plans dropped, kept (moved) and
// added.
func TestIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	bms := randomAudiences(r, 12)
	x := buildIndex(nil, make([]int, len(bms)), bms)
	checkIndex(t, x, bms)

	// Keep 0, 5 and 9 (at new positions 1, 2, 3), drop the rest, add two.
	added := randomAudiences(r, 2)
	from := []int{-1, 0, 5, 9, -1}
	next := []*roaring.Bitmap{added[0], nil, nil, nil, added[1]}
	y := buildIndex(x, from, next)
	checkIndex(t, y, []*roaring.Bitmap{added[0], bms[0], bms[5], bms[9], added[1]})

	// Everything dropped: an empty index.
	z := buildIndex(y, nil, nil)
	if len(z.chunks) != 0 || z.lookup(5) != nil {
		t.Fatalf("empty index: %d chunks", len(z.chunks))
	}
}
