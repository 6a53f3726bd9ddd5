-- capper refund: gives back the slots of one allowed send whose delivery
-- failed, by removing its time from the sections of the user's record
-- (record.go describes the layout). The same for every policy: it reads
-- only the record. memory_refund.go is its Go port; keep them in step.
--
-- KEYS[1]  <prefix>:{b<uid/32>}, the user's bucket
-- ARGV[1]  field (the user's record)     ARGV[2] digest of the intent id (5 bytes)
--
-- Returns 0: applied (removed from at least one section); 1: unknown (no
-- idempotency entry with this digest); 2: nothing (known, nothing removed).
--
-- A section keeps times, not intents: the send is found by its time t (its
-- idempotency entry's). With k entries at t, a section with exactly k
-- times t counted every one of those sends, the refunded one among them, so
-- one t goes; a section with fewer may not hold it and keeps them all
-- (over-counting only). After a removal that section has fewer than k,
-- so refunding the same id again removes nothing there. The idempotency
-- entry stays: a redelivery of the intent must still be a duplicate. The
-- key's expiry and its "x" field are not touched (nothing grows).
--
-- Only the base and string libraries are used (no struct, bit or table), so
-- that an embedded Redis (the demo's) runs it too.
local byte, sub, char = string.byte, string.sub, string.char
local rec = redis.call('HGET', KEYS[1], ARGV[1])
if not rec then return 1 end
local n, ni, ib = #rec, byte(rec, 1), 2
if ni >= 128 then ni, ib = (ni - 128) * 256 + byte(rec, 2), 3 end
local sb = ib + 9 * ni -- first byte of the sections

-- The newest entry with this digest (on an entry boundary, as the decide
-- script's duplicate check), its time as 4 bytes: times are compared as
-- strings, equal bytes being equal times.
local tb
do
  local d, at = ARGV[2], ib
  while true do
    local p = string.find(rec, d, at, true)
    if not p or p >= sb then break end
    if (p - ib) % 9 == 0 then tb = sub(rec, p + 5, p + 8) end
    at = p + 1
  end
end
if not tb then return 1 end
local k = 0
for q = ib + 5, sb - 1, 9 do
  if sub(rec, q, q + 3) == tb then k = k + 1 end
end

local out, removed, p = sub(rec, 1, sb - 1), false, sb
while p <= n do
  local a, h = byte(rec, p), p + 3
  if a >= 128 then h = p + 6 end -- a per-campaign section: its campaign
  local c, b = byte(rec, h), h + 1
  if c >= 128 then c, b = (c - 128) * 256 + byte(rec, h + 1), h + 2 end
  local e = b + 4 * c
  local m, first = 0, nil
  -- A trimmed section (it starts with the mark, time 0) may have dropped
  -- older sends a limit still counts: taking a kept one could free a slot
  -- they hold, so it keeps every send.
  local from = b
  if c > 0 and sub(rec, b, b + 3) == '\0\0\0\0' then from = e end
  for j = from, e - 1, 4 do
    if sub(rec, j, j + 3) == tb then
      m = m + 1
      first = first or j
    end
  end
  if m > 0 and m == k then
    removed = true
    c = c - 1
    if c > 0 then -- an emptied section goes, as the decide script drops one
      out = out .. sub(rec, p, h - 1) .. (c < 128 and char(c) or char(128 + math.floor(c / 256), c % 256))
        .. sub(rec, b, first - 1) .. sub(rec, first + 4, e - 1)
    end
  else
    out = out .. sub(rec, p, e - 1)
  end
  p = e
end
if not removed then return 2 end
redis.call('HSET', KEYS[1], ARGV[1], out)
return 0
