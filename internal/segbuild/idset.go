package segbuild

// The id sets of a build: 32-bit roaring, widened to 64 when needed.

import (
	"bytes"
	"io"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// idSet is a set of user ids during a build: a 32-bit roaring bitmap until
// the first id above 2^32-1 arrives, then a roaring64 bitmap.
type idSet interface {
	add(x uint64)
	checkedAdd(x uint64) bool // true when x was not in the set
	contains(x uint64) bool
	remove(x uint64)
	cardinality() uint64
	// serialize run-optimizes the set and writes the portable format: the
	// container choice depends only on the content, so equal sets give equal
	// bytes.
	serialize() ([]byte, error)
	widen() idSet
}

type set32 struct{ bm *roaring.Bitmap }

func newSet32() *set32 { return &set32{bm: roaring.New()} }

// Callers widen the set before adding an id above 2^32-1, so the
// conversions below never truncate.
func (s *set32) add(x uint64)             { s.bm.Add(uint32(x)) }
func (s *set32) checkedAdd(x uint64) bool { return s.bm.CheckedAdd(uint32(x)) }
func (s *set32) contains(x uint64) bool   { return x <= 0xffffffff && s.bm.Contains(uint32(x)) }
func (s *set32) remove(x uint64)          { s.bm.Remove(uint32(x)) }
func (s *set32) cardinality() uint64      { return s.bm.GetCardinality() }

// widen moves the bitmap into bucket 0 of a roaring64 bitmap without
// copying. An empty bitmap must not become an (invalid) empty bucket.
func (s *set32) widen() idSet {
	if s.bm.IsEmpty() {
		return &set64{bm: roaring64.New()}
	}
	return &set64{bm: roaring64.Roaring32AsRoaring64(s.bm)}
}

func (s *set32) serialize() ([]byte, error) { return serialize(s.bm) }

type set64 struct{ bm *roaring64.Bitmap }

func (s *set64) add(x uint64)             { s.bm.Add(x) }
func (s *set64) checkedAdd(x uint64) bool { return s.bm.CheckedAdd(x) }
func (s *set64) contains(x uint64) bool   { return s.bm.Contains(x) }
func (s *set64) remove(x uint64)          { s.bm.Remove(x) }
func (s *set64) cardinality() uint64      { return s.bm.GetCardinality() }
func (s *set64) widen() idSet             { return s }

func (s *set64) serialize() ([]byte, error) { return serialize(s.bm) }

// serialize run-optimizes a bitmap and writes its portable serialization.
func serialize(bm interface {
	RunOptimize()
	GetSerializedSizeInBytes() uint64
	WriteTo(io.Writer) (int64, error)
}) ([]byte, error) {
	bm.RunOptimize()
	var buf bytes.Buffer
	buf.Grow(int(bm.GetSerializedSizeInBytes()))
	if _, err := bm.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
