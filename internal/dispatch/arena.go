package dispatch

// The arrays a batch's output headers are cut from. Stage 2 keeps them
// from one batch to the next (reset): a held intent's lane record and its
// delivery then cost the collector no new arrays.

import "github.com/capper-dev/capper/internal/kafka"

// spent is the arrays a header builder has cut from (used) and those it
// may cut from again (free).
type spent struct {
	used, free           [][]kafka.Header
	usedArena, freeArena [][]byte
}

// arenaSize is an arena's size: the bytes of about 200 records' times and
// names.
const arenaSize = 16 << 10

// cut returns an empty slice with room for n headers, cut from one array
// shared by the batch's records (one allocation per chunk headers, not one
// per record).
func (hb *headerBuilder) cut(n int) []kafka.Header {
	if cap(hb.backing)-len(hb.backing) < n {
		size := hb.chunk
		if size <= 0 || size > 1024 {
			size = 1024
		}
		hb.backing = hb.spent.headers(max(n, size))
	}
	h := hb.backing[len(hb.backing) : len(hb.backing) : len(hb.backing)+n]
	hb.backing = hb.backing[:len(hb.backing)+n]
	return h
}

// bytes appends to the arena and returns the appended part; a full arena
// is replaced, not grown, so earlier slices stay valid.
func (hb *headerBuilder) bytes(f func([]byte) []byte) []byte {
	if cap(hb.arena)-len(hb.arena) < 64 {
		hb.arena = hb.spent.bytes()
	}
	start := len(hb.arena)
	hb.arena = f(hb.arena) // one that outgrows the arena is a new array, never reused
	return hb.arena[start:len(hb.arena):len(hb.arena)]
}

// headers is an empty array with room for at least n headers.
func (s *spent) headers(n int) []kafka.Header {
	var a []kafka.Header
	if k := len(s.free); k > 0 && cap(s.free[k-1]) >= n {
		a, s.free = s.free[k-1][:0], s.free[:k-1]
	} else {
		a = make([]kafka.Header, 0, n)
	}
	s.used = append(s.used, a)
	return a
}

// bytes is an empty arena.
func (s *spent) bytes() []byte {
	var a []byte
	if k := len(s.freeArena); k > 0 {
		a, s.freeArena = s.freeArena[k-1][:0], s.freeArena[:k-1]
	} else {
		a = make([]byte, 0, arenaSize)
	}
	s.usedArena = append(s.usedArena, a)
	return a
}

// reset makes hb a new batch's builder, cutting from the arrays of the
// batch before: only once that batch's records are written (stage 2,
// between two batches), and never while any of them is still read.
func (hb *headerBuilder) reset(version, policy string) {
	s := &hb.spent
	for _, a := range s.used {
		clear(a[:cap(a)]) // no pointers into old records kept alive
	}
	s.free, s.used = append(s.free, s.used...), s.used[:0]
	s.freeArena, s.usedArena = append(s.freeArena, s.usedArena...), s.usedArena[:0]
	clear(hb.names)
	clear(hb.lanes)
	clear(hb.times)
	clear(hb.scratch[:cap(hb.scratch)])
	*hb = headerBuilder{version: append(hb.version[:0], version...), policy: policy, names: hb.names,
		lanes: hb.lanes, times: hb.times, scratch: hb.scratch[:0], spent: *s}
}
