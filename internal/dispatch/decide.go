package dispatch

// Deciding with retries: nothing undecided is forwarded or committed. Every
// verdict is capping's (capping/verdicts.go); the worker only makes the
// attempts, waits between them, and gives back what a lost answer may have
// counted.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/capper-dev/capper/internal/capping"
)

// decide asks the Decider until every request has an answer. Requests that
// failed are retried with the worker's backoff (nothing undecided is
// forwarded and nothing is committed meanwhile), unless FailOpen is set:
// then they are answered FailOpen. A request the engine calls invalid is
// answered Invalid (dead-lettered), never retried. A request that waits for
// an earlier one of its user (capping.ErrEarlierUndecided) is retried with
// it, after it in batch order, and is never failed open for it: once the
// earlier one is answered FailOpen, it is decided.
//
// Each attempt is decided at its own time, with the campaign control state
// read after that time (a stop applied before it is seen).
//
// An attempt whose answer was lost (a timeout, a WAIT that failed) may
// have been recorded in Redis all the same (giveback.go): a later answer
// Duplicate at one of its times is its first delivery (ownDuplicate); one
// that ends undelivered is given back before its user's later intents are
// decided, which wait for that.
//
// owns[i] (nil, or as long as reqs) are attempts of request i made before
// this batch whose sends may still count (a handed-back send's throttled
// delivery whose give-back Redis did not apply): lost answers, as above.
//
// It calls early (when not nil) with the answers so far whenever some
// requests must wait (for a retry, or for the give-back of a lost answer):
// every request but those in still has its final one in out. The batch's
// deliveries decided then need not wait for their batch-mates
// (writeEarly).
func (w *Worker) decide(ctx context.Context, reqs []capping.Request, owns [][]lostAttempt, early func(out []capping.Decision, still []int)) ([]capping.Decision, error) {
	a := newAttempts(reqs, owns)
	backoff := w.retryBackoff()
	for attempt := 1; len(a.pending) > 0; attempt++ {
		w.step()
		now := w.o.Now().Truncate(time.Millisecond)
		w.recent.at(now)
		sub := a.begin(now, w.campaigns())
		var ds []capping.Decision
		var err error
		var sent lostAttempt // what a lost answer of this attempt leaves
		if len(sub) > 0 {
			sent = lostAttempt{at: now}
			if w.o.Policy != nil {
				sent.policy = w.o.Policy()
			}
			began := time.Now()
			ds, err = w.o.Decider.Decide(ctx, sub)
			w.m.decision.Observe(time.Since(began).Seconds())
			if err != nil && ctx.Err() != nil {
				return nil, fmt.Errorf("decide: %w", err)
			}
		}
		failed, lastErr := a.answer(ds, err, sent, &w.recent, w.o.Logger)
		owed := a.owed()
		if early != nil && (failed > 0 || len(owed) > 0) {
			// Batch-mates wait (for a give-back, or a retry): what is
			// decided for good may go now.
			early(a.out, append(slices.Clone(a.still), owed...))
		}
		if len(owed) > 0 {
			// Answered for good, undelivered, after a lost answer: given
			// back before their users' later intents are decided.
			if err := w.giveBack(ctx, reqs, owed, a.lost); err != nil {
				return nil, fmt.Errorf("decide: %w", err)
			}
			a.settle(owed)
		}
		switch {
		case len(a.still) == 0:
			w.setReady("redis")
			return a.out, nil
		case failed == 0:
			// Only those that waited for an earlier one of their user
			// are left: they go at once.
			a.pending = a.still
			continue
		case w.o.FailOpen:
			w.o.Logger.Warn("redis could not decide; failing open as configured", "intents", failed, "error", lastErr)
			a.failOpen(now)
			continue
		}
		w.setNotReady("redis", fmt.Errorf("redis cannot decide %d intents: %w", failed, lastErr))
		w.m.redisRetries.Add(float64(len(a.still)))
		if attempt == 1 || attempt%10 == 0 {
			w.o.Logger.Warn("redis could not decide; waiting and retrying", "intents", len(a.still),
				"attempt", attempt, "backoff", backoff.Current(), "error", lastErr)
		}
		if err := backoff.Wait(ctx); err != nil {
			return nil, fmt.Errorf("decide: %w (last redis error: %v)", err, lastErr)
		}
		a.pending = a.still
	}
	return a.out, nil
}

// campaigns is the campaign control a request is decided by now (nil:
// no control; its own send-by still holds). It is asked per held and per
// released lane record, from stage 1 and the lanes' readers: it is made
// once per control state, and never changed once made.
func (w *Worker) campaigns() *capping.Campaigns {
	if w.o.Control == nil {
		return nil
	}
	s := w.o.Control.Load()
	if c := w.campaignsAt.Load(); c != nil && c.State == s {
		return c
	}
	c := &capping.Campaigns{State: s, MaxPause: w.o.MaxPause, Recheck: w.o.Tiers[0].Delay}
	w.campaignsAt.Store(c)
	return c
}

