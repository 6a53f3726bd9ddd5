package dispatch

// Reading one partition (the Kafka room's partition reader), each fetch's
// records put on the worker's queue whole: at once, or as a delay tier, a
// lane or the parked topic lets them go.

import (
	"context"

	"github.com/capper-dev/capper/internal/kafka"
)

// Fetch sizes: an intents' fetch may be large (a backlog drains in big
// reads); a tier partition waits at its head, so it reads little ahead.
const (
	inputFetchBytes = 1 << 20
	tierFetchBytes  = 256 << 10
)

// fetchConfig is how one partition is read.
type fetchConfig struct {
	maxBytes int
	// release, when set, says how many records at the head of msgs may be
	// handed out now, waiting until at least one may: a delay tier's when
	// they are due (releaseDue), a lane's when its budget releases them
	// (pacing.Gate), the parked topic's when their pause ends
	// (releaseParked). hwm is the partition's high watermark at the fetch.
	release func(ctx context.Context, p *partState, msgs []kafka.Message, hwm int64) (int, error)
}

// readPartition reads p from offset until ctx ends, putting every record
// on the queue in order (the Kafka room's partition reader).
func (c *Consumer) readPartition(ctx context.Context, p *partState, offset int64, fc fetchConfig) {
	kafka.PartitionReader{Dialer: c.dialer, Brokers: c.o.Kafka.Brokers, Topic: p.tp.topic, Partition: p.tp.partition,
		MaxBytes: fc.maxBytes, MaxWait: c.o.Kafka.FetchMaxWait, Log: c.log,
		Started: func(offset int64) {
			if p.start.Load() < 0 {
				p.start.Store(offset)
			}
		},
		Hand: func(ctx context.Context, msgs []kafka.Message, hwm int64) error { return c.hand(ctx, p, msgs, hwm, fc) },
	}.Read(ctx, offset)
}

// hand puts a fetch's records on the queue: at once, or as fc.release
// lets them go, in order (nothing else waits for it).
func (c *Consumer) hand(ctx context.Context, p *partState, msgs []kafka.Message, hwm int64, fc fetchConfig) error {
	if fc.release == nil {
		return c.q.put(ctx, chunk{p, msgs})
	}
	for len(msgs) > 0 {
		n, err := fc.release(ctx, p, msgs, hwm)
		if err != nil {
			return err
		}
		if err := c.q.put(ctx, chunk{p, msgs[:n:n]}); err != nil {
			return err
		}
		msgs = msgs[n:]
	}
	return nil
}

// releaseDue lets a delay tier's records go as they are due (a timer, no
// polling). A record without a readable due time is due at once: the
// worker dead-letters it, naming the header.
func (c *Consumer) releaseDue(ctx context.Context, _ *partState, msgs []kafka.Message, _ int64) (int, error) {
	for {
		n := 0
		for n < len(msgs) {
			if at, err := dueAt(msgs[n].Headers); err == nil && c.now().Before(at) {
				break
			}
			n++
		}
		if n > 0 {
			return n, nil
		}
		at, _ := dueAt(msgs[0].Headers)
		if err := c.sleep(ctx, at.Sub(c.now())); err != nil {
			return 0, err
		}
	}
}
