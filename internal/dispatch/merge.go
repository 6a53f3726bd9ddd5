package dispatch

// One Reader over two: the intents' (and delivery statuses') consumer group
// and the delay tiers' due records, so that one worker decides both in the
// same batches and commits each record where it came from.

import (
	"context"
	"errors"
	"sync"

	"github.com/segmentio/kafka-go"
)

// Merged reads from both readers; commits go to the reader that gave the
// record's topic. It implements Reader, and Stats when both do.
type Merged struct {
	readers [2]Reader
	out     chan fetched
	stop    context.CancelFunc
	wg      sync.WaitGroup

	mu   sync.Mutex
	from map[string]int // topic -> index in readers
}

type fetched struct {
	m   kafka.Message
	err error
	i   int
}

// Merge returns a Reader over a and b. Each has a goroutine that fetches
// one record ahead (kafka-go's readers buffer more anyway); Close stops them.
func Merge(a, b Reader) *Merged {
	ctx, stop := context.WithCancel(context.Background())
	m := &Merged{readers: [2]Reader{a, b}, out: make(chan fetched), stop: stop, from: map[string]int{}}
	for i, r := range m.readers {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			for {
				msg, err := r.FetchMessage(ctx)
				if ctx.Err() != nil {
					return
				}
				select {
				case m.out <- fetched{msg, err, i}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
	}
	return m
}

// FetchMessage returns the next record of either reader, or the first
// reader's error.
func (m *Merged) FetchMessage(ctx context.Context) (kafka.Message, error) {
	select {
	case f := <-m.out:
		if f.err == nil {
			m.mu.Lock()
			m.from[f.m.Topic] = f.i
			m.mu.Unlock()
		}
		return f.m, f.err
	case <-ctx.Done():
		return kafka.Message{}, ctx.Err()
	}
}

// CommitMessages commits each record with the reader that gave it.
func (m *Merged) CommitMessages(ctx context.Context, msgs ...kafka.Message) error {
	var parts [2][]kafka.Message
	m.mu.Lock()
	for _, msg := range msgs {
		i := m.from[msg.Topic]
		parts[i] = append(parts[i], msg)
	}
	m.mu.Unlock()
	var errs []error
	for i, p := range parts {
		if len(p) > 0 {
			errs = append(errs, m.readers[i].CommitMessages(ctx, p...))
		}
	}
	return errors.Join(errs...)
}

// Stats sums the rebalances of both readers.
func (m *Merged) Stats() kafka.ReaderStats {
	var s kafka.ReaderStats
	for _, r := range m.readers {
		if rc, ok := r.(rebalanceCounter); ok {
			s.Rebalances += rc.Stats().Rebalances
		}
	}
	return s
}

// Close stops the fetching goroutines (not the readers: their owner closes
// them). A record fetched ahead is not committed and is read again.
func (m *Merged) Close() {
	m.stop()
	m.wg.Wait()
}
