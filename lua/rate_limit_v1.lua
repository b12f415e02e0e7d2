-- sluice rate_limit_v1: all-or-nothing check of up to 16 rate-limit keys.
--
-- IMMUTABLE once released: a test pins this file's SHA1. Any change, even
-- to a comment, is a new file (rate_limit_v2.lua) and a new constant.
--
-- The arithmetic is that of the Go reference (domain.LogState and
-- domain.GCRAState), in integer microseconds, which a Lua double holds
-- exactly (instants ~1.8e15 < 2^53).
--
-- KEYS[i]              key of the i-th limit; all keys share one hash slot
-- ARGV[1]              now, unix microseconds (ignored when ARGV[3] == "1")
-- ARGV[2]              "1": consume when every limit admits (Evaluate)
--                      "0": check only, write nothing but expired entries
--                      (Peek)
-- ARGV[3]              "1": take now from the server clock (TIME)
-- ARGV[4]              nonce unique to this call; sliding-log members are
--                      nonce..":"..n, so they never collide, whatever the
--                      clock does
-- ARGV[5]              floor of every TTL, in milliseconds (>= 1)
-- ARGV[6+4(i-1)+0..3]  the i-th limit: algorithm ("0" sliding log,
--                      "1" GCRA), limit, period in microseconds, cost
--
-- Reply: {allowed, now, then for each key in order: allowed, remaining,
-- retry_after_us, reset_after_us}; allowed is 1 or 0. The caller
-- aggregates (domain.Result.Finish), so the rules live in one place.
--
-- Sliding log: a ZSET with one member per admitted unit, scored by its
-- instant; the window is (now - period, now]. GCRA: a string holding the
-- theoretical arrival time. Every key written gets a PEXPIRE of the time it
-- stays relevant (sliding log: until its newest unit leaves; GCRA: until
-- its TAT), raised to the floor: the TTL runs on the server's clock and
-- the window on the caller's, and the floor absorbs the gap between the
-- two (a now read before the call waited in a queue). A key of the wrong type
-- (a window whose algorithm changed) counts as empty and is replaced on the
-- next admitted request.

local n = #KEYS
if n < 1 or #ARGV ~= 5 + 4 * n then
  return redis.error_reply('ERR sluice rate_limit_v1: want 1 or more keys and 5 + 4 arguments per key')
end
local now = tonumber(ARGV[1])
local consume = ARGV[2] == '1'
if ARGV[3] == '1' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local nonce = ARGV[4]
local minttl = tonumber(ARGV[5])

-- floor(a / b) for integers a >= 0, b >= 1, corrected for the rounding of
-- the double division.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- Integers go to Redis as plain decimal strings, never in exponent form.
local function int(x)
  return string.format('%.0f', x)
end

-- Microseconds to a PEXPIRE in milliseconds, rounded up, at least the
-- floor and at least 1.
local function ttl(us)
  local ms = idiv(us + 999, 1000)
  if ms < minttl then
    ms = minttl
  end
  if ms < 1 then
    ms = 1
  end
  return int(ms)
end

local function failed(r)
  return type(r) == 'table' and r.err ~= nil
end

local reply = {1, now}
local algo, limit, period, cost = {}, {}, {}, {}
local wrongtype = {}
local tat = {}      -- GCRA: max(TAT, now)
local total = {}    -- sliding log: units inside the window
local newest = {}   -- sliding log: newest instant, nil when empty
local allowed = true

for i = 1, n do
  local key = KEYS[i]
  local b = 5 + (i - 1) * 4
  algo[i] = ARGV[b + 1]
  limit[i] = tonumber(ARGV[b + 2])
  period[i] = tonumber(ARGV[b + 3])
  cost[i] = tonumber(ARGV[b + 4])
  local l, p, c = limit[i], period[i], cost[i]
  local ok, remaining, retry, reset = 1, 0, 0, 0

  if algo[i] == '1' then
    local v = redis.pcall('GET', key)
    local stored = 0
    if failed(v) then
      wrongtype[i] = true
    elseif v then
      stored = tonumber(v)
    end
    local t = idiv(p, l)
    if t < 1 then
      t = 1
    end
    local capacity = t * l
    local base = math.max(stored, now)
    local nxt = base + c * t
    if nxt - now > capacity then
      ok = 0
      retry = nxt - capacity - now
    end
    remaining = capacity - (base - now)
    if remaining > 0 then
      remaining = idiv(remaining, t)
    else
      remaining = 0
    end
    reset = base - now
    tat[i] = base
  else
    local r = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', int(now - p))
    local count = 0
    if failed(r) then
      wrongtype[i] = true
    else
      count = redis.call('ZCARD', key)
    end
    remaining = math.max(l - count, 0)
    if count + c > l then
      ok = 0
      -- The request passes once the need-th oldest unit leaves.
      local need = count + c - l
      local e = redis.call('ZRANGE', key, need - 1, need - 1, 'WITHSCORES')
      if e[2] then
        retry = tonumber(e[2]) + p - now
      end
    end
    if count > 0 then
      local e = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
      newest[i] = tonumber(e[2])
      reset = newest[i] + p - now
    end
    total[i] = count
  end

  if ok == 0 then
    allowed = false
  end
  local o = 2 + (i - 1) * 4
  reply[o + 1], reply[o + 2], reply[o + 3], reply[o + 4] = ok, remaining, retry, reset
end

if not allowed then
  reply[1] = 0
  return reply
end
if not consume then
  return reply
end

local snow = int(now)
for i = 1, n do
  local key = KEYS[i]
  local l, p, c = limit[i], period[i], cost[i]
  local o = 2 + (i - 1) * 4
  if wrongtype[i] then
    redis.call('DEL', key)
  end
  if algo[i] == '1' then
    local t = idiv(p, l)
    if t < 1 then
      t = 1
    end
    local new = tat[i] + c * t
    redis.call('SET', key, int(new), 'PX', ttl(new - now))
    local remaining = t * l - (new - now)
    if remaining > 0 then
      remaining = idiv(remaining, t)
    else
      remaining = 0
    end
    reply[o + 2], reply[o + 4] = remaining, new - now
  else
    -- One member per unit, added in bounded batches to stay within Lua's
    -- stack for unpack.
    local u = 1
    while u <= c do
      local last = math.min(u + 499, c)
      local args = {}
      for m = u, last do
        args[#args + 1] = snow
        args[#args + 1] = nonce .. ':' .. m
      end
      redis.call('ZADD', key, unpack(args))
      u = last + 1
    end
    local top = now
    if newest[i] and newest[i] > now then
      top = newest[i]
    end
    local reset = top + p - now
    redis.call('PEXPIRE', key, ttl(reset))
    reply[o + 2], reply[o + 4] = math.max(l - total[i] - c, 0), reset
  end
end
return reply