// attempts is the state of one batch's decision across its attempts.
type attempts struct {
	reqs []capping.Request
	out  []capping.Decision
	// lost[i] are request i's attempts whose answers were lost.
	lost [][]lostAttempt
	// pending: the requests this attempt decides, in batch order; still:
	// those it leaves for the next; waits[i]: i waits for an earlier one
	// of its user (it is not failed open).
	pending, still []int
	waits          []bool
	// sub[j] is reqs[subOf[j]], this attempt's requests to the Decider;
	// decided: those that got their final answer in this attempt.
	sub     []capping.Request
	subOf   []int
	decided []int
}

func newAttempts(reqs []capping.Request, owns [][]lostAttempt) *attempts {
	a := &attempts{reqs: reqs, out: make([]capping.Decision, len(reqs)), lost: make([][]lostAttempt, len(reqs)),
		pending: make([]int, len(reqs)), waits: make([]bool, len(reqs))}
	for i, l := range owns {
		a.lost[i] = slices.Clone(l)
	}
	for i := range a.pending {
		a.pending[i] = i
	}
	return a
}

// begin makes an attempt's requests, decided at now by the control state
// cs. A user's requests after one with a lost attempt are held back: that
// one's final answer, and its give-back, come first.
func (a *attempts) begin(now time.Time, cs *capping.Campaigns) []capping.Request {
	a.sub, a.subOf, a.still, a.decided = a.sub[:0], a.subOf[:0], a.still[:0:0], a.decided[:0]
	clear(a.waits)
	var hold map[uint64]bool
	for _, i := range a.pending {
		r := a.reqs[i]
		if hold[r.UserID] {
			a.waits[i] = true
			continue
		}
		if len(a.lost[i]) > 0 {
			if hold == nil {
				hold = map[uint64]bool{}
			}
			hold[r.UserID] = true
		}
		r.At, r.Control = now, cs
		a.sub, a.subOf = append(a.sub, r), append(a.subOf, i)
	}
	return a.sub
}

// answer takes the Decider's answers (err: the whole call failed; sent:
// the attempt, were its answer lost; rec: the ids recorded in its
// second). It returns how many requests Redis
// could not decide, and the last error.
func (a *attempts) answer(ds []capping.Decision, err error, sent lostAttempt, rec *recent, log *slog.Logger) (failed int, lastErr error) {
	j := 0
	for _, i := range a.pending {
		if a.waits[i] {
			a.still = append(a.still, i)
			continue
		}
		var d capping.Decision
		if err == nil {
			d = ds[j]
		}
		j++
		switch {
		case err != nil:
			// Any failed call may have run: go-redis retries a call
			// whose connection broke, so even a refused dial can be the
			// last of several tries, an earlier one of which ran.
			lastErr = err
			if !rec.recorded(&a.reqs[i]) {
				a.lost[i] = append(a.lost[i], sent)
			}
		case errors.Is(d.Err, capping.ErrInvalidRequest):
			// The policy that decides it does not know its channel or
			// category (it changed since the intent was decoded), or a
			// check the decoder lacks: no retry can help.
			a.out[i] = capping.Decision{Outcome: capping.Invalid, Err: d.Err, At: sent.at}
			a.decided = append(a.decided, i)
			continue
		case errors.Is(d.Err, capping.ErrEarlierUndecided):
			a.still, a.waits[i] = append(a.still, i), true
			continue
		case d.Err != nil:
			lastErr = d.Err
			at := sent
			at.policy = cmp.Or(d.Policy, sent.policy)
			if !rec.recorded(&a.reqs[i]) { // else it recorded nothing (recent)
				a.lost[i] = append(a.lost[i], at)
			}
			if failed < 10 {
				// Ids only at debug: logs above it never name a user.
				log.Debug("intent not decided", "user", a.reqs[i].UserID, "intent", a.reqs[i].IntentID, "error", lastErr)
			}
		default:
			a.out[i] = ownDuplicate(d, a.lost[i])
			rec.add(&a.reqs[i], a.out[i])
			a.decided = append(a.decided, i)
			continue
		}
		failed++
		a.still = append(a.still, i)
	}
	return failed, lastErr
}

// owed lists the requests decided in this attempt that had lost attempts
// and end undelivered: they are given back.
func (a *attempts) owed() []int {
	var idx []int
	for _, i := range a.decided {
		if len(a.lost[i]) > 0 && !delivered(a.out[i].Outcome) {
			idx = append(idx, i)
		}
	}
	return idx
}

// settle notes that the owed requests were given back.
func (a *attempts) settle(owed []int) {
	for _, i := range owed {
		a.lost[i] = nil
	}
}

// failOpen answers FailOpen the requests Redis could not decide; those
// that waited for them are decided next.
func (a *attempts) failOpen(now time.Time) {
	var next []int
	for _, i := range a.still {
		if a.waits[i] {
			next = append(next, i)
			continue
		}
		a.out[i] = capping.Decision{Outcome: capping.FailOpen, At: now}
	}
	a.pending = next
}
