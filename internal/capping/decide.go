package capping

// Decide: one batch as one pipeline of script calls, and the re-sends of the
// calls Redis refused without running them. What a call holds comes from its
// plan (the algorithm's file); this file only moves calls.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// call is one request on its way to Redis. Its key and member strings are
// substrings of one string built per batch (see prepare), and its arguments
// point to them, so a request costs no allocation of its own before
// go-redis' command.
type call struct {
	i      int
	plan   *plan
	at     time.Time
	keys   []string // KEYS of the script
	member string   // the intent's digest, when the plan takes it as an argument
	// cmd reads the script's answer, an array of integers, straight into
	// []int64 (the generic Cmd boxes every value first).
	cmd *redis.IntSliceCmd
	// notReplicated (WaitReplicas): the replicas did not acknowledge what
	// the answer rests on.
	notReplicated error
}

// Decide decides a batch. len(result) == len(reqs); per-request failures are
// in Decision.Err, whose text never names the user or the intent (it may end
// up in logs and /readyz; the caller has the request). The error is the context's when ctx ended during the call
// (decisions already received are still returned).
//
// The whole batch goes out as one pipeline of EVALSHA; go-redis sends each
// node its commands (by the slot of the first key) in batch order on one
// connection, the nodes in parallel. A user's keys share one hash tag, so a
// user's requests reach one node in batch order and are decided in that
// order. Calls that Redis refused without running the script (NOSCRIPT after
// a failover, restart, SCRIPT FLUSH or on the importing node of a slot
// migration; TRYAGAIN, CLUSTERDOWN, LOADING, ...) are re-sent, in batch
// order, as EVAL. Such a re-sent call is decided after the later calls of
// the same user that went through: with TRYAGAIN (a user's multi-key call
// during a slot migration while their single-key calls pass), or NOSCRIPT
// when another worker's EVAL re-caches the script on the node between two of
// our calls. Each decision is still atomic, so the caps hold; only which of
// the user's intents is allowed can change.
//
// go-redis re-sends a node's whole sub-batch after a read timeout or a
// LOADING/TRYAGAIN/CLUSTERDOWN on its first command. The script's duplicate
// check makes that safe: an intent already allowed answers Duplicate.
func (e *Engine) Decide(ctx context.Context, reqs []Request) ([]Decision, error) {
	out := make([]Decision, len(reqs))
	calls := make([]call, 0, len(reqs))
	for i, r := range reqs {
		p, err := e.check(r)
		switch {
		case err != nil:
			out[i].Err = err
		case p == nil:
			out[i] = Decision{Outcome: Exempt, At: r.At}
		default:
			calls = append(calls, call{i: i, plan: p, at: r.At})
		}
	}
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
	all := make([]*call, len(calls))
	for k := range calls {
		all[k] = &calls[k]
	}
	e.send(ctx, all, false)
	e.resend(ctx, all)

	for k := range calls {
		c := &calls[k]
		res, err := c.cmd.Result()
		if err == nil {
			out[c.i], err = parseReply(res, c.plan.limits, c.at)
		}
		if err != nil {
			e.m.errors.WithLabelValues(errorKind(err)).Inc()
			out[c.i] = Decision{Err: fmt.Errorf("decide: %w", err)}
		}
	}
	for k := range calls {
		c := &calls[k]
		if d := &out[c.i]; c.notReplicated != nil && d.Err == nil && (d.Outcome == Allowed || d.Outcome == Duplicate) {
			*d = Decision{Err: fmt.Errorf("decide: %w", c.notReplicated)}
		}
	}
	if err := ctx.Err(); err != nil {
		return out, err
	}
	return out, nil
}

// Re-sends of calls refused without running, after the pipeline: a few
// short rounds for a script cache reload or a migration step; longer outages
// are the caller's to retry.
const (
	retryRounds  = 4
	retryBackoff = 10 * time.Millisecond
)

// resend re-sends, as EVAL, the calls Redis refused without running the
// script, for a few rounds.
func (e *Engine) resend(ctx context.Context, all []*call) {
	pending := refused(all)
	for round := 0; len(pending) > 0 && round < retryRounds; round++ {
		if round > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(retryBackoff << (round - 1)):
			}
		}
		for _, c := range pending {
			if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
				e.m.noscript.Inc()
			}
		}
		e.send(ctx, pending, true)
		pending = refused(pending)
	}
}

func refused(calls []*call) []*call {
	var f []*call
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil && retryable(err) {
			f = append(f, c)
		}
	}
	return f
}

