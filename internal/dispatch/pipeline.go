package dispatch

// The stage pipeline: stage 1 fetches, decodes and decides a batch; stage 2
// writes its outcomes and commits it. Both stages take batches in order.

import (
	"context"
	"fmt"
	"time"

	"github.com/capper-dev/capper/internal/kafka"
)

// Run consumes until ctx ends, then finishes the batches in flight
// (decide, write, commit) within ShutdownTimeout and returns nil. It returns
// an error when the reader fails or a batch in flight could not be finished
// in time.
//
// Two stages overlap: while batch N's outcomes are written and committed,
// batch N+1 is fetched, decoded and decided. Each stage handles one batch at
// a time and hands batches on in order, so a user's intents are still
// decided in partition order and their outcomes written in that order, and
// offsets are still committed only after their outcomes are acknowledged.
func (w *Worker) Run(ctx context.Context) error {
	// work outlives ctx by up to ShutdownTimeout, so that fetched batches are
	// finished and committed after a SIGTERM instead of being redelivered.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	w.step()
	watch, stopWatch := context.WithCancel(work)
	defer stopWatch()
	go w.watchStuck(watch)
	stopTimer := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(w.o.ShutdownTimeout, cancelWork)
		context.AfterFunc(work, func() { t.Stop() })
	})
	defer stopTimer()

	// Two batch buffers: one in each stage. Stage 1 waits for a free one,
	// which is the pipeline's backpressure. A buffer is the messages and
	// their entries (a paced intent is two entries, its hold and its
	// release: reusing them keeps the collector's work per intent down).
	free := make(chan buffers, 2)
	for range 2 {
		free <- buffers{make([]kafka.Message, 0, w.o.BatchSize), make([]entry, 0, w.o.BatchSize)}
	}
	decided := make(chan *batch, 1)
	failed := make(chan struct{}) // closed when stage 2 gives up
	stage2 := make(chan error, 1)
	go func() {
		var err error
		hb := newHeaderBuilder("", "") // stage 2's, reused batch after batch
		for b := range decided {
			if err == nil {
				if err = w.writeAndCommit(work, b, hb); err != nil {
					close(failed)
				}
			}
			close(b.written) // the next batch's early writes may go
			w.holding(-1)
			free <- buffers{b.msgs[:0], b.entries[:0]}
		}
		stage2 <- err
	}()

	err := w.produce(ctx, work, free, decided, failed)
	close(decided)
	if err2 := <-stage2; err2 != nil {
		return err2
	}
	return err
}

// buffers are a batch's arrays, handed from stage 2 back to stage 1 once
// the batch is written and committed (nothing refers to them then).
type buffers struct {
	msgs    []kafka.Message
	entries []entry
}

// produce is stage 1: fetch, decode, decide, hand on.
func (w *Worker) produce(ctx, work context.Context, free chan buffers, out chan<- *batch, failed <-chan struct{}) error {
	prev := make(chan struct{}) // the batch before's written: none
	close(prev)
	for {
		var buf buffers
		select {
		case buf = <-free:
		case <-failed:
			return nil // stage 2 reports why
		}
		msgs, ferr := w.fetch(ctx, buf.msgs)
		if len(msgs) > 0 {
			w.holding(1)
			b, err := w.decideBatch(work, msgs, buf.entries, prev)
			if err != nil {
				return uncommitted(len(msgs), err)
			}
			prev = b.written
			select {
			case out <- b:
			case <-failed:
				return nil
			}
		} else {
			free <- buf
		}
		if ferr != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("fetch send-intents: %w", ferr)
		}
	}
}

// writeAndCommit is stage 2: write every outcome, then commit. The
// headers are cut from hb's arrays: a failed write ends stage 2, so they
// are reused only after a write that returned (nothing reads them then).
func (w *Worker) writeAndCommit(ctx context.Context, b *batch, hb *headerBuilder) error {
	if err := w.writeAll(ctx, w.route(b, hb)); err != nil {
		return uncommitted(len(b.msgs), err)
	}
	if err := w.commit(ctx, b.msgs); err != nil {
		return uncommitted(len(b.msgs), err)
	}
	w.observe(b)
	return nil
}

func uncommitted(n int, err error) error {
	return fmt.Errorf("batch of %d intents left uncommitted (it will be redelivered): %w", n, err)
}

// fetch blocks for the first intent, then collects more until the batch is
// full or BatchWait has passed since the first.
func (w *Worker) fetch(ctx context.Context, msgs []kafka.Message) ([]kafka.Message, error) {
	if br, ok := w.o.Reader.(batchReader); ok {
		return w.fetchBatch(ctx, br, msgs)
	}
	first, err := w.o.Reader.FetchMessage(ctx)
	if err != nil {
		return msgs, err
	}
	msgs = append(msgs, first)
	bctx, cancel := context.WithTimeout(ctx, w.o.BatchWait)
	defer cancel()
	for len(msgs) < w.o.BatchSize {
		m, err := w.o.Reader.FetchMessage(bctx)
		if err != nil {
			if ctx.Err() != nil {
				return msgs, ctx.Err() // stopping: finish what was fetched
			}
			if bctx.Err() != nil {
				return msgs, nil // the batch's wait is over
			}
			return msgs, err
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// fetchBatch is fetch for a Reader that hands over what it has at once.
func (w *Worker) fetchBatch(ctx context.Context, br batchReader, msgs []kafka.Message) ([]kafka.Message, error) {
	msgs, err := br.FetchBatch(ctx, msgs, w.o.BatchSize)
	if err != nil {
		return msgs, err
	}
	bctx, cancel := context.WithTimeout(ctx, w.o.BatchWait)
	defer cancel()
	for len(msgs) < w.o.BatchSize {
		if msgs, err = br.FetchBatch(bctx, msgs, w.o.BatchSize-len(msgs)); err != nil {
			if ctx.Err() != nil {
				return msgs, ctx.Err() // stopping: finish what was fetched
			}
			if bctx.Err() != nil {
				return msgs, nil // the batch's wait is over
			}
			return msgs, err
		}
	}
	return msgs, nil
}
