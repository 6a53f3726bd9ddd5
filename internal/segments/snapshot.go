package segments

// The Snapshot in memory, its Lookup, and Current (the one in use).

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"sync/atomic"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// SegmentInfo describes one segment of a snapshot.
type SegmentInfo struct {
	Name   string
	Users  uint64
	Bytes  int64  // size of the serialized bitmap
	SHA256 string // hex, of the serialized bitmap
}

// Snapshot is a verified, immutable set of mutually exclusive segments. All
// methods work on a nil *Snapshot (no segments), so callers can run before the
// first snapshot is loaded.
type Snapshot struct {
	version   string
	createdAt time.Time
	idBits    int
	infos     []SegmentInfo // priority order, as in the manifest

	// Lookup order: largest segment first. Segments are exclusive, so the
	// order does not change the answer, and checking the biggest first
	// minimises the expected number of Contains calls.
	lookup32 []seg32
	lookup64 []seg64
	// dense answers 32-bit lookups in dense id ranges with one memory read
	// (see dense.go); nil when no range is dense.
	dense      *denseIndex
	denseBytes int
}

type seg32 struct {
	name string
	bm   *roaring.Bitmap
}

type seg64 struct {
	name string
	bm   *roaring64.Bitmap
}

// Lookup returns the name of the segment holding userID, or None. It does not
// allocate and is safe for concurrent use.
func (s *Snapshot) Lookup(userID uint64) string {
	if s == nil {
		return None
	}
	if s.idBits == 64 {
		for i := range s.lookup64 {
			if s.lookup64[i].bm.Contains(userID) {
				return s.lookup64[i].name
			}
		}
		return None
	}
	if userID > math.MaxUint32 {
		return None // a 32-bit snapshot cannot hold it
	}
	x := uint32(userID)
	if s.dense != nil {
		if i, ok := s.dense.lookup(x); ok {
			if i == 0 {
				return None
			}
			return s.lookup32[i-1].name
		}
	}
	for i := range s.lookup32 {
		if s.lookup32[i].bm.Contains(x) {
			return s.lookup32[i].name
		}
	}
	return None
}

// Version is the snapshot's version ("" for a nil snapshot).
func (s *Snapshot) Version() string {
	if s == nil {
		return ""
	}
	return s.version
}

// CreatedAt is when the snapshot was built (manifest created_at).
func (s *Snapshot) CreatedAt() time.Time {
	if s == nil {
		return time.Time{}
	}
	return s.createdAt
}

// IDBits is 32 or 64: the width of the ids the snapshot can hold (0 for nil).
func (s *Snapshot) IDBits() int {
	if s == nil {
		return 0
	}
	return s.idBits
}

// Segments lists the segments in priority order (a copy).
func (s *Snapshot) Segments() []SegmentInfo {
	if s == nil {
		return nil
	}
	return append([]SegmentInfo(nil), s.infos...)
}

// Has reports whether the snapshot has a segment called name.
func (s *Snapshot) Has(name string) bool {
	if s == nil {
		return false
	}
	for _, in := range s.infos {
		if in.Name == name {
			return true
		}
	}
	return false
}

// Users is the total number of users in all segments.
func (s *Snapshot) Users() uint64 {
	var n uint64
	if s != nil {
		for _, in := range s.infos {
			n += in.Users
		}
	}
	return n
}

// Current holds the snapshot in use. The zero value is ready and holds nil.
// It is safe for concurrent use: readers never see a half-swapped snapshot.
type Current struct {
	p atomic.Pointer[Snapshot]
}

// Load returns the snapshot in use (nil before the first Store).
func (c *Current) Load() *Snapshot {
	if c == nil {
		return nil
	}
	return c.p.Load()
}

// Store makes s the snapshot in use.
func (c *Current) Store(s *Snapshot) { c.p.Store(s) }

// Lookup is Load().Lookup(userID).
func (c *Current) Lookup(userID uint64) string { return c.Load().Lookup(userID) }

