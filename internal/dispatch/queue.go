package dispatch

// The fetched records on their way to the worker: each partition's reader
// puts what one fetch returned, the worker takes up to a batch at once. A
// record costs no goroutine hop or channel send of its own (kafka-go's
// Reader hands over each record on a channel).

import (
	"context"
	"errors"
	"sync"

	"github.com/capper-dev/capper/internal/kafka"
)

// errClosed: the consumer was closed.
var errClosed = errors.New("kafka consumer closed")

// chunk is consecutive records of one partition.
type chunk struct {
	p    *partState
	msgs []kafka.Message
}

// queue is a bounded FIFO of chunks. Partitions keep their order (one
// reader puts each partition's chunks); records of a partition whose
// generation ended are dropped, not handed out.
type queue struct {
	mu      sync.Mutex
	chunks  []chunk
	n, max  int           // records queued; put waits while n >= max
	changed chan struct{} // closed (and replaced) on every change
	closed  bool
}

func newQueue(max int) *queue {
	return &queue{max: max, changed: make(chan struct{})}
}

// broadcast wakes every waiter; mu is held.
func (q *queue) broadcast() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// put appends a partition's records, waiting while the queue is full.
func (q *queue) put(ctx context.Context, c chunk) error {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return errClosed
		}
		if q.n < q.max {
			q.chunks = append(q.chunks, c)
			q.n += len(c.msgs)
			q.broadcast()
			q.mu.Unlock()
			return nil
		}
		ch := q.changed
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// take appends up to max records to dst, waiting until there is one. The
// records handed out are noted in their partition's state (handed), so
// that its generation ends only once they are committed.
func (q *queue) take(ctx context.Context, dst []kafka.Message, max int) ([]kafka.Message, error) {
	for {
		if err := ctx.Err(); err != nil {
			return dst, err // stopping: nothing more is handed out
		}
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return dst, errClosed
		}
		got, dropped := 0, false
		for got < max && len(q.chunks) > 0 {
			c := &q.chunks[0]
			if c.p.closed.Load() { // its generation ended: the next owner reads it
				q.n -= len(c.msgs)
				q.chunks[0] = chunk{}
				q.chunks = q.chunks[1:]
				dropped = true
				continue
			}
			k := min(max-got, len(c.msgs))
			dst = append(dst, c.msgs[:k]...)
			c.p.handed.Store(c.msgs[k-1].Offset + 1)
			c.msgs, got, q.n = c.msgs[k:], got+k, q.n-k
			if len(c.msgs) == 0 {
				q.chunks[0] = chunk{}
				q.chunks = q.chunks[1:]
			}
		}
		if len(q.chunks) == 0 {
			q.chunks = q.chunks[:0:0] // let the backing array go
		}
		if got > 0 || dropped {
			// Room was made: a reader waiting in put must hear of it even
			// when nothing is handed out (a full queue of an ended
			// generation's records, then only its next generation's
			// readers, waiting to put: without this both sides wait on
			// each other for ever).
			q.broadcast()
		}
		if got > 0 {
			q.mu.Unlock()
			return dst, nil
		}
		ch := q.changed
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return dst, ctx.Err()
		}
	}
}

// close wakes and fails every waiter.
func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		q.broadcast()
	}
}
