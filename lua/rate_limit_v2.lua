-- sluice rate_limit_v2: all-or-nothing check of up to 16 rate-limit keys.
--
-- IMMUTABLE once released: a test pins this file's SHA1. Any change, even
-- to a comment, is a new file (rate_limit_v3.lua) and a new constant.
--
-- The arithmetic is that of the Go reference (domain.LogState and
-- domain.GCRAState), in integer microseconds, which a Lua double holds
-- exactly (instants ~1.8e15 < 2^53).
--
-- KEYS[i]   key of the i-th limit; all keys share one hash slot
-- ARGV[1]   binary, big-endian (struct): a 17-byte header, then 17 bytes
--           per key.
--             header: i8 now (unix microseconds; ignored with flag 2)
--                     B  flags: 1 consume when every limit admits
--                              (Evaluate; else check only, Peek),
--                              2 take now from the server clock (TIME)
--                     I4 floor of every TTL, in milliseconds (>= 1)
--                     I4 largest sliding-log limit stored compactly;
--                        0: store every sliding log as a ZSET
--             per key: B algorithm (0 sliding log, 1 GCRA), I4 limit,
--                      i8 period in microseconds, I4 cost
-- ARGV[2]   nonce unique to this call: ZSET members are nonce..":"..n
--
-- Reply: {allowed, now, then for each key in order: allowed, remaining,
-- retry_after_us, reset_after_us}; allowed is 1 or 0. The caller
-- aggregates (domain.NewResult), so the rules live in one place.
--
-- Encodings. GCRA: a string holding the theoretical arrival time (TAT) in
-- decimal, as in v1. Sliding log, one record per admitted unit, the window
-- being (now - period, now]:
--   compact (limit <= the compact bound): a string "\1" followed by the
--     instant of each unit (unix microseconds, unsigned, big-endian, 7
--     bytes), ascending. All the strings of a call are read with one MGET
--     and each admitted key is written whole with one SET: no ZSET command,
--     no member string. An instant before 1970 cannot be written so; such
--     a key is stored as a ZSET.
--   ZSET (larger limits, or compact bound 0): one member per unit scored
--     by its instant, as in v1, so v1 and v2 can share such keys.
--
-- A key found in another encoding than its window wants is read for what
-- it holds and never counts as empty while it holds units:
--   - a ZSET under a compact window (a v1 key after an upgrade, or a limit
--     lowered under the bound) is counted as a ZSET and rewritten compact
--     on the next admitted request; a compact string under a ZSET window
--     (a limit raised past the bound, or the bound set to 0) likewise
--     becomes a ZSET;
--   - a GCRA key under a sliding-log window counts as full until its TAT
--     (the units it holds leave no later than that);
--   - a sliding log under a GCRA window counts its units inside the
--     window as consumed now: TAT = now + units * T.
-- A key that held another algorithm is overwritten on the next admitted
-- request. Every key written gets a TTL of the time it stays relevant
-- (sliding log: until its newest unit leaves; GCRA: until its TAT),
-- raised to the floor. Expired units are dropped by every call, as the
-- reference does (a compact string only when some expired, keeping its
-- TTL). Requires Redis 6.0 (SET KEEPTTL).

local a = ARGV[1]
local n = #KEYS
if n < 1 or #ARGV ~= 2 or #a ~= 17 + 17 * n then
  return redis.error_reply('ERR sluice rate_limit_v2: want 1 or more keys, ARGV[1] of 17 + 17 bytes per key, ARGV[2] a nonce')
end
local sunpack, pack, sub = struct.unpack, struct.pack, string.sub
local now, flags, minttl, compact = sunpack('>i8BI4I4', a)
if flags >= 2 then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local consume = flags % 2 == 1

-- The common paths (GCRA strings, compact logs) are written inline and the
-- rare ones (ZSETs, changes of encoding) in functions built on first use:
-- Redis runs this body on every call, and every closure and table it
-- creates is garbage to collect.

-- Integer division is written (x - x % y) / y: exact for the integers
-- below 2^52 it meets (a double quotient of such integers is never
-- rounded up to the next integer), and free of function calls.

-- First index in [lo, hi) of compact string v whose instant exceeds x (hi
-- if none): a few steps from lo (expiry drops the oldest units, a few at a
-- time), then a binary search.
local function above(v, lo, hi, x)
  local stop = lo + 4
  if stop > hi then
    stop = hi
  end
  while lo < stop do
    if sunpack('>I7', v, 2 + 7 * lo) > x then
      return lo
    end
    lo = lo + 1
  end
  while lo < hi do
    local mid = lo + hi
    mid = (mid - mid % 2) / 2
    if sunpack('>I7', v, 2 + 7 * mid) > x then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo
end

-- The rare paths: ZSET logs, and keys in another encoding than their
-- window wants. See the header.
local rare
local function rarepaths()
  local r = {}
  local nonce = ARGV[2]

  -- Sliding-log check of a ZSET: units inside the window (trimming the
  -- others), the instant of the need-th oldest when refused, the newest.
  function r.check_zset(key, l, p, c)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - p)
    local count = redis.call('ZCARD', key)
    local first, last
    if count > 0 then
      last = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
      if count + c > l then
        local need = count + c - l
        first = tonumber(redis.call('ZRANGE', key, need - 1, need - 1, 'WITHSCORES')[2])
      end
    end
    return count, first, last
  end

  -- The units a sliding log holds inside a GCRA window of period p.
  function r.log_units(key, v, p)
    if not v then
      return redis.call('ZCOUNT', key, '(' .. string.format('%.0f', now - p), '+inf')
    end
    local m = (#v - 1) / 7
    return m - above(v, 0, m, now - p)
  end

  -- The instants of the units a log holds from index lo (compact string
  -- v) or inside its window (ZSET, v nil), ascending.
  function r.instants(key, v, lo)
    local t = {}
    if v then
      for j = lo, (#v - 1) / 7 - 1 do
        t[#t + 1] = sunpack('>I7', v, 2 + 7 * j)
      end
    else
      local z = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
      for j = 2, #z, 2 do
        t[#t + 1] = tonumber(z[j])
      end
    end
    return t
  end

  -- A compact string holding instants t and c units at now; nil when an
  -- instant is before 1970.
  function r.encode(t, c)
    if now < 0 or (t[1] and t[1] < 0) then
      return nil
    end
    local parts, placed = {'\1'}, false
    for j = 1, #t do
      if not placed and t[j] > now then
        parts[#parts + 1], placed = string.rep(pack('>I7', now), c), true
      end
      parts[#parts + 1] = pack('>I7', t[j])
    end
    if not placed then
      parts[#parts + 1] = string.rep(pack('>I7', now), c)
    end
    return table.concat(parts)
  end

  -- Writes key as a ZSET holding instants t and c units at now.
  function r.write_zset(key, t, c, px, rewrite)
    if rewrite then
      redis.call('DEL', key)
    end
    for j = 1, #t, 500 do
      local args = {}
      for k = j, math.min(j + 499, #t) do
        args[#args + 1] = t[k]
        args[#args + 1] = nonce .. ':c' .. k
      end
      redis.call('ZADD', key, unpack(args))
    end
    for u = 1, c, 500 do
      local args = {}
      for m = u, math.min(u + 499, c) do
        args[#args + 1] = now
        args[#args + 1] = nonce .. ':' .. m
      end
      redis.call('ZADD', key, unpack(args))
    end
    redis.call('PEXPIRE', key, px)
  end
  return r
end

-- Per key, 10 slots of st from 10(i-1): what the key holds (0 nothing, 1
-- a GCRA TAT, 2 a compact log, 3 a ZSET), its TAT or compact string, the
-- first unit inside the window (compact), the units inside the window,
-- the newest instant (or false), the TAT a GCRA window starts from, and
-- the key's algorithm, limit, period and cost.
local NONE, GCRA, COMPACT, ZSET = 0, 1, 2, 3
local st = {}
local reply = {1, now}
local allowed = true
-- One MGET reads every string; a key it finds empty may hold a ZSET.
local got = redis.call('MGET', unpack(KEYS))
for i = 1, n do
  local key, v, b, o = KEYS[i], got[i], 10 * (i - 1), 4 * i - 2
  local g, l, p, c = sunpack('>BI4i8I4', a, 1 + 17 * i)
  local kind = NONE
  if v then
    if string.byte(v, 1) == 1 then
      kind = COMPACT
    else
      kind, v = GCRA, v + 0
    end
  elseif (g == 0 and l > compact) or redis.call('EXISTS', key) == 1 then
    kind = ZSET -- or, for a large sliding log, no key: counts the same
  end
  local ok, remaining, retry, reset = 1, 0, 0, 0
  local lo, count, last, start = 0, 0, false, now
  if g == 1 then
    local t = (p - p % l) / l
    if t < 1 then
      t = 1
    end
    if kind == GCRA then
      if v > now then
        start = v
      end
    elseif kind ~= NONE then
      rare = rare or rarepaths()
      start = now + rare.log_units(key, kind == COMPACT and v, p) * t
    end
    local capacity = t * l
    if start + c * t - now > capacity then
      ok, retry = 0, start + c * t - capacity - now
    end
    remaining = capacity - (start - now)
    if remaining > 0 then
      remaining = (remaining - remaining % t) / t
    else
      remaining = 0
    end
    reset = start - now
  else
    local first
    if kind == COMPACT then
      local m = (#v - 1) / 7
      if m > 0 and sunpack('>I7', v, 2) <= now - p then
        lo = above(v, 1, m, now - p)
      end
      count = m - lo
      if count > 0 then
        last = sunpack('>I7', v, 7 * m - 5)
        if count + c > l then
          first = sunpack('>I7', v, 2 + 7 * (lo + count + c - l - 1))
        end
      end
    elseif kind == ZSET then
      rare = rare or rarepaths()
      count, first, last = rare.check_zset(key, l, p, c)
      last = last or false
    elseif kind == GCRA and v > now then
      -- Full until its TAT: every unit it could hold has left by then.
      count, first, last = l, v - p, v - p
    end
    if count + c > l then
      ok, retry = 0, first + p - now
    end
    if last then
      reset = last + p - now
    end
    remaining = l - count
    if remaining < 0 then
      remaining = 0
    end
  end
  if ok == 0 then
    allowed = false
  end
  st[b + 1], st[b + 2], st[b + 3], st[b + 4], st[b + 5] = kind, v, lo, count, last
  st[b + 6], st[b + 7], st[b + 8], st[b + 9], st[b + 10] = start, g, l, p, c
  reply[o + 1], reply[o + 2], reply[o + 3], reply[o + 4] = ok, remaining, retry, reset
end

if not allowed then
  reply[1] = 0
end
local rec -- the compact record of one unit at now
for i = 1, n do
  local key, b = KEYS[i], 10 * (i - 1)
  local kind, v, lo, count, last = st[b + 1], st[b + 2], st[b + 3], st[b + 4], st[b + 5]
  if allowed and consume then
    local o = 4 * i - 2
    local g, l, p, c = st[b + 7], st[b + 8], st[b + 9], st[b + 10]
    local px
    if g == 1 then
      local t = (p - p % l) / l
      if t < 1 then
        t = 1
      end
      local new = st[b + 6] + c * t
      px = new - now + 999
      px = (px - px % 1000) / 1000
      if px < minttl then
        px = minttl
      end
      -- Numbers below 2^53 reach Redis as plain integers.
      redis.call('SET', key, new, 'PX', px)
      local remaining = t * l - (new - now)
      if remaining > 0 then
        remaining = (remaining - remaining % t) / t
      else
        remaining = 0
      end
      reply[o + 2], reply[o + 4] = remaining, new - now
    else
      local top = now
      if last and last > now then
        top = last
      end
      px = top + p - now + 999
      px = (px - px % 1000) / 1000
      if px < minttl then
        px = minttl
      end
      local w
      if l <= compact and now >= 0 then
        if kind == COMPACT and top == now then
          -- The common case: append c units at now after the kept ones.
          if not rec then
            rec = pack('>I7', now)
          end
          local u = rec
          if c > 1 then
            u = string.rep(rec, c)
          end
          if lo == 0 then
            w = v .. u
          else
            w = '\1' .. sub(v, 2 + 7 * lo) .. u
          end
        elseif kind == NONE or kind == GCRA then
          w = '\1' .. string.rep(pack('>I7', now), c)
        else
          rare = rare or rarepaths()
          w = rare.encode(rare.instants(key, kind == COMPACT and v, lo), c)
        end
      end
      if w then
        redis.call('SET', key, w, 'PX', px)
      else
        rare = rare or rarepaths()
        local t, rewrite = {}, kind == GCRA
        if kind == COMPACT then
          t, rewrite = rare.instants(key, v, lo), true
        end
        rare.write_zset(key, t, c, px, rewrite)
      end
      local remaining = l - count - c
      if remaining < 0 then
        remaining = 0
      end
      reply[o + 2], reply[o + 4] = remaining, top + p - now
    end
  elseif kind == COMPACT and lo > 0 then
    -- Checked only: drop the expired units, as the reference does.
    if count == 0 then
      redis.call('DEL', key)
    else
      redis.call('SET', key, '\1' .. sub(v, 2 + 7 * lo), 'KEEPTTL')
    end
  end
end
return reply
