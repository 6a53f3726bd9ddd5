package pacing

// Leases: the one Redis key per budget that every worker takes its tokens
// from. A call takes a lease of tokens (a token is one release), returns
// the tokens a worker did not spend (credit) and charges the sends that
// never wait (debt: exempt intents count against the provider's rate too).

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// leaseScript is a token bucket of the budget's rate and burst, filled by
// Redis' clock (one clock for every worker), that grants ahead: a lease of
// tokens the bucket does not have yet takes them from its future and says
// when they are there (valid, in ms), up to ahead ms; the worker releases
// nothing before. Every worker's leases then form one queue on the bucket,
// each call is a lease (no call that only learns it must wait), and what
// all workers release in any second stays within the rate and the burst.
// A lane flag per lane: a lane that asked within the last ttl ms, or holds
// tokens not valid yet (and ttl ms after), goes before every lower lane,
// on every worker. A grant is at least unit tokens
// (or all that was asked), so a busy budget costs one call per unit
// releases.
//
// The bucket fills at the budget's effective rate (throttle.go): the
// configured rate, or less while its provider throttles, climbing back by
// itself; and grants nothing while the provider's Retry-After lasts.
//
// KEYS[1] the budget's hash. ARGV: rate/s, burst, ask, credit (negative:
// debt), lane, ttl ms, unit, ahead ms. Reply: {granted, valid in ms, wait
// ms (nothing granted: ask again then), the effective rate in 1/1000 a
// second}.
var leaseScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local ask, credit = tonumber(ARGV[3]), tonumber(ARGV[4])
local lane, ttl, unit, ahead = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local s = redis.call('HMGET', KEYS[1], 'tok', 'ts', 'eff', 'eat', 'hold')
local tok, ts = tonumber(s[1]), tonumber(s[2])
` + effectiveLua + `
local r = eff or rate
if tok == nil or ts == nil then tok, ts = burst, now end
if now > ts then
  tok = math.min(burst, tok + (now - ts) * r / 1000)
  ts = now
end
tok = math.min(burst, tok + credit)
local grant, valid, wait = 0, 0, 0
if ask > 0 then
  local blocked = 0
  local hold = tonumber(s[5])
  if hold and hold > now then blocked = hold - now end -- the provider's Retry-After
  for j = 0, lane - 1 do
    local w = tonumber(redis.call('HGET', KEYS[1], 'want' .. j))
    if w ~= nil and w > now then blocked = math.max(blocked, w - now) end
  end
  local till = now + ttl
  if blocked > 0 then
    wait = blocked
    till = now + blocked + ttl -- it asks again then: lanes below it stay behind it
  else
    grant = math.min(ask, math.max(unit, math.floor(tok)))
    local left = tok - grant
    if left < 0 then valid = math.ceil(-left * 1000 / r) end
    if valid > ahead then
      wait = valid - ahead
      grant, valid = 0, 0
    else
      tok = left
      till = now + valid + ttl
    end
  end
  local was = tonumber(redis.call('HGET', KEYS[1], 'want' .. lane))
  if was == nil or till > was then redis.call('HSET', KEYS[1], 'want' .. lane, till) end
end
if eff then
  redis.call('HSET', KEYS[1], 'tok', tostring(tok), 'ts', ts, 'eff', tostring(eff), 'eat', now)
else
  redis.call('HSET', KEYS[1], 'tok', tostring(tok), 'ts', ts)
  if s[3] then redis.call('HDEL', KEYS[1], 'eff', 'eat', 'ed') end -- back at the rate
end
redis.call('PEXPIRE', KEYS[1], ` + bucketLifeMs + `)
return {grant, valid, wait, math.floor(r * 1000)}
`)

// Lease is one call's answer: the tokens granted and from when, or when
// nothing was, how long until another call may be granted (the bucket's
// future is taken further than it looks ahead, or a higher lane's turn
// lasts).
type Lease struct {
	Granted int
	ValidMs int64 // the granted tokens may be spent this many ms from now
	WaitMs  int64 // nothing granted: ask again this many ms from now
	// Effective is the budget's effective rate a second (its rate unless
	// its provider throttles).
	Effective float64
}

// LeaseRequest is one call: Ask tokens for Lane (0 is the highest), Credit
// tokens returned (negative: a debt charged).
type LeaseRequest struct {
	Budget      string
	Rate        float64
	Burst, Unit int
	Ask, Credit int
	Lane        int
	TTLms       int64
	AheadMs     int64 // the furthest ahead a grant may be valid
}

// RedisLeaser takes leases from Redis (a single node or a Cluster: a
// budget is one key, so one node).
type RedisLeaser struct {
	Client redis.Scripter
	// Prefix starts every key (the worker's redis.key_prefix).
	Prefix string
}

// Key is the Redis key of a budget's bucket.
func (l *RedisLeaser) Key(budget string) string { return l.Prefix + ":pace:{" + budget + "}" }

// Lease takes one lease.
func (l *RedisLeaser) Lease(ctx context.Context, r LeaseRequest) (Lease, error) {
	v, err := leaseScript.Run(ctx, l.Client, []string{l.Key(r.Budget)},
		r.Rate, r.Burst, r.Ask, r.Credit, r.Lane, r.TTLms, r.Unit, r.AheadMs).Int64Slice()
	if err != nil {
		return Lease{}, fmt.Errorf("lease tokens of budget %s: %w", r.Budget, err)
	}
	if len(v) != 4 {
		return Lease{}, fmt.Errorf("lease tokens of budget %s: reply %v is not {granted, valid, wait, effective rate}", r.Budget, v)
	}
	return Lease{Granted: int(v[0]), ValidMs: v[1], WaitMs: v[2], Effective: float64(v[3]) / 1000}, nil
}
