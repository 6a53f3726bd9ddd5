package capping

// Decide: one batch as one pipeline of script calls, and the re-sends of the
// calls Redis refused without running them. What a call sends comes from the
// compiled policy set (compile.go); this file only moves calls.

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// call is one request on its way to Redis. Its key, field and digest are
// substrings of one string built per batch (see prepare), and its arguments
// point to them.
type call struct {
	i      int
	plan   callPlan
	bypass bool
	// wantIdem: a refusal should return the user's idempotency entries
	// (the refusal cache does not know them).
	wantIdem bool
	key      string // the user's bucket
	field    string // the user's field in it
	digest   string // 5 bytes of the intent id's hash
	// cmd reads the script's answer: one integer, and for a refusal the
	// user's idempotency entries (see reply).
	cmd *redis.Cmd
	// notReplicated (WaitReplicas): the replicas did not acknowledge what
	// the answer rests on.
	notReplicated error
}

// Decide decides a batch. len(result) == len(reqs); per-request failures are
// in Decision.Err, whose text never names the user or the intent (it may end
// up in logs and /readyz; the caller has the request). The error is the
// context's when ctx ended during the call (decisions already received are
// still returned).
//
// The whole batch goes out as one pipeline of EVALSHA; go-redis sends each
// node its commands (by the slot of the key) in batch order on one
// connection, the nodes in parallel. A user's record is one field of one
// key, so a user's requests reach one node in batch order and are decided in
// that order. Calls that Redis refused without running the script (NOSCRIPT
// after a failover, restart, SCRIPT FLUSH or on the importing node of a slot
// migration; TRYAGAIN, CLUSTERDOWN, LOADING, ...) are re-sent, in batch
// order, as EVAL. Such a re-sent call is decided after the later calls of
// the same user that went through (NOSCRIPT when another worker's EVAL
// re-caches the script on the node between two of our calls). Each decision
// is still atomic, so the caps hold; only which of the user's intents is
// allowed can change.
//
// go-redis re-sends a node's whole sub-batch after a read timeout or a
// LOADING/TRYAGAIN/CLUSTERDOWN on its first command. The script's duplicate
// check makes that safe: an intent already allowed answers Duplicate.
func (e *Engine) Decide(ctx context.Context, reqs []Request) ([]Decision, error) {
	out := make([]Decision, len(reqs))
	calls := make([]call, 0, len(reqs))
	set := e.set.Load()
	defer set.finish(reqs, out) // out's elements, whatever the return
	asked := 0                  // valid requests, exempt ones included
	var known periods
	var pending map[uint64]bool
	if e.refusals != nil {
		pending = make(map[uint64]bool, len(reqs))
	}
	for i := range reqs {
		r := &reqs[i]
		d, bypass, err := set.check(r)
		if err != nil {
			out[i].Err = err
			continue
		}
		asked++
		if d != nil {
			out[i] = *d
			continue
		}
		c := call{i: i, plan: set.plan(r, &known), bypass: bypass}
		if e.refusals != nil {
			m := e.refusals.memoOf(r.UserID)
			// Not for a user with an earlier call in this batch: it may be
			// allowed, and move the remembered retry-after.
			if !bypass && !r.Redelivered && !pending[r.UserID] {
				if d, ok := e.refusals.lookup(set, r, c.plan, m); ok {
					out[i] = d
					out[i].OverrideRefused = r.Override != NoOverride
					e.m.refusalHits.Inc()
					continue
				}
			}
			// A refusal brings the user's ids when the cache lacks them.
			c.wantIdem = m == nil || !m.known
		}
		calls = append(calls, c)
		out[i].OverrideRefused = r.Override != NoOverride && !bypass
		if e.refusals != nil {
			pending[r.UserID] = true
		}
	}
	defer e.m.observeCalls(asked)
	if len(calls) == 0 {
		return out, nil
	}
	e.prepare(reqs, calls)
	if err := ctx.Err(); err != nil {
		for _, c := range calls {
			out[c.i].Err = fmt.Errorf("decide: %w", err)
		}
		return out, err
	}
	all := ptrs(calls)
	e.send(ctx, set, reqs, all, false)
	e.resend(ctx, set, reqs, all)

	for k := range calls {
		c := &calls[k]
		res, idem, withIdem, err := reply(c.cmd)
		refused := out[c.i].OverrideRefused
		if err == nil {
			out[c.i], err = set.decision(res, &reqs[c.i], c.plan)
			out[c.i].OverrideRefused = refused
			// A redelivered bypass is marked too: it is the same message,
			// and a reader counting sends must not check it against the caps.
			if c.bypass && (out[c.i].Outcome == Allowed || out[c.i].Outcome == Duplicate) {
				out[c.i].Override = Bypass
			}
		}
		if err != nil {
			e.m.errors.WithLabelValues(errorKind(err)).Inc()
			out[c.i] = Decision{Err: fmt.Errorf("decide: %w", err)}
		}
		if d := &out[c.i]; c.notReplicated != nil && d.Err == nil && (d.Outcome == Allowed || d.Outcome == Duplicate) {
			*d = Decision{Err: fmt.Errorf("decide: %w", c.notReplicated)}
		}
		if d := &out[c.i]; e.refusals != nil && d.Err == nil {
			e.refusals.remember(set, &reqs[c.i], c.plan, *d, idem, withIdem)
		}
	}
	if err := ctx.Err(); err != nil {
		return out, err
	}
	return out, nil
}

