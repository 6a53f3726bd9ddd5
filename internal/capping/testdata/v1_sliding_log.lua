-- capper sliding_log: decide one intent exactly against a user's logs.
--
-- KEYS[1]  <prefix>:{uid}        sorted set of every allowed intent: member =
--                                8-byte digest of the intent id, score = ms.
--                                It is also the idempotency record.
-- KEYS[2]  <prefix>:{uid}:<ch>   optional: the same for one tracked channel.
-- ARGV[1]  member
-- ARGV[2]  now, ms, given to ZADD as is (no Lua number formatting of scores)
-- ARGV[3]  now - retention of KEYS[1]: older entries are neither duplicates
--          nor counted, and are evicted
-- ARGV[4]  retention of KEYS[1], ms (PEXPIRE)
-- ARGV[5]  now - retention of KEYS[2]
-- ARGV[6]  retention of KEYS[2], ms
-- ARGV[7..] 4 per limit of the policy, in policy order: key ('1' = KEYS[1],
--          '2' = KEYS[2], '0' = limit of another channel), lowest score in
--          the window (now - window + 1), max, window ms
--
-- Windows are half-open: an intent allowed at t counts for decisions in
-- [t, t+W). Scores above now (a worker whose clock is ahead) count too.
--
-- Cost, measured on Redis 7.0 (INFO commandstats): every command returning a
-- score (ZSCORE that finds the member, WITHSCORES) formats a double and
-- costs about three times a ZCOUNT, and each tonumber() is a strtod. So the
-- common paths read integers only: ZSCORE (nil for a new intent; a found one
-- is a duplicate, answered with its score and nothing more) and one
-- ZCOUNT per limit; a denial adds one index ZRANGE for its retry-after; an
-- allowed intent adds ZADD, ZREMRANGEBYSCORE and PEXPIRE per log. The
-- eviction is unconditional: checking the oldest entry first (ZRANGE 0 0
-- WITHSCORES) costs more than a ZREMRANGEBYSCORE that finds nothing.
--
-- Returns {outcome (0 allowed, 1 denied, 2 duplicate), denying limit
-- (1-based, 0 none), retry-after ms (-1 never; for a duplicate: when it was
-- allowed, ms), count per limit (0 for a duplicate: not counted)...}.
local n = (#ARGV - 6) / 4
local res = {0, 0, 0}

-- A member inside the retention is an intent allowed before: answer when,
-- and nothing else (its answer needs no counts).
local seen = redis.call('ZSCORE', KEYS[1], ARGV[1])
if seen and tonumber(seen) > tonumber(ARGV[3]) then
  res[1], res[3] = 2, tonumber(seen)
  for i = 1, n do res[3 + i] = 0 end
  return res
end

local deny = 0
for i = 1, n do
  local j = 3 + 4 * i
  local k = ARGV[j]
  local c = 0
  if k ~= '0' then
    c = redis.call('ZCOUNT', KEYS[k == '1' and 1 or 2], ARGV[j + 1], '+inf')
    if deny == 0 and c >= tonumber(ARGV[j + 2]) then deny = i end
  end
  res[3 + i] = c
end

if deny > 0 then
  res[1] = 1
  res[2] = deny
  local j = 3 + 4 * deny
  local mx = tonumber(ARGV[j + 2])
  if mx == 0 then
    res[3] = -1
  else
    -- The window holds the count newest entries (count >= max): the slot
    -- frees when the max-th newest leaves it.
    local e = redis.call('ZRANGE', KEYS[ARGV[j] == '1' and 1 or 2], -mx, -mx, 'WITHSCORES')
    res[3] = tonumber(e[2]) + tonumber(ARGV[j + 3]) - tonumber(ARGV[2])
  end
  return res
end

-- Allowed: record it. ZADD goes first so that no key is ever emptied and
-- deleted mid-script: in a migrating slot a command on a missing key would
-- abort the script half-way ("non local key").
for k = 1, #KEYS do
  redis.call('ZADD', KEYS[k], ARGV[2], ARGV[1])
end
for k = 1, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[k], '-inf', ARGV[1 + 2 * k])
  redis.call('PEXPIRE', KEYS[k], ARGV[2 + 2 * k])
end
return res
