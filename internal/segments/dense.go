package segments

// The dense-range lookup index.

// A Lookup in the bitmaps costs one Contains per segment tried, and each
// Contains on a large bitmap is a cache miss into its container: about
// 100 ns, twice per lookup on average with four segments. For the 65536-id
// chunks where users are dense, a table of one nibble per id (0 = no
// segment, else 1 + the segment's place in lookup32) answers with a single
// memory read instead.
//
// A chunk gets a table (32 KiB) only when it holds at least denseChunkMin
// users: by then its bitmap containers take about as much, so the index at
// most doubles the memory of dense id ranges and adds nothing for sparse
// ones, which keep using the bitmaps.
const (
	denseChunkMin = 16384
	chunkIDs      = 1 << 16
	// maxDenseSegments is what a nibble can name (0 means none).
	maxDenseSegments = 15
)

// denseIndex is indexed by the high 16 bits of a 32-bit id; a nil entry means
// the chunk is answered by the bitmaps.
type denseIndex [chunkIDs]*[chunkIDs / 2]byte

// buildDenseIndex returns the index for segs (in lookup order), or nil when
// no chunk is dense enough or there are too many segments for a nibble.
// The second result is the memory the tables take.
func buildDenseIndex(segs []seg32) (*denseIndex, int) {
	if len(segs) == 0 || len(segs) > maxDenseSegments {
		return nil, 0
	}
	// Iteration yields each bitmap's ids in ascending order, so a batch
	// whose first and last id share a chunk counts in one step.
	var counts [chunkIDs]uint32
	buf := make([]uint32, 4096)
	for _, s := range segs {
		it := s.bm.ManyIterator()
		for n := it.NextMany(buf); n > 0; n = it.NextMany(buf) {
			b := buf[:n]
			if b[0]>>16 == b[n-1]>>16 {
				counts[b[0]>>16] += uint32(n)
				continue
			}
			for _, x := range b {
				counts[x>>16]++
			}
		}
	}
	var idx *denseIndex
	size := 0
	for hb, c := range counts {
		if c >= denseChunkMin {
			if idx == nil {
				idx = new(denseIndex)
			}
			idx[hb] = new([chunkIDs / 2]byte)
			size += chunkIDs / 2
		}
	}
	if idx == nil {
		return nil, 0
	}
	for i, s := range segs {
		v := byte(i + 1)
		it := s.bm.ManyIterator()
		for n := it.NextMany(buf); n > 0; n = it.NextMany(buf) {
			for _, x := range buf[:n] {
				if t := idx[x>>16]; t != nil {
					t[(x&0xffff)>>1] |= v << ((x & 1) * 4)
				}
			}
		}
	}
	return idx, size
}

// lookup answers from the index: the segment's place in lookup32 plus one
// (0 = none), and whether the chunk has a table at all.
func (d *denseIndex) lookup(x uint32) (int, bool) {
	t := d[x>>16]
	if t == nil {
		return 0, false
	}
	return int(t[(x&0xffff)>>1]>>((x&1)*4)) & 0xf, true
}
