package dispatch

// Give-backs: an attempt whose answer was lost (a timeout, a stalled or
// failed-over Redis, a WAIT that failed) may have been recorded all the
// same. When the intent then ends in anything but a delivery (cancelled by
// a stop or its send-by, waiting for a pause, deferred, dead-lettered), its
// send is taken out of the user's record and its id forgotten, before the
// user's later intents are decided (decide.go), so that nothing not
// delivered stays counted. Two things make that exact:
//
//   - the give-back voids the lost attempts (capping.RefundRequest): one
//     that Redis runs later, a stalled server running what was queued
//     before, records nothing. So the worker gives back at once, as soon
//     as the intent's final answer is in: nobody waits for the give-back
//     but the user's own later intents, for one call;
//   - only a send recorded at one of the lost attempts' times is taken out
//     (the refund script checks the id's entry), never one an earlier
//     delivery of the same id recorded.
//
// A worker that dies between the lost answer and the give-back leaves the
// send counted (over-counting only): the next worker does not know of the
// lost attempt.

import (
	"context"
	"slices"
	"time"

	"github.com/capper-dev/capper/internal/capping"
)

// lostAttempt is an attempt whose answer was lost: its decision time (what
// Redis records a send at) and the policy version that decided it (what
// its send counted by).
type lostAttempt struct {
	at     time.Time
	policy string
}

// ownDuplicate is d, unless it is a Duplicate answer recorded by one of
// the request's own lost attempts: then it is the delivery it is (the
// first: nothing delivered it before), decided at that attempt's time, by
// its policy.
func ownDuplicate(d capping.Decision, lost []lostAttempt) capping.Decision {
	if d.Outcome != capping.Duplicate || len(lost) == 0 {
		return d
	}
	if k := slices.IndexFunc(lost, func(a lostAttempt) bool { return a.at.Unix() == d.At.Unix() }); k >= 0 {
		d.Outcome, d.At = capping.Allowed, lost[k].at
		if p := lost[k].policy; p != "" {
			d.Policy = p
		}
	}
	return d
}

// recent is what this worker knows Redis holds for the second it decides
// in: the (user, id) of every answer of that second that says the id's
// entry is recorded at it (allowed then, or a duplicate of an entry of
// that second). Redis keeps an id's time to the second, so a Duplicate at
// the second of a lost attempt is that attempt's own send only if nothing
// recorded the id in that second before it ran: an attempt of an id
// already among these (a producer's retry of an intent decided a moment
// before) recorded nothing, and losing its answer loses nothing. A worker
// decides one attempt at a time, its answers in batch order (a user's
// requests in order), so every answer before an attempt is here.
type recent struct {
	sec  int64
	keys []recentKey
	set  map[recentKey]bool // built from keys when first asked (rarely)
}

type recentKey struct {
	user uint64
	id   string
}

// at starts an attempt at now: a new second forgets the last.
func (r *recent) at(now time.Time) {
	if s := now.Unix(); s != r.sec {
		r.sec, r.keys, r.set = s, r.keys[:0], nil
	}
}

// add notes d, request req's final answer, when it says the id's entry
// is recorded in this second.
func (r *recent) add(req *capping.Request, d capping.Decision) {
	if (d.Outcome == capping.Allowed || d.Outcome == capping.Duplicate) && d.At.Unix() == r.sec {
		r.keys = append(r.keys, recentKey{req.UserID, req.IntentID})
		if r.set != nil {
			r.set[r.keys[len(r.keys)-1]] = true
		}
	}
}

// forget drops user's id: a give-back took its entry out (a throttled
// send handed back is given back once delivered), so the next attempt of
// the id may record it again.
func (r *recent) forget(user uint64, id string) {
	k := recentKey{user, id}
	r.keys = slices.DeleteFunc(r.keys, func(x recentKey) bool { return x == k })
	delete(r.set, k)
}

// recorded reports whether req's id has an entry of this second.
func (r *recent) recorded(req *capping.Request) bool {
	if len(r.keys) == 0 {
		return false
	}
	if r.set == nil {
		r.set = make(map[recentKey]bool, len(r.keys))
		for _, k := range r.keys {
			r.set[k] = true
		}
	}
	return r.set[recentKey{req.UserID, req.IntentID}]
}

// delivered reports whether an outcome delivers the intent (so a send its
// lost attempt recorded is the one that counts it).
func delivered(o capping.Outcome) bool {
	return o == capping.Allowed || o == capping.Duplicate || o == capping.FailOpen
}

// giveBack gives back requests idx (each with lost attempts, ending
// undelivered), voiding their lost attempts; retried like refunds.
func (w *Worker) giveBack(ctx context.Context, reqs []capping.Request, idx []int, lost [][]lostAttempt) error {
	var rs []capping.RefundRequest
	for _, i := range idx {
		r := capping.RefundRequest{UserID: reqs[i].UserID, IntentID: reqs[i].IntentID, Forget: true}
		for _, a := range lost[i] {
			r.Attempts = append(r.Attempts, a.at)
		}
		rs = append(rs, r)
	}
	if len(rs) == 0 {
		return nil
	}
	results, err := w.applyRefunds(ctx, rs, "give-backs")
	if err != nil {
		return err
	}
	for k, r := range results {
		w.m.givenBack.WithLabelValues(r).Inc()
		if k < 10 {
			// Ids only at debug: logs above it never name a user.
			w.o.Logger.Debug("given back", "user", rs[k].UserID, "intent", rs[k].IntentID, "attempts", rs[k].Attempts, "result", r)
		}
	}
	return nil
}
