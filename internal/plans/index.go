package plans

// The membership index: for every user some plan's audience holds, the
// positions of those plans in the set, kept together. Asking 50 audience
// bitmaps about a user is 50 searches in memory no cache holds (several
// microseconds); the index answers with three reads. It takes about what
// the bitmaps take, and replaces them once built.
//
// Users are split into chunks of 2^16 ids, like roaring's containers. A
// chunk with many memberships is dense: a count per user (one byte), the
// offset of every 64 users' first member, and the members in user order;
// a chunk with few is sparse: its (user, plan) pairs sorted by user.

import (
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
)

// MaxPlans bounds a set's plans in force: a member is a byte.
const MaxPlans = 255

// denseFrom is the memberships from which a chunk is dense: a dense chunk
// costs 68 KiB plus a byte per membership, a sparse one 3 bytes each.
const denseFrom = 68 << 10 / 2

type index struct {
	chunks []*chunk // by user >> 16; nil: no plan holds a user of it
}

type chunk struct {
	// dense
	counts  []uint8 // 1 << 16: how many plans hold each user
	offsets []uint32
	// sparse: lows[i] is held by members[i]
	lows []uint16
	// members are plan positions: a dense chunk's in user order, each
	// user's ascending
	members []uint8
}

// lookup is the positions of the plans holding user, ascending.
func (x *index) lookup(user uint32) []uint8 {
	hb := int(user >> 16)
	if hb >= len(x.chunks) || x.chunks[hb] == nil {
		return nil
	}
	c, lo := x.chunks[hb], uint16(user)
	if c.counts == nil {
		i, _ := slices.BinarySearch(c.lows, lo)
		j := i
		for j < len(c.lows) && c.lows[j] == lo {
			j++
		}
		return c.members[i:j]
	}
	n := uint32(c.counts[lo])
	if n == 0 {
		return nil
	}
	off := c.offsets[lo>>6]
	for _, k := range c.counts[lo&^63 : lo] {
		off += uint32(k)
	}
	return c.members[off : off+n]
}

// bytes is what the index takes in memory.
func (x *index) bytes() int64 {
	n := int64(len(x.chunks)) * 8
	for _, c := range x.chunks {
		if c != nil {
			n += int64(len(c.counts) + 4*len(c.offsets) + 2*len(c.lows) + len(c.members))
		}
	}
	return n
}

// source is a plan's audience as buildIndex reads it: its users in order.
type source struct {
	it   roaring.ManyIntIterable
	buf  []uint32
	next int
}

func newSource(bm *roaring.Bitmap) *source {
	return &source{it: bm.ManyIterator(), buf: make([]uint32, 0, 4096)}
}

// fill refills the buffer once it is consumed; false: no user left.
func (s *source) fill() bool {
	if s.next == len(s.buf) {
		s.buf = s.buf[:cap(s.buf)]
		s.buf, s.next = s.buf[:s.it.NextMany(s.buf)], 0
	}
	return s.next < len(s.buf)
}

// take appends to dst the low bits of the source's users of chunk hb.
func (s *source) take(dst []uint16, hb uint32) []uint16 {
	for s.fill() && s.buf[s.next]>>16 == hb {
		dst = append(dst, uint16(s.buf[s.next]))
		s.next++
	}
	return dst
}

// peek is the chunk of the source's next user; false: none left.
func (s *source) peek() (uint32, bool) {
	if !s.fill() {
		return 0, false
	}
	return s.buf[s.next] >> 16, true
}

// buildIndex builds the index of plans: position i holds either a new
// audience (audiences[i]) or, when that is nil, the plan at position
// from[i] of prev (the plans kept across a reload are not read again).
func buildIndex(prev *index, from []int, audiences []*roaring.Bitmap) *index {
	n := len(audiences)
	srcs := make([]*source, n)
	for i, bm := range audiences {
		if bm != nil {
			srcs[i] = newSource(bm)
		}
	}
	newPos := map[uint8]uint8{} // prev's positions kept, to ours
	for i, f := range from {
		if audiences[i] == nil && f >= 0 {
			newPos[uint8(f)] = uint8(i)
		}
	}
	x := &index{}
	lists := make([][]uint16, n) // the chunk's users of each plan
	for hb := uint32(0); ; hb++ {
		more := false
		for i := range lists {
			lists[i] = lists[i][:0]
			if s := srcs[i]; s != nil {
				lists[i] = s.take(lists[i], hb)
				if c, ok := s.peek(); ok && c > hb {
					more = true
				}
			}
		}
		if prev != nil {
			if int(hb) < len(prev.chunks) && prev.chunks[hb] != nil {
				prev.chunks[hb].spill(lists, newPos)
			}
			more = more || int(hb)+1 < len(prev.chunks)
		}
		if c := newChunk(lists); c != nil {
			for len(x.chunks) <= int(hb) {
				x.chunks = append(x.chunks, nil)
			}
			x.chunks[hb] = c
		}
		if !more {
			break
		}
	}
	return x
}

// spill appends the chunk's users of every kept plan to its list.
func (c *chunk) spill(lists [][]uint16, newPos map[uint8]uint8) {
	if c.counts == nil {
		for i, lo := range c.lows {
			if p, ok := newPos[c.members[i]]; ok {
				lists[p] = append(lists[p], lo)
			}
		}
		return
	}
	m := 0
	for lo, k := range c.counts {
		for _, old := range c.members[m : m+int(k)] {
			if p, ok := newPos[old]; ok {
				lists[p] = append(lists[p], uint16(lo))
			}
		}
		m += int(k)
	}
}

// newChunk makes a chunk of the plans' users (each list ascending); nil
// when there are none.
func newChunk(lists [][]uint16) *chunk {
	total := 0
	for _, l := range lists {
		total += len(l)
	}
	if total == 0 {
		return nil
	}
	if total < denseFrom {
		c := &chunk{lows: make([]uint16, 0, total), members: make([]uint8, 0, total)}
		type pair struct {
			lo uint16
			p  uint8
		}
		pairs := make([]pair, 0, total)
		for p, l := range lists {
			for _, lo := range l {
				pairs = append(pairs, pair{lo, uint8(p)})
			}
		}
		slices.SortFunc(pairs, func(a, b pair) int {
			if a.lo != b.lo {
				return int(a.lo) - int(b.lo)
			}
			return int(a.p) - int(b.p)
		})
		for _, x := range pairs {
			c.lows, c.members = append(c.lows, x.lo), append(c.members, x.p)
		}
		return c
	}
	c := &chunk{counts: make([]uint8, 1<<16), offsets: make([]uint32, 1<<10), members: make([]uint8, total)}
	for _, l := range lists {
		for _, lo := range l {
			c.counts[lo]++
		}
	}
	cursor := make([]uint32, 1<<16) // where each user's next member goes
	off := uint32(0)
	for lo, k := range c.counts {
		if lo&63 == 0 {
			c.offsets[lo>>6] = off
		}
		cursor[lo] = off
		off += uint32(k)
	}
	for p, l := range lists { // ascending positions: each user's in order
		for _, lo := range l {
			c.members[cursor[lo]] = uint8(p)
			cursor[lo]++
		}
	}
	return c
}
