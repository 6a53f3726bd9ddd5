package capping

// Users' limits in Redis: written by the worker that applies the user-limits
// topic, read by the decide script, erased with the user's record. A bucket
// that holds anyone's lasting limits (a tier, a channel, quiet hours) never
// expires (its field x says its expiry covers everything, so no decision
// sets one); one that holds only snoozes lives at least until the last
// ends (x is then its end), and then expires like any other: an ended
// snooze goes with its bucket.

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// userField is the bucket's field holding a user's limits.
func userField(uid uint64) string { return "u" + field(uid) }

// noExpiry is the x of a bucket holding limits: beyond any decision time
// (the largest a mark holds).
const noExpiry = "4294967295"

// userLimitsSrc sets (ARGV[2] not empty) or removes a user's limits, and
// with ARGV[3] = "forget" their record too; ARGV[1] is their limits'
// field, ARGV[5] their record's. ARGV[4] is how long a bucket left without
// lasting limits lives at least, past its last snooze (s); ARGV[6] is now
// on the engine's clock (s), the clock decisions are made by: a snooze's
// end is a decision time, so what is left of it is measured on that clock,
// not on the server's (a test that decides at a simulated time expires
// what it simulates, on any day it runs). Returns {limits before, record
// before} (false: none).
var userLimitsSrc = markLua + `
local before = redis.call('HMGET', KEYS[1], ARGV[1], ARGV[5])
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
else
  redis.call('HDEL', KEYS[1], ARGV[1])
  if ARGV[3] == 'forget' then redis.call('HDEL', KEYS[1], ARGV[5]) end
end
-- What the bucket holds now: limits that last (a tier, a channel, quiet
-- hours: userkinds.go), the end of the latest limit that ends (a snooze),
-- records.
local all, lasting, snooze, records = redis.call('HGETALL', KEYS[1]), false, 0, 0
for i = 1, #all, 2 do
  local b = string.byte(all[i], 1)
  if b == 117 then
` + kindsLifeLua("all[i + 1]", "    ") + `  elseif b >= 48 and b <= 57 then
    records = records + 1
  end
end
local x, y = getMark()
if lasting then
  setMark(` + noExpiry + `, y)
  redis.call('PERSIST', KEYS[1])
  return before
end
local now = tonumber(ARGV[6])
if records == 0 and snooze <= now then
  redis.call('DEL', KEYS[1])
  return before
end
-- Snoozes only, or nothing: the bucket expires as the decide script
-- extends it, and not before the last snooze ends (x, in decision time).
if x == ` + noExpiry + ` then x = 0 end
setMark(math.max(x, snooze), y)
local want, ttl = math.max(snooze - now, 0) + tonumber(ARGV[4]), redis.call('TTL', KEYS[1])
if ttl < want then redis.call('EXPIRE', KEYS[1], want) end
return before
`

var userLimitsScript = redis.NewScript(userLimitsSrc)

// SetUserLimits stores a user's limits, replacing what they had; zero
// limits remove them. It returns the limits they had (zero: none).
func (e *Engine) SetUserLimits(ctx context.Context, uid uint64, u UserLimits) (UserLimits, error) {
	v := ""
	if !u.IsZero() {
		v = u.Encode()
	}
	before, _, err := e.userLimits(ctx, uid, v, "")
	if err != nil {
		return UserLimits{}, fmt.Errorf("set user %d's limits: %w", uid, err)
	}
	if err := e.countUsers(ctx, b2i(!u.IsZero())-b2i(!before.IsZero())); err != nil {
		return before, fmt.Errorf("set user %d's limits: %w", uid, err)
	}
	return before, nil
}

// countUsers adds delta to the count of users with limits. It is kept
// apart from the buckets (another slot), after their write: a write
// retried after a lost answer sees its own change as the one before, and
// the count may miss it. UsersWithLimits is an estimate.
func (e *Engine) countUsers(ctx context.Context, delta int) error {
	if delta == 0 {
		return nil
	}
	if err := e.client.IncrBy(ctx, e.keys.prefix+":user-limits:count", int64(delta)).Err(); err != nil {
		return fmt.Errorf("count users with limits: %w", err)
	}
	return nil
}

