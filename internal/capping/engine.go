package capping

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Algorithm selects how the engine counts.
type Algorithm string

const (
	// SlidingLog is exact: a sorted set of the user's allowed intents.
	SlidingLog Algorithm = "sliding_log"
	// SlidingWindow is approximate: counters per sub-interval of each window.
	// It may allow up to floor((1-f)*c) more than max in a window, where c is
	// the count of the sub-interval that straddles the window's start and f
	// the part of it inside the window (see sliding_window.lua): at most
	// max + (count of one sub-interval), under 2*max, close to max when
	// traffic is smooth.
	SlidingWindow Algorithm = "sliding_window"
)

// Options configure New. Client is required; the zero value of every other
// field means its default.
type Options struct {
	Client            redis.UniversalClient // *redis.Client, *redis.ClusterClient or a failover client
	Rules             Rules
	Algorithm         Algorithm     // default SlidingLog
	KeyPrefix         string        // default "capper"
	IdempotencyWindow time.Duration // default 24h: duplicates are recognised for at least max(longest window, this)
	SubIntervals      int           // sliding_window: sub-intervals per window, default 24 (1-1440)
	SkewWarn          time.Duration // default 500ms
	SkewInterval      time.Duration // default 30s
	Registerer        prometheus.Registerer
	Logger            *slog.Logger
	Now               func() time.Time // only for the clock-skew check
}

// Defaults of Options.
const (
	DefaultKeyPrefix         = "capper"
	DefaultIdempotencyWindow = 24 * time.Hour
	DefaultSubIntervals      = 24
	DefaultSkewWarn          = 500 * time.Millisecond
	DefaultSkewInterval      = 30 * time.Second
)

// Never is Decision.RetryAfter when the denying limit has max 0.
const Never time.Duration = -1

// MaxIntentID is the longest intent id, in bytes.
const MaxIntentID = 128

// Request is one send-intent to decide.
type Request struct {
	UserID   uint64
	Segment  string // segment name or DefaultSegment; an unknown name is a per-request error
	IntentID string // the idempotency key (1-128 bytes)
	Channel  string
	Category string    // "" means DefaultCategory
	At       time.Time // decision time from the caller's clock; sent to Redis as ms
}

// Outcome is the answer for one request.
type Outcome uint8

const (
	Allowed   Outcome = iota // under every cap; now counted
	Denied                   // a cap is full; not recorded
	Duplicate                // allowed before (same intent id); not counted again
	Exempt                   // exempt category; Redis not consulted, not counted
)

func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Denied:
		return "denied"
	case Duplicate:
		return "duplicate"
	case Exempt:
		return "exempt"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Decision is the engine's answer for one request.
type Decision struct {
	Outcome Outcome
	// Limit is the name of the first limit (policy order) that denied.
	Limit string
	// Counts has one entry per limit of the request's policy, in policy
	// order: the intents in the window as seen by the script, before this
	// intent. A limit on another channel than the request's is not evaluated
	// and reports 0. For Duplicate they are all 0: a duplicate is answered
	// without counting. sliding_window reports the estimate rounded up. Nil
	// for Exempt.
	Counts []int64
	// Recorded (Duplicate): when the intent was allowed, i.e. the decision
	// time it is counted at.
	Recorded time.Time
	// RetryAfter (Denied): time until the denying window frees a slot if no
	// other intent is allowed meanwhile; Never when its max is 0.
	RetryAfter time.Duration
	// Err is a per-request failure; Outcome is meaningless then. Invalid
	// requests wrap ErrInvalidRequest (they will never succeed); anything
	// else is a Redis failure worth retrying later.
	Err error
}

// ErrInvalidRequest is wrapped by Decision.Err for a request that can never
// be decided (unknown segment or channel, bad intent id, no time).
var ErrInvalidRequest = errors.New("invalid request")

// Engine decides requests against the caps stored in Redis. It is safe for
// concurrent use.
type Engine struct {
	client    redis.UniversalClient
	rules     Rules
	algo      Algorithm
	prefix    string
	script    script
	plans     map[string]map[string]*plan // by segment, channel
	known     map[string]bool             // channels
	retention int64                       // ms: idempotency record and base log
	subs      int
	skewWarn  time.Duration
	skewEvery time.Duration
	m         *metrics
	log       *slog.Logger
	now       func() time.Time
}