// reply reads a script call's answer: the packed integer, and for a
// refusal asked with wantIdem the user's idempotency entries (9 bytes
// each: the 5-byte digest of an id allowed, and when, unix s).
func reply(cmd *redis.Cmd) (res int64, idem string, withIdem bool, err error) {
	v, err := cmd.Result()
	if err != nil {
		return 0, "", false, err
	}
	switch v := v.(type) {
	case int64:
		return v, "", false, nil
	case []any:
		if len(v) == 2 {
			res, ok1 := v[0].(int64)
			idem, ok2 := v[1].(string)
			if ok1 && ok2 && len(idem)%idemEntrySize == 0 {
				return res, idem, true, nil
			}
		}
	}
	return 0, "", false, fmt.Errorf("script answered %v", v)
}

// finish names the policy on every decision and defers the capped ones
// whose limit says so (after the refusal cache saw them: it remembers what
// Redis said, a capped limit).
func (set *policySet) finish(reqs []Request, out []Decision) {
	for i := range out {
		out[i].Policy = set.name
		set.deferral(&reqs[i], &out[i])
	}
}

// Re-sends of calls refused without running, after the pipeline: a few
// short rounds for a script cache reload or a migration step; longer outages
// are the caller's to retry.
const (
	retryRounds  = 4
	retryBackoff = 10 * time.Millisecond
)

// resend re-sends, as EVAL, the calls Redis refused without running the
// script, for a few rounds; a NOSCRIPT is a lost script cache, counted.
func (e *Engine) resend(ctx context.Context, set *policySet, reqs []Request, all []*call) {
	resendRefused(ctx, all, func(c *call) *redis.Cmd { return c.cmd }, func(pending []*call) {
		for _, c := range pending {
			if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
				e.m.noscript.Inc()
			}
		}
		e.send(ctx, set, reqs, pending, true)
	})
}

// resendRefused calls send with the calls whose command Redis refused
// without running it (NOSCRIPT, TRYAGAIN, ...), for retryRounds rounds
// with a doubling backoff, or until none is left or ctx ends.
func resendRefused[C any](ctx context.Context, all []C, cmd func(C) *redis.Cmd, send func([]C)) {
	refused := func(calls []C) []C {
		var f []C
		for _, c := range calls {
			if err := cmd(c).Err(); err != nil && retryable(err) {
				f = append(f, c)
			}
		}
		return f
	}
	pending := refused(all)
	for round := 0; len(pending) > 0 && round < retryRounds; round++ {
		if round > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(retryBackoff << (round - 1)):
			}
		}
		send(pending)
		pending = refused(pending)
	}
}

// prepare fills in the keys, fields and digests of calls: all their bytes
// go into one buffer that becomes one string, and each is a substring of it.
func (e *Engine) prepare(reqs []Request, calls []call) {
	type span struct{ key, field, digest, end int }
	var buf []byte
	spans := make([]span, len(calls))
	for k := range calls {
		r := &reqs[calls[k].i]
		d := digest(r.IntentID)
		spans[k].key = len(buf)
		buf = e.keys.appendBucket(buf, r.UserID)
		spans[k].field = len(buf)
		buf = appendField(buf, r.UserID)
		spans[k].digest = len(buf)
		buf = append(buf, d[:5]...)
		spans[k].end = len(buf)
	}
	all := string(buf)
	for k := range calls {
		s := spans[k]
		calls[k].key, calls[k].field, calls[k].digest = all[s.key:s.field], all[s.field:s.digest], all[s.digest:s.end]
	}
}

// send runs calls in one pipeline; errors stay on each call's command.
// With WaitReplicas, see sendDurable.
func (e *Engine) send(ctx context.Context, set *policySet, reqs []Request, calls []*call, eval bool) {
	e.m.addCalls(len(calls))
	if e.waitReplicas > 0 {
		e.sendDurable(ctx, set, reqs, calls, eval)
		return
	}
	pipe := e.client.Pipeline()
	e.queue(ctx, set, reqs, pipe, calls, eval)
	_, _ = pipe.Exec(ctx) // errors are per command
}

// queue adds the calls' script commands to pipe: EVALSHA sha 1 key field
// now (4 bytes) digest policy applies records [optional...], the strings as pointers
// (no boxing allocation per value); one backing array for the pipeline,
// since go-redis keeps each command's arguments until it has run.
func (e *Engine) queue(ctx context.Context, set *policySet, reqs []Request, pipe redis.Pipeliner, calls []*call, eval bool) {
	s := set.script
	name, body := any("evalsha"), any(&s.sha)
	if eval {
		name, body = any("eval"), any(&s.src)
	}
	per := 6 + set.args.n
	backing := make([]any, 0, per*len(calls))
	var lastAt int64
	var boxedAt any
	for _, c := range calls {
		r := &reqs[c.i]
		if at := r.At.Unix(); at != lastAt || boxedAt == nil {
			lastAt, boxedAt = at, packTime(at)
		}
		start := len(backing)
		backing = append(backing, name, body, 1, &c.key, &c.field, boxedAt, &c.digest)
		backing = set.appendArgs(backing, r, c.plan, c.bypass, c.wantIdem)
		args := backing[start:len(backing):len(backing)]
		c.cmd = redis.NewCmd(ctx, args...)
		c.cmd.SetFirstKeyPos(3)
		c.notReplicated = nil
		_ = pipe.Process(ctx, c.cmd)
	}
}

// ptrs points at each element of s: the re-send loops work on subsets of a
// batch's calls and fill them in place.
func ptrs[T any](s []T) []*T {
	p := make([]*T, len(s))
	for k := range s {
		p[k] = &s[k]
	}
	return p
}