// UsersWithLimits is about how many users hold limits (countUsers).
func (e *Engine) UsersWithLimits(ctx context.Context) (int64, error) {
	n, err := e.client.Get(ctx, e.keys.prefix+":user-limits:count").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the count of users with limits: %w", err)
	}
	return n, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Forgotten is what ForgetUser removed.
type Forgotten struct {
	Limits      UserLimits // their limits (zero: none)
	RecordBytes int        // their record's size (0: none): sends and idempotency entries
	Cached      bool       // this worker's refusal cache knew them
}

// ForgetUser erases a user: their record (send log and idempotency
// entries), their limits, and what this process's refusal cache holds
// about them. Other workers drop theirs when they see the user-limits
// topic's tombstone (internal/userlimits).
func (e *Engine) ForgetUser(ctx context.Context, uid uint64) (Forgotten, error) {
	var f Forgotten
	before, rec, err := e.userLimits(ctx, uid, "", "forget")
	if err != nil {
		return f, fmt.Errorf("forget user %d: %w", uid, err)
	}
	f.Limits, f.RecordBytes = before, len(rec)
	f.Cached = e.ForgetCachedUser(uid)
	if err := e.countUsers(ctx, -b2i(!before.IsZero())); err != nil {
		return f, fmt.Errorf("forget user %d: %w", uid, err)
	}
	return f, nil
}

// ForgetCachedUser drops what the refusal cache holds about a user and
// reports whether it held anything.
func (e *Engine) ForgetCachedUser(uid uint64) bool {
	if e.refusals == nil {
		return false
	}
	had := e.refusals.peek(uid) != nil
	e.refusals.forgetUser(uid)
	return had
}

// UserLimits reads a user's limits (zero: none).
func (e *Engine) UserLimits(ctx context.Context, uid uint64) (UserLimits, error) {
	v, err := e.client.HGet(ctx, e.keys.bucket(uid), userField(uid)).Result()
	if errors.Is(err, redis.Nil) {
		return UserLimits{}, nil
	}
	if err != nil {
		return UserLimits{}, fmt.Errorf("read user %d's limits: %w", uid, err)
	}
	return ParseUserLimits(v)
}

func (e *Engine) userLimits(ctx context.Context, uid uint64, v, mode string) (UserLimits, string, error) {
	life := e.set.Load().keyLife + e.set.Load().slack
	key := e.keys.bucket(uid)
	args := []any{userField(uid), v, mode, life, field(uid), e.clock().Unix()}
	var res []any
	var err error
	if e.waitReplicas > 0 {
		res, err = e.userLimitsDurable(ctx, key, args)
	} else {
		res, err = userLimitsScript.Run(ctx, e.client, []string{key}, args...).Slice()
	}
	if err != nil {
		return UserLimits{}, "", err
	}
	var before UserLimits
	if s, ok := res[0].(string); ok {
		if before, err = ParseUserLimits(s); err != nil {
			return UserLimits{}, "", err
		}
	}
	rec, _ := res[1].(string)
	return before, rec, nil
}

// userLimitsDurable runs the script on key's master and returns once
// WaitReplicas replicas acknowledged it (as decisions do, durable.go): a
// change the applier committed must outlive a failover, or an erased user
// could come back.
func (e *Engine) userLimitsDurable(ctx context.Context, key string, args []any) ([]any, error) {
	node, err := e.masterFor(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("find the master: %w", err)
	}
	pipe := node.Pipeline()
	run := pipe.Eval(ctx, userLimitsSrc, []string{key}, args...)
	wait := pipe.Do(ctx, "wait", e.waitReplicas, e.waitTimeout.Milliseconds())
	_, _ = pipe.Exec(ctx) // errors are per command
	res, err := run.Slice()
	if err != nil {
		return nil, err
	}
	acked, err := wait.Int64()
	if err == nil && acked < int64(e.waitReplicas) {
		err = errNotReplicated{node.Options().Addr, acked, int64(e.waitReplicas), e.waitTimeout}
	}
	if err != nil {
		e.m.waitFailures.Inc()
		return nil, err
	}
	return res, nil
}
