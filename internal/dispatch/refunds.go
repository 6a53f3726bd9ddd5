package dispatch

// Refunds: a delivery-status record whose status refunds gives the send's
// slot back. Applied before the batch's intents are decided, and retried
// like decisions: nothing is committed until every refund has an answer.

import (
	"context"
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"

	"github.com/capper-dev/capper/internal/capping"
)

// Results of a delivery-status record (capper_refunds_total{result}).
const (
	refundIgnored = "ignored" // its status does not refund
	refundFailed  = "failed"  // Redis could not answer and the worker fails open: kept (over-counts)
)

// refundResults are the labels of capper_refunds_total.
var refundResults = []string{capping.RefundApplied.String(), capping.RefundUnknown.String(), capping.RefundNothing.String(), refundIgnored, refundFailed}

type refundReq struct {
	i int // the entry's index in the batch
	r capping.RefundRequest
}

// readStatus decodes a delivery-status record; ok: it asks for a refund.
// An invalid one is dead-lettered like an invalid intent.
func (w *Worker) readStatus(m *kafka.Message, e *entry) (capping.RefundRequest, bool) {
	s, err := w.o.Decoder.DecodeStatus(m.Value)
	if err != nil {
		e.setUnreadable(err)
		return capping.RefundRequest{}, false
	}
	e.kind = kindStatus
	if !w.refunds[s.Status] {
		e.refund = refundIgnored
		return capping.RefundRequest{}, false
	}
	return capping.RefundRequest{UserID: s.UserID, IntentID: s.ID}, true
}

// refund applies the batch's refunds, retrying those Redis did not answer
// with backoff (with FailOpen, they are given up after the first failure:
// a refund not applied only over-counts).
func (w *Worker) refund(ctx context.Context, entries []entry, reqs []refundReq) error {
	backoff := w.o.RetryInitial
	for attempt := 1; len(reqs) > 0; attempt++ {
		rs := make([]capping.RefundRequest, len(reqs))
		for k, r := range reqs {
			rs[k] = r.r
		}
		out, err := w.o.Refunder.Refund(ctx, rs)
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("refund: %w", err)
		}
		var still []refundReq
		var lastErr error
		for k, r := range reqs {
			switch {
			case err != nil:
				lastErr = err
			case errors.Is(out[k].Err, capping.ErrInvalidRequest):
				// The decoder checks the id; this would be a bug, and
				// retrying cannot help.
				entries[r.i].refund = refundFailed
				continue
			case out[k].Err != nil:
				lastErr = out[k].Err
			default:
				entries[r.i].refund = out[k].Result.String()
				continue
			}
			still = append(still, r)
		}
		if len(still) == 0 {
			return nil
		}
		if w.o.FailOpen {
			for _, r := range still {
				entries[r.i].refund = refundFailed
			}
			w.o.Logger.Warn("redis could not apply refunds; failing open as configured (the sends stay counted)",
				"refunds", len(still), "error", lastErr)
			return nil
		}
		w.setNotReady("redis", fmt.Errorf("redis cannot apply %d refunds: %w", len(still), lastErr))
		if attempt == 1 || attempt%10 == 0 {
			w.o.Logger.Warn("redis could not apply refunds; waiting and retrying", "refunds", len(still),
				"attempt", attempt, "backoff", backoff, "error", lastErr)
		}
		if err := sleep(ctx, backoff); err != nil {
			return fmt.Errorf("refund: %w (last redis error: %v)", err, lastErr)
		}
		backoff = min(2*backoff, w.o.RetryMax)
		reqs = still
	}
	return nil
}
