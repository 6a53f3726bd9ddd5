package capping

// The engine: its options, construction and the per-request checks. Decide
// (decide.go) runs a batch; compile.go turns the rules into the script and its
// arguments.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Options configure New. The configuration's values (internal/config owns
// their defaults) are required; only the process plumbing (Registerer,
// Logger, Now) and SkewInterval, which nothing configures, may stay zero.
type Options struct {
	Client redis.UniversalClient // *redis.Client, *redis.ClusterClient or a failover client
	Rules  Rules
	// PolicyVersion names Rules in every Decision (Decision.Policy).
	PolicyVersion     string
	KeyPrefix         string        // no braces or spaces
	IdempotencyWindow time.Duration // duplicates are recognised this long
	SkewWarn          time.Duration // warn above this Redis clock skew
	SkewInterval      time.Duration // how often RunClockCheck measures; 0 = every 30s
	// WaitReplicas > 0: an allowed or duplicate answer is returned only once
	// that many replicas of its master acknowledged the writes behind it,
	// within WaitTimeout (else it is a per-request error, decided again
	// later). See durable.go.
	WaitReplicas int
	WaitTimeout  time.Duration
	// RefusalCacheSize > 0 remembers the full limits (and the ids seen
	// allowed) of at most that many users, costing at most
	// RefusalCacheBytes (0: MemoBytes per user of RefusalCacheSize), and
	// answers repeats without Redis until the limit frees a slot, for at
	// most RefusalCacheTTL (see refusals.go).
	RefusalCacheSize  int
	RefusalCacheBytes int64
	RefusalCacheTTL   time.Duration
	// StallAfter: calls that have waited longer than this for Redis make
	// Ready fail (the Redis read timeout is a good value); 0: only failed
	// calls and connections do.
	StallAfter time.Duration
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Now        func() time.Time // only for the clock-skew check
	// Clock is the decision clock (nil: time.Now): what is left of a
	// user's snooze is measured on it, as decisions are (users_store.go).
	Clock func() time.Time
}

const defaultSkewInterval = 30 * time.Second

// Engine decides requests against the caps stored in Redis. It is safe for
// concurrent use.
type Engine struct {
	client       redis.UniversalClient
	set          atomic.Pointer[policySet] // the policy in use; SetPolicy swaps it
	keys         keys
	skewWarn     time.Duration
	skewEvery    time.Duration
	waitReplicas int
	waitTimeout  time.Duration
	refusals     *refusals // nil: no cache
	refund       *script
	health       *health // whether Redis can decide (Ready)
	m            *metrics
	log          *slog.Logger
	now          func() time.Time
	clock        func() time.Time
}

// New validates and compiles the rules and loads the script on every node.
func New(ctx context.Context, opts Options) (*Engine, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	set, err := compileRules(opts.Rules, opts.IdempotencyWindow)
	if err != nil {
		return nil, fmt.Errorf("capping: rules: %w", err)
	}
	set.name = opts.PolicyVersion
	e := &Engine{
		client:       opts.Client,
		keys:         keys{prefix: opts.KeyPrefix},
		skewWarn:     opts.SkewWarn,
		skewEvery:    opts.SkewInterval,
		waitReplicas: opts.WaitReplicas,
		waitTimeout:  opts.WaitTimeout,
		health:       newHealth(opts.StallAfter),
		m:            newMetrics(opts.Registerer),
		log:          opts.Logger,
		now:          opts.Now,
		clock:        opts.Clock,
	}
	e.health.watch(opts.Client)
	e.set.Store(set)
	if e.refund, err = newRefundScript(); err != nil {
		return nil, fmt.Errorf("capping: %w", err)
	}
	if opts.RefusalCacheSize > 0 {
		budget := opts.RefusalCacheBytes
		if budget <= 0 {
			budget = MemoBytes * int64(opts.RefusalCacheSize)
		}
		if e.refusals, err = newRefusals(opts.RefusalCacheSize, budget, opts.RefusalCacheTTL); err != nil {
			return nil, fmt.Errorf("capping: refusal cache: %w", err)
		}
	}
	if e.skewEvery <= 0 {
		e.skewEvery = defaultSkewInterval
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.clock == nil {
		e.clock = time.Now
	}
	if err := e.Reload(ctx); err != nil {
		return nil, err
	}
	e.checkListpack(ctx)
	return e, nil
}

// SetPolicy compiles rules and, when they are valid, makes them the policy
// every later batch is decided by (a batch in flight finishes with the
// policy it started with). Scopes are identified by their where and per, so
// a scope the new policy keeps keeps its counts; sends in scopes it drops
// are kept in the records (unknownRetention) for a policy that counts them
// again. The script is loaded on every node; a node that cannot be reached
// is not an error here (a call that meets NOSCRIPT is re-sent as EVAL).
// Invalid rules return the error and change nothing.
func (e *Engine) SetPolicy(ctx context.Context, rules Rules, version string) error {
	set, err := compileRules(rules, time.Duration(e.set.Load().idem)*time.Second)
	if err != nil {
		return fmt.Errorf("capping: policy %s: %w", version, err)
	}
	set.name = version
	if err := e.load(ctx, set); err != nil {
		e.log.Warn("policy script not loaded in advance; calls load it as they go", "policy", version, "err", err)
	}
	e.set.Store(set)
	// The cache's entries name the old policy's limits; lookups ignore
	// them anyway (refusal.set), this frees the memory.
	e.ForgetRefusals()
	return nil
}

// PolicyVersion names the policy in use.
func (e *Engine) PolicyVersion() string { return e.set.Load().name }

// ForgetRefusals empties the refusal cache: a slot may have freed early.
func (e *Engine) ForgetRefusals() {
	if e.refusals != nil {
		e.refusals.forget()
	}
}

// ListpackValue is the hash-max-listpack-value Redis needs for records to
// stay compact: a bucket hash is a listpack (about 5 bytes per user beyond
// the record) while every record fits, else a hash table (about 60 more).
// The caps hold either way.
const ListpackValue = 1024

// checkListpack warns about a master whose hash-max-listpack-value is below
// ListpackValue. A Redis that refuses CONFIG (managed services, ACLs) is
// not checked.
func (e *Engine) checkListpack(ctx context.Context) {
	_ = e.forEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		v, err := node.ConfigGet(ctx, "hash-max-listpack-value").Result()
		if err != nil {
			e.log.Debug("cannot read hash-max-listpack-value", "err", err)
			return nil
		}
		if n, err := strconv.Atoi(v["hash-max-listpack-value"]); err == nil && n < ListpackValue {
			e.log.Warn("redis hash-max-listpack-value is too small for compact records: set it to at least "+strconv.Itoa(ListpackValue)+" (caps hold, memory per user grows)",
				"node", node.Options().Addr, "hash-max-listpack-value", n)
		}
		return nil
	})
}

