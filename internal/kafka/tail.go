package kafka

// Following a topic outside any group, a record at a time: each partition
// read by the room's partition reader from the offset asked, its records
// handed on one by one. The control topic's follower reads this way.

import (
	"context"
	"sync"
	"sync/atomic"
)

// Tail reads the partitions of one topic.
type Tail struct {
	o     Options
	topic string
	admin *Admin
	ctx   context.Context
	stop  context.CancelFunc

	mu    sync.Mutex
	parts map[int]*tailPart
}

// tailPart is one partition's reader: its records, and the offset of the
// next one Read hands on.
type tailPart struct {
	cancel context.CancelFunc
	ch     chan Message
	next   int64
	pos    atomic.Int64 // the reader's fetch position
}

// NewTail checks o; nothing is read before Read.
func NewTail(o Options, topic string) (*Tail, error) {
	a, err := NewAdmin(o)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Tail{o: o, topic: topic, admin: a, ctx: ctx, stop: stop, parts: map[int]*tailPart{}}, nil
}

// Admin is the tail's admin client (ends, one-record writes).
func (t *Tail) Admin() *Admin { return t.admin }

// Ends is each partition's end offset now.
func (t *Tail) Ends(ctx context.Context) (map[int]int64, error) {
	_, end, err := t.admin.LogOffsets(ctx, t.topic)
	return end, err
}

// Read blocks for the next record of partition at or after offset (a
// reader per partition, started again when the offset asked is not the
// one after the last record handed on). Broker errors are retried; the
// error is ctx's, or the tail's once closed.
func (t *Tail) Read(ctx context.Context, partition int, offset int64) (Message, error) {
	t.mu.Lock()
	p := t.parts[partition]
	if p == nil || p.next != offset {
		if p != nil {
			p.cancel()
		}
		rctx, cancel := context.WithCancel(t.ctx)
		p = &tailPart{cancel: cancel, ch: make(chan Message, 64), next: offset}
		p.pos.Store(offset)
		t.parts[partition] = p
		ch := p.ch
		go PartitionReader{Dialer: t.o.Dialer(), Brokers: t.o.Brokers, Topic: t.topic, Partition: partition,
			MaxBytes: 4 << 20, MaxWait: t.o.FetchMaxWait, Log: t.o.Logger, Position: &p.pos,
			Hand: func(ctx context.Context, msgs []Message, _ int64) error {
				for _, m := range msgs {
					select {
					case ch <- m:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				return nil
			}}.Read(rctx, offset)
	}
	t.mu.Unlock()
	select {
	case m := <-p.ch:
		t.mu.Lock()
		p.next = m.Offset + 1
		t.mu.Unlock()
		return m, nil
	case <-ctx.Done():
		return Message{}, ctx.Err()
	case <-t.ctx.Done():
		return Message{}, t.ctx.Err()
	}
}

// Fetched is the offset partition's reader fetches from next: past the
// records it read (some maybe not handed on yet) and past control records
// (transaction markers); -1 before Read.
func (t *Tail) Fetched(partition int) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.parts[partition]; p != nil {
		return p.pos.Load()
	}
	return -1
}

// Close stops every reader and closes the tail's admin client.
func (t *Tail) Close() error {
	t.stop()
	return t.admin.Close()
}
