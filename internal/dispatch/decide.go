package dispatch

// Deciding with retries: nothing undecided is forwarded or committed.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/capper-dev/capper/internal/capping"
	"github.com/capper-dev/capper/internal/control"
)

// decide asks the Decider until every request has an answer. Requests that
// failed are retried with capped exponential backoff (nothing undecided is
// forwarded and nothing is committed meanwhile), unless FailOpen is set:
// then they are answered FailOpen. A request the engine calls invalid is
// answered Invalid (dead-lettered), never retried. A request that waits for
// an earlier one of its user (capping.ErrEarlierUndecided) is retried with
// it, after it in batch order, and is never failed open for it: once the
// earlier one is answered FailOpen, it is decided.
//
// Campaign control comes first, at each attempt's time (control.go): a
// request of a stopped campaign, or past its send-by, is Cancelled; one of
// a paused campaign is Deferred for the pause; neither reaches the engine,
// nor is counted. sendBy[i] is request i's own send-by (zero: none). ctl[i]
// names the control record that decided request i, when one did.
//
// An attempt whose answer was lost (a timeout, a WAIT that failed) may
// have been recorded in Redis all the same: lost[i] are request i's such
// attempts. A later answer Duplicate at one of those
// times is that attempt's: its first delivery, not a redelivery
// (ownDuplicates). One that campaign control answers (cancelled, waiting)
// is given back at once, and its user's later intents wait for that: the
// send it may have left would count for them (giveback.go). Any other
// that ends undelivered is given back by decideBatch.
func (w *Worker) decide(ctx context.Context, reqs []capping.Request, sendBy []time.Time) (out []capping.Decision, ctl []string, lost [][]lostAttempt, _ error) {
	out = make([]capping.Decision, len(reqs))
	lost = make([][]lostAttempt, len(reqs))
	ctl = make([]string, len(reqs))
	pending := make([]int, len(reqs))
	for i := range pending {
		pending[i] = i
	}
	sub := make([]capping.Request, 0, len(reqs))
	subOf := make([]int, 0, len(reqs)) // sub[j] is reqs[subOf[j]]
	byControl := make([]bool, len(reqs))
	deadline := make([]time.Time, len(reqs)) // a deferral past it cancels
	waits := make([]bool, len(reqs))         // waiting for an earlier one, this attempt
	blocked := map[uint64]bool{}             // users with a request not decided, this attempt
	held := make([]bool, len(reqs))          // not sent: an earlier one of its user is owed a give-back
	owes := map[uint64]bool{}                // users with such a request, this attempt
	backoff := w.retryBackoff()
	for attempt := 1; len(pending) > 0; attempt++ {
		// The decision time is taken per attempt: a retried intent is decided
		// now, not when it first arrived. The control state is read after
		// it: a stop applied before this time is seen.
		now := w.o.Now().Truncate(time.Millisecond)
		snap := w.controlState()
		sub, subOf = sub[:0], subOf[:0]
		clear(held)
		clear(owes)
		for _, i := range pending {
			r := reqs[i]
			if owes[r.UserID] {
				// An earlier one ends undelivered after a lost answer:
				// the send it may have left counts until it is given
				// back, so this one waits for that (giveback.go).
				held[i] = true
				continue
			}
			v := snap.Check(r.Campaign, w.exempt(r.Category), sendBy[i], now, w.o.MaxPause)
			byControl[i], deadline[i], ctl[i] = v.Action != control.Go, v.SendBy, ""
			if v.By != nil {
				ctl[i] = v.By.Pos.String()
			}
			if byControl[i] {
				out[i] = w.controlDecision(v, now)
				if len(lost[i]) > 0 {
					owes[r.UserID] = true
				}
				continue
			}
			r.At = now
			r.Planned = withoutStopped(snap, r.Planned)
			sub, subOf = append(sub, r), append(subOf, i)
		}
		var ds []capping.Decision
		var err error
		var sent time.Time
		var sentPolicy string // the policy in use when sent (a failed call names none)
		if len(sub) > 0 {
			if w.o.Policy != nil {
				sentPolicy = w.o.Policy()
			}
			t0 := time.Now()
			sent = t0
			ds, err = w.o.Decider.Decide(ctx, sub)
			w.m.decision.Observe(time.Since(t0).Seconds())
			if err != nil && ctx.Err() != nil {
				return nil, nil, nil, fmt.Errorf("decide: %w", err)
			}
		}
		// still: what is retried, in batch order; failed: how many of
		// them Redis could not decide (the others wait for one of those).
		var still, waiting, owed []int
		clear(waits)
		clear(blocked)
		var lastErr error
		failed, j := 0, 0
		for _, i := range pending {
			uid := reqs[i].UserID
			if held[i] {
				still, waiting = append(still, i), append(waiting, i)
				waits[i], blocked[uid] = true, true
				continue
			}
			if byControl[i] {
				switch {
				case blocked[uid]:
					// Answered without the engine, but after a request of
					// its user that has no answer yet: it waits for it.
					still, waiting = append(still, i), append(waiting, i)
					waits[i] = true
				case len(lost[i]) > 0:
					owed = append(owed, i)
				}
				continue
			}
			var d capping.Decision
			if err == nil {
				d = ds[j]
			}
			j++
			switch {
			case err != nil:
				lastErr = err
				// Any failed call may have run: go-redis retries a call
				// whose connection broke, so even a refused dial can be
				// the last of several tries, an earlier one of which ran.
				lost[i] = append(lost[i], lostAttempt{at: now, sent: sent, policy: sentPolicy})
			case errors.Is(d.Err, capping.ErrInvalidRequest):
				// The policy that decides it does not know its channel
				// or category (it changed since the intent was decoded),
				// or a check the decoder lacks: no retry can help.
				out[i] = capping.Decision{Outcome: capping.Invalid, Err: d.Err, At: now}
				continue
			case errors.Is(d.Err, capping.ErrEarlierUndecided):
				still, waiting = append(still, i), append(waiting, i)
				waits[i], blocked[uid] = true, true
				continue
			case d.Err != nil:
				lastErr = d.Err
				lost[i] = append(lost[i], lostAttempt{at: now, sent: sent, policy: cmp.Or(d.Policy, sentPolicy)})
				if failed < 10 {
					// Ids only at debug: logs above it never name a user.
					w.o.Logger.Debug("intent not decided", "user", uid, "intent", reqs[i].IntentID, "error", lastErr)
				}
			default:
				out[i] = d
				if d.Outcome == capping.Deferred && !deadline[i].IsZero() && d.NotBefore.After(deadline[i]) {
					// Its slot (or the end of quiet hours) comes after its
					// send-by: it would never be delivered in time.
					out[i] = capping.Decision{Outcome: capping.Cancelled, Reason: capping.ReasonSendBy, At: now,
						Limit: d.Limit, HeldFor: d.HeldFor, Policy: d.Policy}
				}
				continue
			}
			failed++
			blocked[uid] = true
			still = append(still, i)
		}
		if len(owed) > 0 {
			// Answered for good, undelivered, after a lost answer: given
			// back before their users' later intents are decided.
			if err := w.giveBack(ctx, reqs, owed, lost); err != nil {
				return nil, nil, nil, fmt.Errorf("decide: %w", err)
			}
			for _, i := range owed {
				lost[i] = nil
			}
		}
		if len(still) == 0 {
			w.setReady("redis")
			ownDuplicates(out, lost)
			return out, ctl, lost, nil
		}
		if failed == 0 && len(owed) > 0 {
			// Only those that waited for the give-backs are left.
			pending = still
			continue
		}
		if w.o.FailOpen {
			if failed > 0 {
				w.o.Logger.Warn("redis could not decide; failing open as configured",
					"intents", failed, "error", lastErr)
			}
			// The failed ones are answered; those that waited for them
			// are decided next.
			for _, i := range still {
				if !waits[i] {
					out[i] = capping.Decision{Outcome: capping.FailOpen, At: now}
				}
			}
			pending = waiting
			continue
		}
		w.setNotReady("redis", fmt.Errorf("redis cannot decide %d intents: %w", failed, lastErr))
		w.m.redisRetries.Add(float64(len(still)))
		if attempt == 1 || attempt%10 == 0 {
			w.o.Logger.Warn("redis could not decide; waiting and retrying", "intents", len(still),
				"attempt", attempt, "backoff", backoff.current(), "error", lastErr)
		}
		if err := backoff.wait(ctx); err != nil {
			return nil, nil, nil, fmt.Errorf("decide: %w (last redis error: %v)", err, lastErr)
		}
		pending = still
	}
	ownDuplicates(out, lost)
	return out, ctl, lost, nil
}
