package capping

// Users' limits in Redis: written by the worker that applies the user-limits
// topic, read by the decide script, erased with the user's record. A bucket
// that holds anyone's limits never expires (its field x says its expiry
// covers everything, so no decision sets one); when the last limits in it
// go, it expires again like any other.

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// userField is the bucket's field holding a user's limits.
func userField(uid uint64) string { return "u" + field(uid) }

// noExpiry is the x of a bucket holding limits: beyond any decision time.
const noExpiry = "4294967295"

// userLimitsSrc sets (ARGV[2] not empty) or removes a user's limits, and
// with ARGV[3] = "forget" their record too. ARGV[4] is how long a bucket
// left with records but no one's limits lives (s). Returns {limits before,
// record before} (false: none).
const userLimitsSrc = `
local before = redis.call('HMGET', KEYS[1], ARGV[1], ARGV[5])
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], 'x', '` + noExpiry + `')
  redis.call('PERSIST', KEYS[1])
  return before
end
redis.call('HDEL', KEYS[1], ARGV[1])
if ARGV[3] == 'forget' then redis.call('HDEL', KEYS[1], ARGV[5]) end
local rest, records = redis.call('HKEYS', KEYS[1]), 0
for _, f in ipairs(rest) do
  local b = string.byte(f, 1)
  if b == 117 then return before end -- another user's limits: keep it
  if b >= 48 and b <= 57 then records = records + 1 end
end
if records == 0 then
  redis.call('DEL', KEYS[1])
elseif redis.call('HGET', KEYS[1], 'x') == '` + noExpiry + `' then
  redis.call('HSET', KEYS[1], 'x', '0') -- the next decision extends the expiry again
  redis.call('EXPIRE', KEYS[1], ARGV[4])
end
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
	return before, nil
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
	res, err := userLimitsScript.Run(ctx, e.client, []string{e.keys.bucket(uid)}, userField(uid), v, mode, life, field(uid)).Slice()
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
