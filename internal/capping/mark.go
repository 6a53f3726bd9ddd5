package capping

import "strconv"

// markLua is what the scripts other than decide (users' limits, migrate)
// use to read and write a bucket's mark (layout.go: xField), so that each
// keeps the y the decide script wrote: getMark() is x, y (an earlier
// version's decimal mark reads as x, y 0), setMark(x, y) writes it.
var markLua = `
local function getMark()
  local m = redis.call('HGET', KEYS[1], '` + xField + `')
  if m and #m == ` + strconv.Itoa(markSize) + ` then
    local a, b, c, d, e, f, g, h = string.byte(m, 2, 9)
    return ((a * 256 + b) * 256 + c) * 256 + d, ((e * 256 + f) * 256 + g) * 256 + h
  end
  return m and tonumber(m) or 0, 0
end
local function setMark(x, y)
  local function be(n) return math.floor(n / 16777216) % 256, math.floor(n / 65536) % 256, math.floor(n / 256) % 256, n % 256 end
  local a, b, c, d = be(x)
  local e, f, g, h = be(y)
  redis.call('HSET', KEYS[1], '` + xField + `', string.char(0, a, b, c, d, e, f, g, h))
end
`