func (o Options) validate() error {
	var errs []error
	if o.Client == nil {
		errs = append(errs, fmt.Errorf("%s is required", "Client"))
	}
	if o.KeyPrefix == "" || strings.ContainsAny(o.KeyPrefix, "{} ") {
		// A brace would change the hash tag and split a user's keys over slots.
		errs = append(errs, fmt.Errorf("key prefix %q must be non-empty, without braces or spaces", o.KeyPrefix))
	}
	if o.IdempotencyWindow < time.Second {
		errs = append(errs, fmt.Errorf("idempotency window %s must be at least 1s", o.IdempotencyWindow))
	}
	if o.WaitReplicas < 0 || (o.WaitReplicas > 0 && o.WaitTimeout <= 0) {
		errs = append(errs, fmt.Errorf("wait replicas %d needs a positive wait timeout, got %s", o.WaitReplicas, o.WaitTimeout))
	}
	if _, ring := o.Client.(*redis.Ring); ring && o.WaitReplicas > 0 {
		errs = append(errs, fmt.Errorf("wait replicas: not supported with a ring client"))
	}
	if o.RefusalCacheSize < 0 || (o.RefusalCacheSize > 0 && o.RefusalCacheTTL <= 0) {
		errs = append(errs, fmt.Errorf("refusal cache of %d entries needs a positive TTL, got %s", o.RefusalCacheSize, o.RefusalCacheTTL))
	}
	if o.SkewWarn <= 0 {
		errs = append(errs, fmt.Errorf("skew warning threshold %s must be above 0", o.SkewWarn))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("capping: %w", err)
	}
	return nil
}

// Reload loads the script again on every node (SCRIPT LOAD; a ClusterClient
// loads it on every shard). Decide does not need it: it re-sends a call that
// meets NOSCRIPT with EVAL, which also caches the script on that node.
func (e *Engine) Reload(ctx context.Context) error { return e.load(ctx, e.set.Load()) }

func (e *Engine) load(ctx context.Context, set *policySet) error {
	s := set.script
	sha, err := e.client.ScriptLoad(ctx, s.src).Result()
	if err != nil {
		return fmt.Errorf("capping: load the policy script: %w", err)
	}
	if sha != s.sha {
		return fmt.Errorf("capping: load the policy script: Redis answered SHA %s, expected %s", sha, s.sha)
	}
	return nil
}

// keys builds the Redis key names: a user's record is field <uid%32> of the
// bucket hash <prefix>:{b<uid/32>} (the hash tag is the bucket: one slot,
// one node, one atomic call). The prefix never holds braces.
type keys struct{ prefix string }

// bucketSize is the users per bucket: enough to share a key's fixed cost
// (about 100 bytes), few enough for a fast lookup in its listpack.
const bucketSize = 32

func (k keys) appendBucket(b []byte, uid uint64) []byte {
	b = append(b, k.prefix...)
	b = append(b, ":{b"...)
	b = strconv.AppendUint(b, uid/bucketSize, 10)
	return append(b, '}')
}

func (k keys) bucket(uid uint64) string { return string(k.appendBucket(nil, uid)) }

func appendField(b []byte, uid uint64) []byte { return strconv.AppendUint(b, uid%bucketSize, 10) }

func field(uid uint64) string { return string(appendField(nil, uid)) }
