package capping

// Decide: one batch as one pipeline of script calls, and the re-sends of the
// calls Redis refused without running them. What a call sends comes from the
// compiled policy set (compile.go); this file only moves calls.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisCall is a call's side in Redis. Its key, field and digest are
// substrings of one string built per batch (see prepare), and its
// arguments point to them.
type redisCall struct {
	key    string // the user's bucket
	field  string // the user's field in it
	packed string // the packed argument (args.go)
	// cmd reads the script's answer (see decodeReply).
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
// A batch goes out in rounds, each one pipeline of EVALSHA; go-redis sends
// each node its commands (by the slot of the key) on one connection, the
// nodes in parallel. A round holds at most one call per user, and a user's
// next request is considered only once the answer to the previous one is
// in (assemble.go): so a user's requests are decided in batch order even
// when Redis refuses a call without running it while it runs a later one
// (NOSCRIPT after a failover, restart, SCRIPT FLUSH or on the importing node
// of a slot migration, while another worker's EVAL re-caches the script;
// TRYAGAIN, CLUSTERDOWN, LOADING, ...). Such calls are re-sent as EVAL; a
// call that still fails fails the user's later requests in the batch
// (ErrEarlierUndecided), and the caller retries them together, in order.
//
// go-redis re-sends a node's whole sub-batch after a read timeout or a
// LOADING/TRYAGAIN/CLUSTERDOWN on its first command. The script's duplicate
// check makes that safe: an intent already allowed answers Duplicate.
func (e *Engine) Decide(ctx context.Context, reqs []Request) ([]Decision, error) {
	set := e.set.Load()
	var a assembly
	var known periods
	set.assemble(&a, reqs, e.refusals, &known)
	defer a.finish() // a.out's elements, whatever the return
	defer func() {
		e.m.observeCalls(a.asked)
		e.m.refusalHits.Add(float64(a.hits))
	}()
	// Redis answered every call of the batch: it can decide (Ready).
	sent, failed, last := false, false, time.Time{}
	for {
		sent = sent || len(a.calls) > 0
		f, at, err := e.round(ctx, set, &a)
		failed = failed || f
		if !at.IsZero() { // a round without calls answers nothing
			last = at
		}
		if err != nil {
			return a.out, err
		}
		if !a.next() {
			break
		}
	}
	if sent && !failed {
		e.health.answered(last)
	}
	return a.out, nil
}

// round sends a round's calls as one pipeline (re-sending those Redis
// refused without running) and answers them; failed reports a call that
// failed, at when Redis answered (or failed to).
func (e *Engine) round(ctx context.Context, set *policySet, a *assembly) (failed bool, at time.Time, _ error) {
	if len(a.calls) == 0 {
		return false, at, nil
	}
	reqs := a.reqs
	e.prepare(set, reqs, a.calls)
	if err := ctx.Err(); err != nil {
		a.fail(fmt.Errorf("decide: %w", err))
		return false, at, err
	}
	all := ptrs(a.calls)
	done := e.health.begin()
	e.send(ctx, set, reqs, all, false)
	e.resend(ctx, set, reqs, all)
	done()
	at = time.Now()
	reps := make([]reply, len(a.calls))
	errs := make([]error, len(a.calls))
	results := make([]callResult, 0, len(a.calls))
	for k := range a.calls {
		c := &a.calls[k]
		rep, err := decodeReply(c.cmd)
		if err == nil && c.notReplicated != nil && (rep.code == codeAllowed || rep.code == codeDuplicate) {
			err = c.notReplicated
		}
		if err == nil && rep.code == codeVoided {
			err = ErrVoided
		}
		if err != nil {
			err = fmt.Errorf("decide: %w", err)
		}
		reps[k], errs[k] = rep, err
		r := callResult{key: c.key, err: err}
		if errors.Is(err, ErrVoided) {
			r.err = nil // Redis answered: an attempt given back is no failure of it
		}
		if r.err == nil && c.notReplicated != nil {
			// A refusal (or a voided attempt) needs no replica, but Redis
			// cannot decide what would count a send: not ready.
			r.err = fmt.Errorf("decide: %w", c.notReplicated)
		}
		if r.err != nil && ctx.Err() != nil {
			continue // ended by our context, not by Redis: says nothing of it
		}
		results = append(results, r)
		failed = failed || r.err != nil
	}
	// Not ready before the errors are counted: whoever sees the count sees
	// the worker unready.
	e.health.settle(at, results, func(key string) string { return e.nodeOf(ctx, key) })
	for k := range a.calls {
		// Counted are Redis' failures: not an attempt given back, nor what
		// our own context ended (those say nothing of Redis, and readiness
		// does not fail for them).
		if errs[k] != nil && !errors.Is(errs[k], ErrVoided) && ctx.Err() == nil {
			e.m.errors.WithLabelValues(errorKind(errs[k])).Inc()
		}
		a.answer(k, reps[k], errs[k])
	}
	if err := ctx.Err(); err != nil {
		a.fail(fmt.Errorf("decide: %w", err))
		return failed, at, err
	}
	return failed, at, nil
}

// nodeOf names the master that serves key now ("" when it cannot be told).
func (e *Engine) nodeOf(ctx context.Context, key string) string {
	n, err := e.masterFor(ctx, key)
	if err != nil {
		return ""
	}
	return n.Options().Addr
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

// prepare fills in the strings of calls (key, field, time, digest, packed
// argument): all their bytes go into one buffer that becomes one string,
// and each is a substring of it.
func (e *Engine) prepare(set *policySet, reqs []Request, calls []call) {
	type span struct{ key, field, packed, end int }
	var buf []byte
	spans := make([]span, len(calls))
	for k := range calls {
		c := &calls[k]
		r := &reqs[c.i]
		s := &spans[k]
		s.key = len(buf)
		buf = e.keys.appendBucket(buf, r.UserID)
		s.field = len(buf)
		buf = appendField(buf, r.UserID)
		s.packed = len(buf)
		buf = set.appendPacked(buf, r, c)
		s.end = len(buf)
	}
	all := string(buf)
	for k := range calls {
		s, c := spans[k], &calls[k]
		c.key, c.field, c.packed = all[s.key:s.field], all[s.field:s.packed], all[s.packed:s.end]
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

// cmdArgs are a script command's words before its ARGV: the command, the
// script (SHA or source), the number of keys and the key.
const cmdArgs = 4

// queue adds the calls' script commands to pipe: EVALSHA sha 1 key, then
// the ARGV (args.go), the strings as pointers
// (no boxing allocation per value); one backing array for the pipeline,
// since go-redis keeps each command's arguments until it has run.
func (e *Engine) queue(ctx context.Context, set *policySet, reqs []Request, pipe redis.Pipeliner, calls []*call, eval bool) {
	s := set.script
	name, body := any("evalsha"), any(&s.sha)
	if eval {
		name, body = any("eval"), any(&s.src)
	}
	per := cmdArgs + set.args.argv
	backing := make([]any, 0, per*len(calls))
	for _, c := range calls {
		start := len(backing)
		backing = append(backing, name, body, 1, &c.key)
		backing = set.appendArgv(backing, c)
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
