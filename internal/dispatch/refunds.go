package dispatch

// Refunds: a delivery-status record whose status refunds gives the send's
// slot back. Applied before the batch's intents are decided, and retried
// like decisions: nothing is committed until every refund has an answer.

import (
	"context"
	"errors"
	"fmt"

	"github.com/capper-dev/capper/internal/kafka"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/pacing"
)

// Results of a delivery-status record (capper_refunds_total{result}).
const (
	refundIgnored = "ignored" // its status does not refund
	refundFailed  = "failed"  // Redis could not answer and the worker fails open: kept (over-counts)
	// refundThrottled: a throttled send (pacing.StatusThrottled): no refund, its
	// budget slows (throttle.go).
	refundThrottled = "throttled"
)

// refundResults are the labels of capper_refunds_total.
var refundResults = []string{capping.RefundApplied.String(), capping.RefundUnknown.String(), capping.RefundNothing.String(), refundIgnored, refundFailed, refundThrottled}

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
	if s.Status == pacing.StatusThrottled {
		e.refund = refundThrottled
		if s.Budget != "" {
			e.throttle = &throttleReport{budget: s.Budget, retryAfter: s.RetryAfter}
		}
		if s.Back != nil {
			e.kind = kindIntent // decided or held as the intent it hands back
			return w.readHandBack(m, e, &s), true
		}
		return capping.RefundRequest{}, false
	}
	if !w.refunds[s.Status] {
		e.refund = refundIgnored
		return capping.RefundRequest{}, false
	}
	return capping.RefundRequest{UserID: s.UserID, IntentID: s.ID}, true
}

// refund applies the batch's refunds, retrying those Redis did not answer
// (applyRefunds).
func (w *Worker) refund(ctx context.Context, entries []entry, reqs []refundReq) error {
	if len(reqs) == 0 {
		return nil
	}
	rs := make([]capping.RefundRequest, len(reqs))
	for k, r := range reqs {
		rs[k] = r.r
	}
	results, err := w.applyRefunds(ctx, rs, "refunds")
	if err != nil {
		return err
	}
	for k, r := range reqs {
		entries[r.i].refund = results[k]
	}
	return nil
}

// applyRefunds asks the Refunder until every request has an answer, with
// backoff (with FailOpen, those Redis could not answer are given up after
// the first failure: a refund or give-back not applied only over-counts).
// The result of each is its capper_refunds_total label.
func (w *Worker) applyRefunds(ctx context.Context, reqs []capping.RefundRequest, what string) ([]string, error) {
	for _, r := range reqs {
		if r.Forget { // (stage 1's, like decide: recent is its own)
			w.recent.forget(r.UserID, r.IntentID)
		}
	}
	results := make([]string, len(reqs))
	pending := make([]int, len(reqs))
	for k := range pending {
		pending[k] = k
	}
	backoff := w.retryBackoff()
	for attempt := 1; len(pending) > 0; attempt++ {
		rs := make([]capping.RefundRequest, len(pending))
		for k, i := range pending {
			rs[k] = reqs[i]
		}
		out, err := w.o.Refunder.Refund(ctx, rs)
		if err != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		var still []int
		var lastErr error
		for k, i := range pending {
			switch {
			case err != nil:
				lastErr = err
			case errors.Is(out[k].Err, capping.ErrInvalidRequest):
				// The decoder checks the id; this would be a bug, and
				// retrying cannot help.
				results[i] = refundFailed
				continue
			case out[k].Err != nil:
				lastErr = out[k].Err
			default:
				results[i] = out[k].Result.String()
				continue
			}
			still = append(still, i)
		}
		if len(still) == 0 {
			return results, nil
		}
		if w.o.FailOpen {
			for _, i := range still {
				results[i] = refundFailed
			}
			w.o.Logger.Warn("redis could not apply "+what+"; failing open as configured (the sends stay counted)",
				"count", len(still), "error", lastErr)
			return results, nil
		}
		w.setNotReady("redis", fmt.Errorf("redis cannot apply %d %s: %w", len(still), what, lastErr))
		if attempt == 1 || attempt%10 == 0 {
			w.o.Logger.Warn("redis could not apply "+what+"; waiting and retrying", "count", len(still),
				"attempt", attempt, "backoff", backoff.Current(), "error", lastErr)
		}
		if err := backoff.Wait(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w (last redis error: %v)", what, err, lastErr)
		}
		pending = still
	}
	return results, nil
}
