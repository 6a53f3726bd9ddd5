package capping

// The engine: its options, construction and the per-request checks. Decide
// (decide.go) runs a batch; each algorithm's file owns its keys and arguments.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Options configure New. The configuration's values (internal/config owns
// their defaults) are required; only the process plumbing (Registerer,
// Logger, Now) and SkewInterval, which nothing configures, may stay zero.
type Options struct {
	Client            redis.UniversalClient // *redis.Client, *redis.ClusterClient or a failover client
	Rules             Rules
	Algorithm         Algorithm
	KeyPrefix         string        // no braces or spaces
	IdempotencyWindow time.Duration // duplicates are recognised for at least max(longest window, this)
	SubIntervals      int           // sliding_window: sub-intervals per window (1-1440)
	SkewWarn          time.Duration // warn above this Redis clock skew
	SkewInterval      time.Duration // how often RunClockCheck measures; 0 = every 30s
	// WaitReplicas > 0: an allowed or duplicate answer is returned only once
	// that many replicas of its master acknowledged the writes behind it,
	// within WaitTimeout (else it is a per-request error, decided again
	// later). See durable.go.
	WaitReplicas int
	WaitTimeout  time.Duration
	Registerer   prometheus.Registerer
	Logger       *slog.Logger
	Now          func() time.Time // only for the clock-skew check
}

const defaultSkewInterval = 30 * time.Second

// Engine decides requests against the caps stored in Redis. It is safe for
// concurrent use.
type Engine struct {
	client       redis.UniversalClient
	rules        Rules
	algo         algorithm
	name         Algorithm
	keys         keys
	plans        map[string]map[string]*plan // by segment, then channel
	fallback     map[string]*plan            // Rules.Default, by channel
	known        map[string]bool             // channels
	retention    int64                       // ms: idempotency record and user log
	waitReplicas int
	waitTimeout  time.Duration
	subs         int
	skewWarn     time.Duration
	skewEvery    time.Duration
	m            *metrics
	log          *slog.Logger
	now          func() time.Time
}

