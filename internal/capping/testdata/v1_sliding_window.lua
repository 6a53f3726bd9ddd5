-- capper sliding_window: decide one intent approximately, with counters per
-- sub-interval.
--
-- KEYS[1]   <prefix>:{uid}:d:<hex digest>  idempotency marker of the intent
-- KEYS[2..] <prefix>:{uid}:sw:<window ms>[:<channel>]  one counter hash per
--           distinct (window, channel) of all policies that counts the
--           request's channel, so that counts survive a change of segment.
--           Fields: "<i>" = count of sub-interval i (ms [i*s, (i+1)*s)),
--           "n" = sum of the counters, "l" = no counter below index l exists.
-- ARGV[1]   marker TTL, ms
-- ARGV[2]   now, ms
-- ARGV[3]   number of hashes K (#KEYS - 1)
-- ARGV[4..] 2 per hash: window ms, sub-interval ms
-- then      2 per limit of the policy, in policy order: key index (0 = limit
--           of another channel), max
--
-- Estimate at t for window W (half-open, like sliding_log: ms t-W+1 .. t and
-- anything newer): the sub-interval i0 holding t-W+1 is weighted by the part
-- of it inside the window, later ones count fully:
--   E = inside*c[i0] + s*(n - c[i0])   (the estimate times s, an integer)
-- Allowed iff E/s + 1 <= max for every limit. Counts report ceil(E/s).
--
-- Returns {outcome (0 allowed, 1 denied, 2 duplicate), denying limit
-- (1-based, 0 none), retry-after ms (-1 never; for a duplicate: when it was
-- allowed, ms), count per limit (0 for a duplicate)...}.
local t = tonumber(ARGV[2])
local nkeys = tonumber(ARGV[3])
local first = 4 + 2 * nkeys -- first limit argument
local nlim = (#ARGV - first + 1) / 2
local res = {0, 0, 0}

-- The marker holds the ms the intent was allowed at: a duplicate is answered
-- with it, without touching the counters.
local seen = redis.call('GET', KEYS[1])
if seen then
  res[1], res[3] = 2, tonumber(seen)
  for i = 1, nlim do res[3 + i] = 0 end
  return res
end

local function load(k, w, s)
  local key = KEYS[k]
  local i0 = math.floor((t - w + 1) / s)
  local inow = math.floor(t / s)
  local v = redis.call('HMGET', key, 'l', 'n', i0, inow)
  local x = {key = key, w = w, s = s, i0 = i0, inow = inow, l = tonumber(v[1]),
    n = tonumber(v[2]) or 0, c0 = tonumber(v[3]) or 0, cn = tonumber(v[4]) or 0}
  if x.l and x.l < i0 then
    -- Counters left the window: drop them from n. Happens at most once per
    -- sub-interval, and the hash holds about one window of counters.
    local all = redis.call('HGETALL', key)
    x.n, x.stale = 0, {}
    for j = 1, #all, 2 do
      local f = all[j]
      if f ~= 'l' and f ~= 'n' then
        if tonumber(f) < i0 then
          x.stale[#x.stale + 1] = f
        else
          x.n = x.n + tonumber(all[j + 1])
        end
      end
    end
  end
  x.e = ((i0 + 1) * s - (t - w + 1)) * x.c0 + s * (x.n - x.c0)
  return x
end

local st = {}
for k = 2, nkeys + 1 do
  st[k] = load(k, tonumber(ARGV[2 * k]), tonumber(ARGV[2 * k + 1]))
end

local deny = 0
for i = 1, nlim do
  local j = first + 2 * (i - 1)
  local k = tonumber(ARGV[j])
  local c = 0
  if k > 0 then
    local x = st[k]
    c = math.floor((x.e + x.s - 1) / x.s)
    if deny == 0 and x.e + x.s > tonumber(ARGV[j + 1]) * x.s then deny = i end
  end
  res[3 + i] = c
end

-- Drop the counters that left the window (housekeeping, also when denied).
local function cleanup(x)
  if x.stale then
    if #x.stale > 0 then redis.call('HDEL', x.key, unpack(x.stale)) end
    x.l = x.i0
  end
end

if deny > 0 then
  res[1] = 1
  res[2] = deny
  local j = first + 2 * (deny - 1)
  local mx = tonumber(ARGV[j + 1])
  local x = st[tonumber(ARGV[j])]
  if mx == 0 then
    res[3] = -1
  else
    -- Earliest t' >= t at which E(t')/s + 1 <= max with no new intent: walk
    -- the sub-interval j that holds t'-W+1, from i0 on.
    local all = redis.call('HGETALL', x.key)
    local c, top, after = {}, x.inow, 0
    for q = 1, #all, 2 do
      local f = all[q]
      if f ~= 'l' and f ~= 'n' then
        local idx = tonumber(f)
        if idx >= x.i0 then
          c[idx] = tonumber(all[q + 1])
          after = after + c[idx]
          if idx > top then top = idx end
        end
      end
    end
    local s, w = x.s, x.w
    for b = x.i0, top + 1 do
      local cb = c[b] or 0
      after = after - cb -- now the sum of counters above b
      local r = s * (mx - 1 - after)
      if r >= 0 then
        local start, stop = b * s + w - 1, (b + 1) * s + w - 1
        local at = start
        if cb > 0 then at = math.max(start, stop - math.min(math.floor(r / cb), s)) end
        res[3] = math.max(at, t) - t
        break
      end
    end
  end
  for _, y in pairs(st) do
    if y.stale then
      cleanup(y)
      redis.call('HSET', y.key, 'l', y.l, 'n', y.n)
    end
  end
  return res
end

for _, x in pairs(st) do
  cleanup(x)
  local l = x.l or x.inow
  if x.inow < l then l = x.inow end
  redis.call('HSET', x.key, 'l', l, 'n', x.n + 1, x.inow, x.cn + 1)
  redis.call('PEXPIRE', x.key, x.w + x.s)
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1])
return res