// prepare fills in the keys and members of calls: all their bytes go into
// one buffer that becomes one string, and each key or member is a
// substring of it.
func (e *Engine) prepare(reqs []Request, calls []call) {
	type span struct{ from, to int }
	var buf []byte
	spans := make([]span, 0, 3*len(calls))
	nkeys := 0
	for k := range calls {
		c := &calls[k]
		r := reqs[c.i]
		d := digest(r.IntentID)
		base := len(buf)
		buf = e.keys.appendUser(buf, r.UserID)
		baseEnd := len(buf)
		if c.plan.idKey {
			buf = append(buf, ":d:"...)
			buf = appendHex(buf, d)
		}
		spans = append(spans, span{base, len(buf)})
		for _, suffix := range c.plan.suffixes {
			from := len(buf)
			buf = append(buf, buf[base:baseEnd]...)
			buf = append(buf, suffix...)
			spans = append(spans, span{from, len(buf)})
		}
		if c.plan.member >= 0 {
			from := len(buf)
			buf = append(buf, d[:]...)
			spans = append(spans, span{from, len(buf)})
		}
		nkeys += 1 + len(c.plan.suffixes)
	}
	all := string(buf)
	keys := make([]string, 0, nkeys)
	j := 0
	for k := range calls {
		c := &calls[k]
		from := len(keys)
		for range 1 + len(c.plan.suffixes) {
			keys = append(keys, all[spans[j].from:spans[j].to])
			j++
		}
		c.keys = keys[from:len(keys):len(keys)]
		if c.plan.member >= 0 {
			c.member = all[spans[j].from:spans[j].to]
			j++
		}
	}
}

// send runs calls in one pipeline; errors stay on each call's command.
// With WaitReplicas, see sendDurable.
//
// With a ClusterClient, a user's first call in the pipeline is preceded by a
// single-key EXISTS when the call has several keys. go-redis re-sends a
// node's whole sub-batch when its first command answers TRYAGAIN (a
// multi-key command whose keys are split by a slot migration), and then also
// sends a command of that sub-batch that was ASK-redirected to the importing
// node a second time, to the old node, concurrently (a data race on the
// command in go-redis v9.23, and a spurious ASK error). A single-key command
// never answers TRYAGAIN, and the first command of any node's sub-batch is
// some user's first command, so the probe keeps that path closed; the
// TRYAGAIN calls are re-sent by Decide instead.
func (e *Engine) send(ctx context.Context, calls []*call, eval bool) {
	e.m.scriptCalls.WithLabelValues(string(e.name)).Add(float64(len(calls)))
	if e.waitReplicas > 0 {
		e.sendDurable(ctx, calls, eval)
		return
	}
	_, cluster := e.client.(*redis.ClusterClient)
	pipe := e.client.Pipeline()
	e.queue(ctx, pipe, calls, eval, cluster)
	_, _ = pipe.Exec(ctx) // errors are per command
}

// queue adds the calls' script commands to pipe.
func (e *Engine) queue(ctx context.Context, pipe redis.Pipeliner, calls []*call, eval, probe bool) {
	var seen map[string]bool
	if probe {
		seen = make(map[string]bool, len(calls))
	}
	// The arguments: EVALSHA sha numkeys keys... args..., with the keys, the
	// member and the script as pointers (no boxing allocation per value) and
	// each plan's arguments built once per decision time; one backing array
	// for the whole pipeline, since go-redis keeps each command's arguments
	// until it has run.
	s := e.algo.script()
	name, body := any("evalsha"), any(&s.sha)
	if eval {
		name, body = any("eval"), any(&s.src)
	}
	type planAt struct {
		p   *plan
		now int64
	}
	shared := map[planAt][]any{}
	n := 0
	for _, c := range calls {
		pa := planAt{c.plan, c.at.UnixMilli()}
		if _, ok := shared[pa]; !ok {
			shared[pa] = c.plan.args(pa.now)
		}
		n += 3 + len(c.keys) + len(shared[pa])
	}
	backing := make([]any, n)
	for _, c := range calls {
		tail := shared[planAt{c.plan, c.at.UnixMilli()}]
		size := 3 + len(c.keys) + len(tail)
		args := backing[:size:size]
		backing = backing[size:]
		args[0], args[1], args[2] = name, body, len(c.keys)
		for j := range c.keys {
			args[3+j] = &c.keys[j]
		}
		copy(args[3+len(c.keys):], tail)
		if c.plan.member >= 0 {
			args[3+len(c.keys)+c.plan.member] = &c.member
		}
		if probe {
			user := c.keys[0][:strings.IndexByte(c.keys[0], '}')] // <prefix>:{<uid>
			if !seen[user] {
				seen[user] = true
				if len(c.keys) > 1 {
					pipe.Exists(ctx, c.keys[0])
				}
			}
		}
		c.cmd = redis.NewIntSliceCmd(ctx, args...)
		c.cmd.SetFirstKeyPos(3)
		c.notReplicated = nil
		_ = pipe.Process(ctx, c.cmd)
	}
}