// New validates the rules and options and loads the script on every node.
func New(ctx context.Context, opts Options) (*Engine, error) {
	if opts.Client == nil {
		return nil, errors.New("capping: Options.Client is required")
	}
	if err := opts.Rules.Validate(); err != nil {
		return nil, fmt.Errorf("capping rules: %w", err)
	}
	e := &Engine{
		client:    opts.Client,
		rules:     opts.Rules.clone(),
		algo:      opts.Algorithm,
		prefix:    opts.KeyPrefix,
		subs:      opts.SubIntervals,
		skewWarn:  opts.SkewWarn,
		skewEvery: opts.SkewInterval,
		m:         newMetrics(opts.Registerer),
		log:       opts.Logger,
		now:       opts.Now,
	}
	if e.algo == "" {
		e.algo = SlidingLog
	}
	switch e.algo {
	case SlidingLog:
		e.script = newScript(slidingLogSrc)
	case SlidingWindow:
		e.script = newScript(slidingWindowSrc)
	default:
		return nil, fmt.Errorf("capping: algorithm %q is not one of %s, %s", e.algo, SlidingLog, SlidingWindow)
	}
	if e.prefix == "" {
		e.prefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(e.prefix, "{} ") {
		// A brace would change the hash tag and split a user's keys over slots.
		return nil, fmt.Errorf("capping: key prefix %q must not contain braces or spaces", e.prefix)
	}
	idem := opts.IdempotencyWindow
	switch {
	case idem == 0:
		idem = DefaultIdempotencyWindow
	case idem < 0:
		return nil, fmt.Errorf("capping: negative idempotency window %s", idem)
	}
	e.retention = max(idem, e.rules.longestWindow()).Milliseconds()
	switch {
	case e.subs == 0:
		e.subs = DefaultSubIntervals
	case e.subs < 0 || e.subs > 1440:
		return nil, fmt.Errorf("capping: sub-intervals %d out of range [1, 1440]", e.subs)
	}
	if e.skewWarn <= 0 {
		e.skewWarn = DefaultSkewWarn
	}
	if e.skewEvery <= 0 {
		e.skewEvery = DefaultSkewInterval
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.now == nil {
		e.now = time.Now
	}
	e.known = map[string]bool{}
	for _, c := range e.rules.channels() {
		e.known[c] = true
	}
	e.plans = e.buildPlans()
	if err := e.Reload(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// Algorithm returns the algorithm in use.
func (e *Engine) Algorithm() Algorithm { return e.algo }

// Reload loads the script again on every node (SCRIPT LOAD; a ClusterClient
// loads it on every shard). Decide does not need it: it re-sends a call that
// meets NOSCRIPT with EVAL, which also caches the script on that node.
func (e *Engine) Reload(ctx context.Context) error {
	sha, err := e.client.ScriptLoad(ctx, e.script.src).Result()
	if err != nil {
		return fmt.Errorf("capping: load %s script: %w", e.algo, err)
	}
	if sha != e.script.sha {
		return fmt.Errorf("capping: load %s script: Redis answered SHA %s, expected %s", e.algo, sha, e.script.sha)
	}
	return nil
}

// plan is what a request of one (segment, channel) sends, except the parts
// that depend on the user, the intent and the time.
type plan struct {
	limits []Limit
	// keys after the first one: suffixes appended to <prefix>:{<uid>}.
	suffixes []string
	// args: a template; dyn lists the indexes to fill with now+dyn[i].off ms.
	args []any
	dyn  []dynArg
	// The index of the member (sliding_log) in args, or -1.
	member int
}

type dynArg struct {
	idx int
	off int64 // ms added to now
}

// buildPlans makes the plans by segment, then channel.
func (e *Engine) buildPlans() map[string]map[string]*plan {
	plans := map[string]map[string]*plan{}
	segs := map[string]Policy{DefaultSegment: e.rules.Default}
	for name, p := range e.rules.Segments {
		segs[name] = p
	}
	tracked := e.rules.trackedChannels()
	for seg, pol := range segs {
		for ch := range e.known {
			var p *plan
			if e.algo == SlidingLog {
				p = e.logPlan(pol, ch, tracked)
			} else {
				p = e.windowPlan(pol, ch)
			}
			if plans[seg] == nil {
				plans[seg] = map[string]*plan{}
			}
			plans[seg][ch] = p
		}
	}
	return plans
}

func (e *Engine) logPlan(pol Policy, ch string, tracked map[string]time.Duration) *plan {
	p := &plan{limits: pol.Limits, member: 0}
	chRet, isTracked := tracked[ch]
	if isTracked {
		p.suffixes = []string{":" + ch}
	}
	// member, now, now-retention, retention, now-channel retention, channel retention
	p.args = []any{nil, nil, nil, e.retention, nil, chRet.Milliseconds()}
	p.dyn = []dynArg{{1, 0}, {2, -e.retention}, {4, -chRet.Milliseconds()}}
	for _, l := range pol.Limits {
		k := "0"
		switch {
		case l.Channel == "":
			k = "1"
		case l.Channel == ch:
			k = "2"
		}
		w := l.Window.Milliseconds()
		p.dyn = append(p.dyn, dynArg{len(p.args) + 1, -w + 1})
		p.args = append(p.args, k, nil, int64(l.Max), w)
	}
	return p
}

func (e *Engine) windowPlan(pol Policy, ch string) *plan {
	p := &plan{limits: pol.Limits, member: -1}
	// Every counter hash of any policy that counts this channel is updated,
	// so that counts survive a change of segment.
	keyIdx := map[string]int64{}
	var hashes []any
	for _, h := range e.rules.windowHashes() {
		if h.channel != "" && h.channel != ch {
			continue
		}
		suffix := windowSuffix(h.window, h.channel)
		p.suffixes = append(p.suffixes, suffix)
		keyIdx[suffix] = int64(len(p.suffixes) + 1) // KEYS[1] is the marker
		hashes = append(hashes, h.window, subInterval(h.window, e.subs))
	}
	p.args = append([]any{e.retention, nil, int64(len(p.suffixes))}, hashes...)
	p.dyn = []dynArg{{1, 0}}
	for _, l := range pol.Limits {
		k := int64(0)
		if l.Applies(ch) {
			k = keyIdx[windowSuffix(l.Window.Milliseconds(), l.Channel)]
		}
		p.args = append(p.args, k, int64(l.Max))
	}
	return p
}

// windowSuffix names a sliding_window counter hash by what it counts
// (window and channel), not by limit name: limits of different segments with
// the same window and channel share it, so counts survive a segment change.
func windowSuffix(windowMS int64, channel string) string {
	s := ":sw:" + strconv.FormatInt(windowMS, 10)
	if channel != "" {
		s += ":" + channel
	}
	return s
}

// subInterval is the sub-interval length in ms of a window.
func subInterval(windowMS int64, subs int) int64 { return max(windowMS/int64(subs), 1) }

// call is one request on its way to Redis. Its key and member strings are
// substrings of one string built per batch (see prepareBatch), and its
// arguments are boxed as pointers to them, so a request costs no allocation
// of its own before go-redis' command.
type call struct {
	i      int
	plan   *plan
	now    int64
	keys   []string // KEYS of the script
	member string   // sliding_log: the intent's digest
	// cmd reads the script's answer, an array of integers, straight into
	// []int64 (the generic Cmd boxes every value first).
	cmd *redis.IntSliceCmd
}

// check validates a request; a nil plan with no error means exempt.
func (e *Engine) check(r Request) (*plan, error) {
	if len(r.IntentID) == 0 || len(r.IntentID) > MaxIntentID {
		return nil, fmt.Errorf("%w: intent id of %d bytes (want 1-%d)", ErrInvalidRequest, len(r.IntentID), MaxIntentID)
	}
	if !e.known[r.Channel] {
		return nil, fmt.Errorf("%w: intent %q: unknown channel %q", ErrInvalidRequest, r.IntentID, r.Channel)
	}
	if _, ok := e.rules.policy(r.Segment); !ok {
		return nil, fmt.Errorf("%w: intent %q: unknown segment %q", ErrInvalidRequest, r.IntentID, r.Segment)
	}
	cat := r.Category
	if cat == "" {
		cat = DefaultCategory
	}
	if e.rules.isExempt(cat) {
		return nil, nil
	}
	if r.At.IsZero() || r.At.UnixMilli() <= 0 {
		return nil, fmt.Errorf("%w: intent %q: no decision time", ErrInvalidRequest, r.IntentID)
	}
	return e.plans[r.Segment][r.Channel], nil
}

// prepareBatch fills in the keys and members of calls: all their bytes go
// into one buffer that becomes one string, and each key or member is a
// substring of it.
func (e *Engine) prepareBatch(reqs []Request, calls []call) {
	type span struct{ from, to int }
	var buf []byte
	spans := make([]span, 0, 3*len(calls))
	nkeys := 0
	for k := range calls {
		c := &calls[k]
		r := reqs[c.i]
		c.now = r.At.UnixMilli()
		d := digest(r.IntentID)
		base := len(buf)
		buf = append(buf, e.prefix...)
		buf = append(buf, ":{"...)
		buf = strconv.AppendUint(buf, r.UserID, 10)
		buf = append(buf, '}')
		baseEnd := len(buf)
		if c.plan.member < 0 {
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

// userKey is <prefix>:{<uid>}.
func (e *Engine) userKey(uid uint64) string {
	b := make([]byte, 0, len(e.prefix)+24)
	b = append(b, e.prefix...)
	b = append(b, ":{"...)
	b = strconv.AppendUint(b, uid, 10)
	b = append(b, '}')
	return string(b)
}

func appendHex(b []byte, d [8]byte) []byte {
	const digits = "0123456789abcdef"
	for _, x := range d {
		b = append(b, digits[x>>4], digits[x&15])
	}
	return b
}

// Decide decides a batch. len(result) == len(reqs); per-request failures are
// in Decision.Err. The error is the context's when ctx ended during the call
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
			out[i].Outcome = Exempt
		default:
			calls = append(calls, call{i: i, plan: p})
		}
	}
	if len(calls) == 0 {
		return out, nil
	}
	e.prepareBatch(reqs, calls)
	if err := ctx.Err(); err != nil {
		for _, c := range calls {
			out[c.i].Err = fmt.Errorf("decide intent %q: %w", reqs[c.i].IntentID, err)
		}
		return out, err
	}
	algo := string(e.algo)
	all := make([]*call, len(calls))
	for k := range calls {
		all[k] = &calls[k]
	}
	e.send(ctx, all, false)
	e.m.scriptCalls.WithLabelValues(algo).Add(float64(len(calls)))

	pending := failed(all)
	for round := 0; len(pending) > 0 && round < retryRounds; round++ {
		if round > 0 {
			t := time.NewTimer(retryBackoff << (round - 1))
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
			if ctx.Err() != nil {
				break
			}
		}
		for _, c := range pending {
			if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
				e.m.noscript.Inc()
			}
		}
		e.send(ctx, pending, true)
		e.m.scriptCalls.WithLabelValues(algo).Add(float64(len(pending)))
		pending = failed(pending)
	}

	for k := range calls {
		c := &calls[k]
		d := &out[c.i]
		res, err := c.cmd.Result()
		if err == nil && len(res) != 3+len(c.plan.limits) {
			err = fmt.Errorf("script answered %d values, want %d", len(res), 3+len(c.plan.limits))
		}
		if err != nil {
			e.m.errors.WithLabelValues(errorKind(err)).Inc()
			d.Err = fmt.Errorf("decide intent %q of user %d: %w", reqs[c.i].IntentID, reqs[c.i].UserID, err)
			continue
		}
		switch res[0] {
		case codeAllowed:
			d.Outcome = Allowed
		case codeDenied:
			if res[1] < 1 || res[1] > int64(len(c.plan.limits)) {
				d.Err = fmt.Errorf("decide intent %q of user %d: script named limit %d of %d", reqs[c.i].IntentID, reqs[c.i].UserID, res[1], len(c.plan.limits))
				continue
			}
			d.Outcome = Denied
			d.Limit = c.plan.limits[res[1]-1].Name
			d.RetryAfter = Never
			if res[2] >= 0 {
				d.RetryAfter = time.Duration(res[2]) * time.Millisecond
			}
		case codeDuplicate:
			d.Outcome = Duplicate
			d.Recorded = time.UnixMilli(res[2])
		default:
			d.Err = fmt.Errorf("decide intent %q of user %d: script answered outcome %d", reqs[c.i].IntentID, reqs[c.i].UserID, res[0])
			continue
		}
		d.Counts = res[3:]
	}
	if err := ctx.Err(); err != nil {
		return out, err
	}
	return out, nil
}

// send runs calls in one pipeline; errors stay on each call's command.
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
	pipe := e.client.Pipeline()
	_, cluster := e.client.(*redis.ClusterClient)
	var seen map[string]bool
	if cluster {
		seen = make(map[string]bool, len(calls))
	}
	// The arguments: EVALSHA sha numkeys keys... args..., with the keys, the
	// member and the script as pointers (no boxing allocation per value) and
	// each plan's other arguments boxed once per decision time; one backing
	// array for the whole pipeline, since go-redis keeps each command's
	// arguments until it has run.
	name, body := any("evalsha"), any(&e.script.sha)
	if eval {
		name, body = any("eval"), any(&e.script.src)
	}
	n := 0
	for _, c := range calls {
		n += 3 + len(c.keys) + len(c.plan.args)
	}
	backing := make([]any, n)
	type planAt struct {
		p   *plan
		now int64
	}
	shared := map[planAt][]any{}
	for _, c := range calls {
		tail, ok := shared[planAt{c.plan, c.now}]
		if !ok {
			tail = slices.Clone(c.plan.args)
			for _, d := range c.plan.dyn {
				tail[d.idx] = c.now + d.off
			}
			shared[planAt{c.plan, c.now}] = tail
		}
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
		if cluster {
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
		_ = pipe.Process(ctx, c.cmd)
	}
	_, _ = pipe.Exec(ctx) // errors are per command
}

// Re-sends of calls refused without running, after the pipeline: a few
// short rounds for a script cache reload or a migration step; longer outages
// are the caller's to retry.
const (
	retryRounds  = 4
	retryBackoff = 10 * time.Millisecond
)

func failed(calls []*call) []*call {
	var f []*call
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil && retryable(err) {
			f = append(f, c)
		}
	}
	return f
}
