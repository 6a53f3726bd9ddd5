package segments

import (
	"math/rand/v2"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
)

// The index must give exactly the bitmaps' answer, for ids in dense chunks,
// sparse chunks, chunk edges and beyond every segment.
func TestDenseIndexAgreesWithBitmaps(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	bms := []*roaring.Bitmap{roaring.New(), roaring.New(), roaring.New()}
	// Chunk 0 and 1: dense and mixed. Chunk 5: sparse. Chunk 9: dense, one segment.
	for x := uint32(0); x < 2*chunkIDs; x++ {
		if r.IntN(10) < 9 {
			bms[r.IntN(3)].Add(x)
		}
	}
	for i := 0; i < 300; i++ {
		bms[r.IntN(3)].Add(5*chunkIDs + uint32(r.IntN(chunkIDs)))
	}
	bms[2].AddRange(9*chunkIDs, 10*chunkIDs)
	segs := []seg32{{"a", bms[0]}, {"b", bms[1]}, {"c", bms[2]}}
	idx, size := buildDenseIndex(segs)
	if idx == nil || size != 3*chunkIDs/2 {
		t.Fatalf("index of %d bytes, want tables for the 3 dense chunks", size)
	}
	if idx[5] != nil {
		t.Fatal("a sparse chunk got a table")
	}
	s := &Snapshot{idBits: 32, lookup32: segs, dense: idx}
	naive := func(x uint32) string {
		for _, sg := range segs {
			if sg.bm.Contains(x) {
				return sg.name
			}
		}
		return None
	}
	check := func(x uint32) {
		if got, want := s.Lookup(uint64(x)), naive(x); got != want {
			t.Fatalf("Lookup(%d) = %q, bitmaps say %q", x, got, want)
		}
	}
	for x := uint32(0); x < 11*chunkIDs; x += 7 {
		check(x)
	}
	for _, x := range []uint32{0, 1, chunkIDs - 1, chunkIDs, 2*chunkIDs - 1, 2 * chunkIDs, 9 * chunkIDs, 10*chunkIDs - 1, 10 * chunkIDs, ^uint32(0)} {
		check(x)
	}
}

func TestDenseIndexNeedsNibbleRoom(t *testing.T) {
	var segs []seg32
	for i := 0; i < maxDenseSegments+1; i++ {
		bm := roaring.New()
		bm.AddRange(uint64(i)*chunkIDs, uint64(i+1)*chunkIDs)
		segs = append(segs, seg32{name: string(rune('a' + i)), bm: bm})
	}
	if idx, _ := buildDenseIndex(segs); idx != nil {
		t.Fatal("built an index for more segments than a nibble can name")
	}
	if idx, _ := buildDenseIndex(segs[:maxDenseSegments]); idx == nil {
		t.Fatal("no index for 15 dense segments")
	}
}
