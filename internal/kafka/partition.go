package kafka

// Reading one partition: fetch requests to its leader, each fetch's
// records handed on whole, in order. Broker errors are retried (a new
// leader, a restarted broker) for as long as the reader runs: a partition
// is never given up. The worker's readers, the users' limits applier's and
// the followers of the control and user-limits topics all read this way.

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/capper-dev/capper/internal/retry"
	kafkago "github.com/segmentio/kafka-go"
)

// PartitionReader reads one partition. Dialer, Brokers and the partition
// are required.
type PartitionReader struct {
	Dialer    *kafkago.Dialer
	Brokers   []string
	Topic     string
	Partition int
	// MaxBytes bounds a fetch; MaxWait is how long a fetch waits for
	// records (an empty partition answers after it); after an empty
	// answer, the next waits idleWait if that is longer (a record written
	// ends a wait at once: an idle partition is only asked less often).
	MaxBytes int
	MaxWait  time.Duration
	// Started, when set, learns the offset the reader starts from once
	// resolved (the first connection): a claim's Start.
	Started func(offset int64)
	// Hand takes a fetch's records, in order, and the partition's high
	// watermark; it may wait. An error ends the connection, and the reader
	// goes on after the records it was given.
	Hand func(ctx context.Context, msgs []Message, hwm int64) error
	// Failed, when set, learns of each failed connection or fetch (the
	// reader logs and retries them).
	Failed func(err error)
	// Position, when set, holds the offset the reader fetches from next,
	// past control records (transaction markers) that are no records.
	Position *atomic.Int64
	Log      *slog.Logger // nil: none
}

// Read reads from offset (or kafka-go's FirstOffset or LastOffset; an
// offset below the log's start is its start) until ctx ends.
func (r PartitionReader) Read(ctx context.Context, offset int64) {
	log := r.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("topic", r.Topic, "partition", r.Partition)
	backoff, started := &retry.Backoff{Initial: readRetryInitial, Max: readRetryMax}, false
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			if backoff.Wait(ctx) != nil {
				return
			}
		}
		f, next, err := r.open(ctx, offset)
		if err != nil && ctx.Err() == nil && r.Failed != nil {
			r.Failed(err)
		}
		if err != nil {
			if ctx.Err() == nil && attempt >= 2 {
				log.Warn("kafka: cannot read a partition; retrying", "error", err)
			}
			continue
		}
		offset = next
		if !started && r.Started != nil {
			r.Started(offset)
		}
		started = true
		offset, err = r.fetchFrom(ctx, f, offset)
		_ = f.Close()
		if ctx.Err() != nil {
			return
		}
		attempt = 0
		backoff.Reset()
		if !errors.Is(err, errReconnect) {
			if r.Failed != nil {
				r.Failed(err)
			}
			log.Warn("kafka: fetch failed; reconnecting", "error", err)
			attempt = 1
		}
	}
}

// A partition's reader retries a broker's errors from 100ms, doubling to
// 5s.
const (
	readRetryInitial = 100 * time.Millisecond
	readRetryMax     = 5 * time.Second
)

// idleWait is how long a fetch of a partition that was empty at the last
// waits: every lane, retry lane, delay tier and parked partition a worker
// reads is asked at most once a second while it stays empty (each ask
// costs about 50 us of CPU), not once per MaxWait.
const idleWait = time.Second

// errReconnect: the partition moved (a new leader) or the connection is
// done; a new one is opened at once.
var errReconnect = errors.New("reconnect")

// open connects to the partition's leader and resolves offset.
func (r PartitionReader) open(ctx context.Context, offset int64) (*fetcher, int64, error) {
	var err error
	for _, broker := range r.Brokers {
		var p kafkago.Partition
		if p, err = r.Dialer.LookupPartition(ctx, "tcp", broker, r.Topic, r.Partition); err != nil {
			continue
		}
		var f *fetcher
		if f, err = dialLeader(ctx, r.Dialer, broker, p); err != nil {
			continue
		}
		_ = f.kc.SetDeadline(time.Now().Add(10 * time.Second))
		first, last, oerr := f.kc.ReadOffsets()
		if oerr != nil {
			_ = f.Close()
			return nil, 0, oerr
		}
		switch {
		case offset == kafkago.FirstOffset, offset >= 0 && offset < first:
			offset = first
		case offset == kafkago.LastOffset:
			offset = last
		}
		_ = f.kc.SetDeadline(time.Time{})
		return f, offset, nil
	}
	return nil, 0, err
}

// fetchFrom fetches until ctx ends or the connection must be replaced; it
// returns the offset to go on from.
func (r PartitionReader) fetchFrom(ctx context.Context, f *fetcher, offset int64) (int64, error) {
	stop := context.AfterFunc(ctx, func() { _ = f.conn.SetDeadline(time.Now()) }) // a fetch in flight ends with the reader
	defer stop()
	wait := r.MaxWait
	for ctx.Err() == nil {
		_ = f.conn.SetDeadline(time.Now().Add(wait + 10*time.Second))
		got, err := f.fetch(offset, r.MaxBytes, wait)
		wait = r.MaxWait
		if err == nil && len(got.msgs) == 0 {
			wait = max(r.MaxWait, idleWait)
		}
		if len(got.msgs) > 0 {
			offset = got.msgs[len(got.msgs)-1].Offset + 1
			if herr := r.Hand(ctx, got.msgs, got.hwm); herr != nil {
				return offset, herr
			}
		}
		if err == nil && got.next > offset { // past control records
			offset = got.next
		}
		if r.Position != nil {
			r.Position.Store(offset)
		}
		switch {
		case err == nil, errors.Is(err, kafkago.RequestTimedOut):
		case errors.Is(err, kafkago.OffsetOutOfRange):
			return offset, errReconnect // open resolves it against the log's bounds
		case errors.Is(err, kafkago.NotLeaderForPartition), errors.Is(err, kafkago.UnknownTopicOrPartition),
			errors.Is(err, kafkago.LeaderNotAvailable):
			return offset, errReconnect
		case ctx.Err() != nil:
			return offset, ctx.Err()
		default:
			return offset, err
		}
	}
	return offset, ctx.Err()
}