// New validates the rules and options and loads the script on every node.
func New(ctx context.Context, opts Options) (*Engine, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	e := &Engine{
		client:       opts.Client,
		rules:        opts.Rules.clone(),
		name:         opts.Algorithm,
		keys:         keys{prefix: opts.KeyPrefix},
		subs:         opts.SubIntervals,
		skewWarn:     opts.SkewWarn,
		skewEvery:    opts.SkewInterval,
		m:            newMetrics(opts.Registerer),
		log:          opts.Logger,
		now:          opts.Now,
		known:        map[string]bool{},
		waitReplicas: opts.WaitReplicas,
		waitTimeout:  opts.WaitTimeout,
	}
	e.retention = max(opts.IdempotencyWindow, e.rules.longestWindow()).Milliseconds()
	if e.skewEvery <= 0 {
		e.skewEvery = defaultSkewInterval
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.now == nil {
		e.now = time.Now
	}
	for _, c := range e.rules.Channels {
		e.known[c] = true
	}
	algo, err := newAlgorithm(opts.Algorithm, e)
	if err != nil {
		return nil, err
	}
	e.m.scriptCalls.WithLabelValues(string(opts.Algorithm))
	e.algo = algo
	e.compile()
	if err := e.Reload(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

func (o Options) validate() error {
	var errs []error
	if o.Client == nil {
		errs = append(errs, fmt.Errorf("%s is required", "Client"))
	}
	if err := o.Rules.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("rules: %w", err))
	}
	if o.KeyPrefix == "" || strings.ContainsAny(o.KeyPrefix, "{} ") {
		// A brace would change the hash tag and split a user's keys over slots.
		errs = append(errs, fmt.Errorf("key prefix %q must be non-empty, without braces or spaces", o.KeyPrefix))
	}
	if o.IdempotencyWindow <= 0 {
		errs = append(errs, fmt.Errorf("idempotency window %s must be above 0", o.IdempotencyWindow))
	}
	if o.Algorithm == SlidingWindow && (o.SubIntervals < 1 || o.SubIntervals > 1440) {
		errs = append(errs, fmt.Errorf("sub-intervals %d out of range [1, 1440]", o.SubIntervals))
	}
	if o.WaitReplicas < 0 || (o.WaitReplicas > 0 && o.WaitTimeout <= 0) {
		errs = append(errs, fmt.Errorf("wait replicas %d needs a positive wait timeout, got %s", o.WaitReplicas, o.WaitTimeout))
	}
	if _, ring := o.Client.(*redis.Ring); ring && o.WaitReplicas > 0 {
		errs = append(errs, fmt.Errorf("wait replicas: not supported with a ring client"))
	}
	if o.SkewWarn <= 0 {
		errs = append(errs, fmt.Errorf("skew warning threshold %s must be above 0", o.SkewWarn))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("capping: %w", err)
	}
	return nil
}

// compile makes the plans of every policy on every channel.
func (e *Engine) compile() {
	e.plans = map[string]map[string]*plan{}
	e.fallback = map[string]*plan{}
	for ch := range e.known {
		e.fallback[ch] = e.algo.compile(e.rules.Default, ch)
		for _, s := range e.rules.Segments {
			if e.plans[s.Name] == nil {
				e.plans[s.Name] = map[string]*plan{}
			}
			e.plans[s.Name][ch] = e.algo.compile(s.Policy, ch)
		}
	}
}

// Algorithm returns the algorithm in use.
func (e *Engine) Algorithm() Algorithm { return e.name }

// Reload loads the script again on every node (SCRIPT LOAD; a ClusterClient
// loads it on every shard). Decide does not need it: it re-sends a call that
// meets NOSCRIPT with EVAL, which also caches the script on that node.
func (e *Engine) Reload(ctx context.Context) error {
	s := e.algo.script()
	sha, err := e.client.ScriptLoad(ctx, s.src).Result()
	if err != nil {
		return fmt.Errorf("capping: load %s script: %w", e.name, err)
	}
	if sha != s.sha {
		return fmt.Errorf("capping: load %s script: Redis answered SHA %s, expected %s", e.name, sha, s.sha)
	}
	return nil
}

// check validates a request and returns its plan; a nil plan with no error
// means exempt.
func (e *Engine) check(r Request) (*plan, error) {
	switch {
	case len(r.IntentID) == 0 || len(r.IntentID) > MaxIntentID:
		return nil, fmt.Errorf("%w: intent id of %d bytes (want 1-%d)", ErrInvalidRequest, len(r.IntentID), MaxIntentID)
	case !e.known[r.Channel]:
		return nil, fmt.Errorf("%w: unknown channel %q", ErrInvalidRequest, r.Channel)
	case r.Category == "":
		return nil, fmt.Errorf("%w: no category", ErrInvalidRequest)
	case e.rules.IsExempt(r.Category):
		return nil, nil
	case r.At.IsZero() || r.At.UnixMilli() <= 0:
		return nil, fmt.Errorf("%w: no decision time", ErrInvalidRequest)
	}
	if p, ok := e.plans[r.Segment]; ok {
		return p[r.Channel], nil
	}
	return e.fallback[r.Channel], nil
}

// Inspect reports the state of every limit of the segment's policy for a
// user at a time. It only reads: no writes and no eviction.
func (e *Engine) Inspect(ctx context.Context, userID uint64, segment string, at time.Time) ([]LimitState, error) {
	if at.IsZero() {
		return nil, fmt.Errorf("inspect user %d: no time", userID)
	}
	st, err := e.algo.inspect(ctx, userID, e.rules.PolicyOf(segment), at)
	if err != nil {
		return nil, fmt.Errorf("inspect user %d: %w", userID, err)
	}
	return st, nil
}

// LimitState is one limit of a user as stored in Redis at some time.
type LimitState struct {
	Limit Limit
	// Count is the number of intents in the window (sliding_window: the
	// estimate rounded up). A channel limit counts its channel.
	Count int64
	// NextFree is when the limit admits one more intent: the time asked
	// about if Count < Max, later if the window is full, and the zero Time if
	// Max is 0 (never).
	NextFree time.Time
}
