package capping

// Refunds: a send whose delivery failed gives its slots back. One call of
// the refund script (refund.lua.tmpl) per request, all in one pipeline; the calls Redis refused
// without running are re-sent as EVAL, as Decide does (decide.go).

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed refund.lua.tmpl
var refundTemplate string

var refundText = template.Must(template.New("refund.lua").Parse(refundTemplate))

// newRefundScript is the refund script, from its template and the layout.
// It reads only the record, so one serves every policy. It is not loaded
// in advance: the first EVALSHA on a node meets NOSCRIPT and the EVAL that
// follows caches it there (refunds are rare).
func newRefundScript() (*script, error) {
	var b strings.Builder
	if err := refundText.Execute(&b, struct{ L layoutData }{layout}); err != nil {
		return nil, fmt.Errorf("generate the refund script: %w", err)
	}
	return newScript(b.String()), nil
}

// RefundRequest asks to give back the slot of one allowed send.
type RefundRequest struct {
	UserID   uint64
	IntentID string
	// Forget makes it a give-back: an intent that was not delivered after
	// attempts whose answers were lost (then cancelled, expired or left
	// waiting). Only a send recorded at one of Attempts (decision times,
	// to the second) is taken out, and the id's idempotency entry goes too,
	// so that the intent may be decided again and counted then, rather than
	// answered Duplicate. The attempts are voided too (unless Answered):
	// one that Redis runs after the give-back records nothing (ErrVoided),
	// so a give-back need not wait until no lost attempt can run any more.
	Forget bool
	// Answered (with Forget): the attempts were answered (a send handed
	// back to be decided again): they are not voided, so a decision of the
	// same intent in the same second records as any.
	Answered bool
	Attempts []time.Time
}

// giveBack is the refund script's third argument: "" for a refund, "f" and
// the attempts' times for a give-back, "g" and the times for one whose
// attempts were answered (not voided).
func (r *RefundRequest) giveBack() string {
	if !r.Forget {
		return ""
	}
	b := []byte{'f'}
	if r.Answered {
		b[0] = 'g'
	}
	for _, t := range r.Attempts {
		b = append(b, packTime(t.Unix())...)
	}
	return string(b)
}

// RefundResult is what a refund did.
type RefundResult uint8

const (
	RefundApplied RefundResult = iota // the send was removed from the user's logs: its slots are free again
	RefundUnknown                     // no idempotency entry with this id (never allowed, or past the idempotency window)
	RefundNothing                     // known id, but nothing left to remove (already refunded, its sends left every window, or it shares its second with another send whose scopes cannot be told apart: kept, which only over-counts)
)

var refundNames = [...]string{RefundApplied: "applied", RefundUnknown: "unknown", RefundNothing: "nothing"}

func (r RefundResult) String() string {
	if int(r) < len(refundNames) {
		return refundNames[r]
	}
	return "refund(" + strconv.Itoa(int(r)) + ")"
}

// RefundOutcome is the answer to one RefundRequest. Result is meaningless
// when Err is set: a Redis failure worth retrying (its text never names the
// user or the intent), or an error wrapping ErrInvalidRequest for an intent
// id of 0 or more than MaxIntentID bytes.
type RefundOutcome struct {
	Result RefundResult
	Err    error
}

// refundCall is one refund on its way to Redis.
type refundCall struct {
	i                  int
	key, field, digest string
	giveBack           string // with window: the idempotency window (s)
	window             int64
	cmd                *redis.Cmd
}

