package dispatch

// Reading one partition: fetch requests to its leader, each batch decoded
// into records and put on the worker's queue whole. Broker errors are
// retried (a new leader, a restarted broker) for as long as the partition
// is assigned: a partition is never given up.

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/segmentio/kafka-go"
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
// on the queue in order.
func (c *Consumer) readPartition(ctx context.Context, p *partState, offset int64, fc fetchConfig) {
	log := c.log.With("topic", p.tp.topic, "partition", p.tp.partition)
	retry := &backoff{next: readRetryInitial, max: readRetryMax}
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 && retry.wait(ctx) != nil {
			return
		}
		conn, next, err := c.open(ctx, p, offset)
		if err != nil {
			if ctx.Err() == nil && attempt >= 2 {
				log.Warn("kafka: cannot read a partition; retrying", "error", err)
			}
			continue
		}
		offset = next
		if p.start.Load() < 0 {
			p.start.Store(offset)
		}
		offset, err = c.fetchFrom(ctx, conn, p, offset, fc)
		_ = conn.Close()
		if ctx.Err() != nil {
			return
		}
		attempt = 0
		retry.reset(readRetryInitial)
		if !errors.Is(err, errReconnect) {
			log.Warn("kafka: fetch failed; reconnecting", "error", err)
			attempt = 1
		}
	}
}

// errReconnect: the partition moved (a new leader) or the connection is
// done; a new one is opened at once.
var errReconnect = errors.New("reconnect")

// open connects to the partition's leader and resolves offset (the first
// or last offset for a partition with none committed; the first when the
// committed one is gone with retention).
func (c *Consumer) open(ctx context.Context, p *partState, offset int64) (*kafka.Conn, int64, error) {
	var err error
	for _, broker := range c.o.Kafka.Brokers {
		var conn *kafka.Conn
		if conn, err = c.dialer.DialLeader(ctx, "tcp", broker, p.tp.topic, p.tp.partition); err != nil {
			continue
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		first, last, oerr := conn.ReadOffsets()
		if oerr != nil {
			_ = conn.Close()
			return nil, 0, oerr
		}
		switch {
		case offset == kafka.FirstOffset, offset >= 0 && offset < first:
			offset = first
		case offset == kafka.LastOffset:
			offset = last
		}
		if _, err = conn.Seek(offset, kafka.SeekAbsolute); err != nil {
			_ = conn.Close()
			return nil, 0, err
		}
		_ = conn.SetDeadline(time.Time{})
		return conn, offset, nil
	}
	return nil, 0, err
}

// fetchFrom fetches until ctx ends or the connection must be replaced; it
// returns the offset to go on from.
func (c *Consumer) fetchFrom(ctx context.Context, conn *kafka.Conn, p *partState, offset int64, fc fetchConfig) (int64, error) {
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) }) // a fetch in flight ends with the generation
	defer stop()
	wait := c.o.Kafka.FetchMaxWait
	for ctx.Err() == nil {
		_ = conn.SetReadDeadline(time.Now().Add(wait + 10*time.Second))
		batch := conn.ReadBatchWith(kafka.ReadBatchConfig{MinBytes: 1, MaxBytes: fc.maxBytes, MaxWait: wait})
		var msgs []kafka.Message
		for {
			m, err := batch.ReadMessage()
			if err != nil {
				break
			}
			msgs = append(msgs, m)
		}
		hwm := batch.HighWaterMark()
		err := batch.Close()
		if len(msgs) > 0 {
			offset = msgs[len(msgs)-1].Offset + 1
			if perr := c.hand(ctx, p, msgs, hwm, fc); perr != nil {
				return offset, perr
			}
		}
		switch {
		case err == nil, errors.Is(err, io.EOF), errors.Is(err, kafka.RequestTimedOut):
		case errors.Is(err, kafka.OffsetOutOfRange):
			return offset, errReconnect // open resolves it against the log's bounds
		case errors.Is(err, kafka.NotLeaderForPartition), errors.Is(err, kafka.UnknownTopicOrPartition),
			errors.Is(err, kafka.LeaderNotAvailable), errors.Is(err, io.ErrNoProgress):
			return offset, errReconnect
		case ctx.Err() != nil:
			return offset, ctx.Err()
		default:
			return offset, err
		}
	}
	return offset, ctx.Err()
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

// A partition's reader retries a broker's errors from 100ms, doubling to
// 5s: it never gives a partition up.
const (
	readRetryInitial = 100 * time.Millisecond
	readRetryMax     = 5 * time.Second
)
