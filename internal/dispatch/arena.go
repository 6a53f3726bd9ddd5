package dispatch

// The arrays a batch's output records and their headers are cut from.
// Stage 2 keeps them from one batch to the next (reset): a held intent's
// lane record and its delivery then cost the collector no new arrays.

import "github.com/capper-dev/capper/internal/kafka"

// spent is the arrays a header builder (and the route it serves) has cut
// from: its records' headers, their values' bytes, and the output records.
type spent struct {
	headers pool[kafka.Header]
	arenas  pool[byte]
	records pool[kafka.Message]
}

// pool is arrays handed out for one batch (used) and free again for the
// next (free). keep: the arrays hold no pointers (bytes), so a recycled
// one need not be cleared.
type pool[T any] struct {
	used, free [][]T
	keep       bool
}

// maxFree bounds the arrays a pool keeps free: more than a batch uses.
const maxFree = 64

// get is an empty array with room for at least n: a free one if one is
// large enough.
func (p *pool[T]) get(n int) []T {
	for i := len(p.free) - 1; i >= 0; i-- {
		if a := p.free[i]; cap(a) >= n {
			p.free[i] = p.free[len(p.free)-1]
			p.free = p.free[:len(p.free)-1]
			p.used = append(p.used, a)
			return a
		}
	}
	a := make([]T, 0, n)
	p.used = append(p.used, a)
	return a
}

// recycle makes what was handed out free, cleared (no pointers into the
// old batch's records kept alive) unless keep.
func (p *pool[T]) recycle() {
	for _, a := range p.used {
		if !p.keep {
			clear(a[:cap(a)])
		}
	}
	p.free, p.used = append(p.free, p.used...), p.used[:0]
	if len(p.free) > maxFree {
		clear(p.free[maxFree:])
		p.free = p.free[:maxFree]
	}
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
		hb.backing = hb.spent.headers.get(max(n, size))
	}
	h := hb.backing[len(hb.backing) : len(hb.backing) : len(hb.backing)+n]
	hb.backing = hb.backing[:len(hb.backing)+n]
	return h
}

// bytes appends to the arena and returns the appended part; a full arena
// is replaced, not grown, so earlier slices stay valid.
func (hb *headerBuilder) bytes(f func([]byte) []byte) []byte {
	if cap(hb.arena)-len(hb.arena) < 64 {
		hb.arena = hb.spent.arenas.get(arenaSize)
	}
	start := len(hb.arena)
	hb.arena = f(hb.arena) // one that outgrows the arena is a new array, never reused
	return hb.arena[start:len(hb.arena):len(hb.arena)]
}

// reset makes hb a new batch's builder, cutting from the arrays of the
// batch before: only once that batch's records are written (stage 2,
// between two batches), and never while any of them is still read.
func (hb *headerBuilder) reset(version, policy string) {
	s := &hb.spent
	s.headers.recycle()
	s.arenas.recycle()
	s.records.recycle()
	clear(hb.names)
	clear(hb.lanes)
	clear(hb.times)
	clear(hb.scratch[:cap(hb.scratch)])
	*hb = headerBuilder{version: append(hb.version[:0], version...), policy: policy, names: hb.names,
		lanes: hb.lanes, times: hb.times, scratch: hb.scratch[:0], spent: *s}
}