// Refund gives back the slots of allowed sends. len(result) == len(reqs);
// the error is the context's when ctx ended during the call (the outcomes
// already received are still returned).
//
// The idempotency entry stays, so a redelivery of a refunded intent is
// answered Duplicate, not counted again. A refund is decided from the record
// alone (refund.lua.tmpl says how a send is found by its time), and removes a
// send only where that is exact: where it cannot tell, it keeps the send,
// which only over-counts.
//
// A section holds at most the largest max of the limits on its scope and
// drops older times beyond it. When it drops one a limit still counts
// (bypassed sends, a tightened policy, a user who moved from a looser
// segment), it is marked trimmed (record.go) and refunds take nothing from
// it until a later write finds its oldest kept send before every window of
// its scope: a kept send taken out could free a slot the dropped one still
// holds.
//
// With Options.WaitReplicas, a refund does not wait for replicas: a refund a
// failover loses leaves the send counted, which only over-counts. Nor does
// its answer make a master the engine holds not ready (its replicas did
// not acknowledge a send) ready again: only a send's can.
func (e *Engine) Refund(ctx context.Context, reqs []RefundRequest) ([]RefundOutcome, error) {
	out := make([]RefundOutcome, len(reqs))
	calls := make([]refundCall, 0, len(reqs))
	window := e.set.Load().idem
	for i, r := range reqs {
		if n := len(r.IntentID); n == 0 || n > MaxIntentID {
			out[i].Err = fmt.Errorf("refund: %w: intent id of %d bytes (want 1-%d)", ErrInvalidRequest, n, MaxIntentID)
			continue
		}
		d := digest(r.IntentID)
		calls = append(calls, refundCall{i: i, key: e.keys.bucket(r.UserID), field: field(r.UserID), digest: string(d[:5]), giveBack: r.giveBack(), window: window})
	}
	if len(calls) == 0 {
		return out, nil
	}
	if err := ctx.Err(); err != nil {
		for _, c := range calls {
			out[c.i].Err = fmt.Errorf("refund: %w", err)
		}
		return out, err
	}
	all := ptrs(calls)
	done := e.health.begin()
	e.sendRefunds(ctx, all, false)
	e.resendRefunds(ctx, all)
	done()
	at := time.Now()
	results := make([]callResult, 0, len(calls))
	for _, c := range calls {
		res, err := c.cmd.Int64()
		if err == nil && (res < int64(RefundApplied) || res > int64(RefundNothing)) {
			err = fmt.Errorf("refund script answered %d", res)
		}
		if err != nil {
			out[c.i].Err = fmt.Errorf("refund: %w", err)
			if ctx.Err() == nil {
				results = append(results, callResult{key: c.key, err: out[c.i].Err})
			}
			continue
		}
		if e.waitReplicas == 0 {
			// With WaitReplicas a refund's answer says nothing of the
			// replicas a send waits for: it makes no master ready again
			// (only failures settle).
			results = append(results, callResult{key: c.key})
		}
		out[c.i].Result = RefundResult(res)
		// A refusal remembered for the user may name the limit the refund
		// just freed, or an entry a give-back changed: the user's next
		// intent must go to Redis.
		if (out[c.i].Result == RefundApplied || reqs[c.i].Forget) && e.refusals != nil {
			e.refusals.forgetUser(reqs[c.i].UserID)
		}
	}
	e.health.settle(at, results, func(key string) string { return e.nodeOf(ctx, key) })
	if err := ctx.Err(); err != nil {
		return out, err
	}
	return out, nil
}

// resendRefunds re-sends, as EVAL, the refunds Redis refused without
// running the script (resend's rounds and backoff). NOSCRIPT is not
// counted as a lost script cache: the refund script is never loaded in
// advance, so its first call on every node meets it.
func (e *Engine) resendRefunds(ctx context.Context, all []*refundCall) {
	resendRefused(ctx, all, func(c *refundCall) *redis.Cmd { return c.cmd }, func(pending []*refundCall) {
		e.sendRefunds(ctx, pending, true)
	})
}

// sendRefunds runs calls in one pipeline (EVALSHA, or EVAL with the
// source); errors stay on each call's command.
func (e *Engine) sendRefunds(ctx context.Context, calls []*refundCall, eval bool) {
	// Script calls, but not decisions: calls per intent stays about Decide.
	e.m.scriptCalls.Add(float64(len(calls)))
	name, body := "evalsha", e.refund.sha
	if eval {
		name, body = "eval", e.refund.src
	}
	pipe := e.client.Pipeline()
	for _, c := range calls {
		if c.giveBack != "" {
			c.cmd = redis.NewCmd(ctx, name, body, 1, c.key, c.field, c.digest, c.giveBack, c.window)
		} else {
			c.cmd = redis.NewCmd(ctx, name, body, 1, c.key, c.field, c.digest)
		}
		c.cmd.SetFirstKeyPos(3)
		_ = pipe.Process(ctx, c.cmd)
	}
	_, _ = pipe.Exec(ctx) // errors are per command
}