// newSnapshot checks the decoded segments (users, exclusivity) and builds the
// snapshot. Callers have checked the manifest itself (validateManifest).
func newSnapshot(m *Manifest, datas [][]byte) (*Snapshot, error) {
	s := &Snapshot{version: m.Version, createdAt: m.CreatedAt, idBits: m.IDBits}
	b32 := make([]*roaring.Bitmap, len(m.Segments))
	b64 := make([]*roaring64.Bitmap, len(m.Segments))
	for i, seg := range m.Segments {
		key := VersionKey(m.Version, seg.Object)
		var card uint64
		var err error
		if m.IDBits == 64 {
			b64[i], err = decode64(datas[i])
			if err == nil {
				card = b64[i].GetCardinality()
			}
		} else {
			b32[i], err = decode32(datas[i])
			if err == nil {
				card = b32[i].GetCardinality()
			}
		}
		if err != nil {
			return nil, fmt.Errorf("object %s: decode: %w", key, err)
		}
		if card != seg.Users {
			return nil, fmt.Errorf("object %s: holds %d users, manifest says %d", key, card, seg.Users)
		}
		s.infos = append(s.infos, SegmentInfo{Name: seg.Name, Users: seg.Users, Bytes: seg.Bytes, SHA256: seg.SHA256})
	}
	// Exclusivity: pairwise Intersects works container by container and stops
	// at the first common user, so it is cheap next to the load itself.
	for i := range m.Segments {
		for j := i + 1; j < len(m.Segments); j++ {
			var overlap bool
			if m.IDBits == 64 {
				overlap = b64[i].Intersects(b64[j])
			} else {
				overlap = b32[i].Intersects(b32[j])
			}
			if overlap {
				return nil, fmt.Errorf("segments %q (object %s) and %q (object %s) share users; segments must be mutually exclusive",
					m.Segments[i].Name, VersionKey(m.Version, m.Segments[i].Object),
					m.Segments[j].Name, VersionKey(m.Version, m.Segments[j].Object))
			}
		}
	}
	order := make([]int, len(m.Segments))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return m.Segments[order[a]].Users > m.Segments[order[b]].Users })
	for _, i := range order {
		if m.Segments[i].Users == 0 {
			continue // nothing to find there
		}
		if m.IDBits == 64 {
			s.lookup64 = append(s.lookup64, seg64{name: m.Segments[i].Name, bm: b64[i]})
		} else {
			s.lookup32 = append(s.lookup32, seg32{name: m.Segments[i].Name, bm: b32[i]})
		}
	}
	if m.IDBits != 64 {
		s.dense, s.denseBytes = buildDenseIndex(s.lookup32)
	}
	return s, nil
}

// IndexBytes is the memory of the lookup index for dense id ranges, on top
// of the bitmaps (0 when no range is dense).
func (s *Snapshot) IndexBytes() int {
	if s == nil {
		return 0
	}
	return s.denseBytes
}

// decode32 deserializes a roaring bitmap without copying: the bitmap keeps
// referencing data, which is never modified afterwards.
func decode32(data []byte) (bm *roaring.Bitmap, err error) {
	// The bytes passed sha256 against the manifest, so they are what the
	// publisher wrote; the recover only guards against a producer that wrote
	// a malformed bitmap, so that it becomes an error instead of a crash.
	defer func() {
		if r := recover(); r != nil {
			bm, err = nil, fmt.Errorf("malformed bitmap: %v", r)
		}
	}()
	bm = roaring.New()
	n, err := bm.FromBuffer(data)
	if err := checkDecoded(n, err, len(data), bm.Validate); err != nil {
		return nil, err
	}
	return bm, nil
}

// checkDecoded: the bitmap took every byte and is internally consistent.
func checkDecoded(n int64, err error, size int, validate func() error) error {
	if err != nil {
		return err
	}
	if n != int64(size) {
		return fmt.Errorf("%d trailing bytes after the bitmap", int64(size)-n)
	}
	if err := validate(); err != nil {
		return fmt.Errorf("malformed bitmap: %w", err)
	}
	return nil
}

func decode64(data []byte) (bm *roaring64.Bitmap, err error) {
	defer func() {
		if r := recover(); r != nil {
			bm, err = nil, fmt.Errorf("malformed bitmap: %v", r)
		}
	}()
	// roaring64 allocates from the bucket count in the header before reading
	// the buckets; check the count against the data first (each bucket takes
	// at least a 4-byte key and an 8-byte 32-bit bitmap header).
	if len(data) < 8 {
		return nil, fmt.Errorf("malformed bitmap: %d bytes, want at least 8", len(data))
	}
	if n := binary.LittleEndian.Uint64(data); n > uint64(len(data)-8)/12 {
		return nil, fmt.Errorf("malformed bitmap: header says %d buckets in %d bytes", n, len(data))
	}
	bm = roaring64.New()
	n, err := bm.FromUnsafeBytes(data)
	if err := checkDecoded(n, err, len(data), bm.Validate); err != nil {
		return nil, err
	}
	return bm, nil
}
