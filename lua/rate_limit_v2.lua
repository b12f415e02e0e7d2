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
--   compact (limit <= the compact bound): a string "\1" .. i8 base .. I6
--     offsets from base, ascending, 6 bytes per unit; read with GET and
--     written whole with SET: two commands per key. base is 2^46 us before
--     the first unit, so offsets cover 2.2 years back and 6.7 years ahead;
--     a unit outside that range rebuilds the string on a new base, or, if
--     the log spans more, stores the key as a ZSET.
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
-- reference does (a compact string only when some expired).

local a = ARGV[1]
local n = #KEYS
if n < 1 or #ARGV ~= 2 or #a ~= 17 + 17 * n then
  return redis.error_reply('ERR sluice rate_limit_v2: want 1 or more keys, ARGV[1] of 17 + 17 bytes per key, ARGV[2] a nonce')
end
local now, flags, minttl, compact = struct.unpack('>i8BI4I4', a)
local consume = flags % 2 == 1
if flags >= 2 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local nonce = ARGV[2]

local SPAN = 281474976710656 -- 2^48: offsets are I6
local LEAD = 70368744177664  -- 2^46: base lies this far before a new log

-- floor(a / b) for integers a >= 0, b >= 1, corrected for the rounding of
-- the double division.
local function idiv(x, y)
  local q = math.floor(x / y)
  if q * y > x then
    q = q - 1
  elseif (q + 1) * y <= x then
    q = q + 1
  end
  return q
end

-- Integers go to Redis as plain decimal strings, never in exponent form.
local function int(x)
  return string.format('%.0f', x)
end

-- Microseconds to a PX in milliseconds, rounded up, at least the floor.
local function ttl(us)
  local ms = idiv(us + 999, 1000)
  if ms < minttl then
    ms = minttl
  end
  return int(ms)
end

-- The i-th (0-based) offset of compact string v.
local function off(v, i)
  return (struct.unpack('>I6', v, 10 + 6 * i))
end

-- First index in [lo, hi) whose offset exceeds x (hi if none).
local function above(v, lo, hi, x)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if off(v, mid) > x then
      hi = mid
    else
      lo = mid + 1
    end
  end
  return lo
end

-- Compact string of the ascending instants t[1..#t], or nil when they span
-- more than the offsets hold.
local function encode(t)
  local base = t[1] - LEAD
  if t[#t] - base >= SPAN then
    return nil
  end
  local parts = {'\1', struct.pack('>i8', base)}
  for j = 1, #t do
    parts[j + 2] = struct.pack('>I6', t[j] - base)
  end
  return table.concat(parts)
end

local reply = {1, now}
local allowed = true
-- Per key: what it holds (kind), and what the commit needs.
--   kind: 'none', 'gcra' (TAT string), 'compact', 'zset'
local kind, val, lo, cnt, newest, trimmed = {}, {}, {}, {}, {}, {}
local limit, period, cost, algo, tat = {}, {}, {}, {}, {}

-- Reads what key i holds into kind and val. A sliding log stored as a
-- ZSET (zset true) is first trimmed, the command that also tells its type.
local ztrimmed = {}
local function read(i, key, zset, cut)
  if zset then
    if type(redis.pcall('ZREMRANGEBYSCORE', key, '-inf', int(cut))) ~= 'table' then
      kind[i], ztrimmed[i] = 'zset', true -- or no key: counts the same
      return
    end
  end
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    kind[i] = 'zset' -- WRONGTYPE: a ZSET (v1, or a large limit)
  elseif not v then
    kind[i] = 'none'
  elseif string.byte(v, 1) == 1 then
    kind[i], val[i] = 'compact', v
  else
    kind[i], val[i] = 'gcra', tonumber(v) or 0
  end
end

-- Sliding-log check of key i: units inside the window, the instant of the
-- need-th oldest when refused, and the newest.
local function check_log(i, key, l, p, c)
  local cut = now - p
  local count, first, last = 0, nil, nil
  if kind[i] == 'compact' then
    local v = val[i]
    local m = (#v - 9) / 6
    local base = struct.unpack('>i8', v, 2)
    local k = 0
    if m > 0 and off(v, 0) <= cut - base then
      k = above(v, 0, m, cut - base)
    end
    lo[i], trimmed[i] = k, k > 0
    count = m - k
    if count > 0 then
      last = base + off(v, m - 1)
      if count + c > l then
        first = base + off(v, k + count + c - l - 1)
      end
    end
  elseif kind[i] == 'zset' then
    if not ztrimmed[i] then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', int(cut))
    end
    count = redis.call('ZCARD', key)
    if count > 0 then
      last = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
      if count + c > l then
        local need = count + c - l
        first = tonumber(redis.call('ZRANGE', key, need - 1, need - 1, 'WITHSCORES')[2])
      end
    end
  elseif kind[i] == 'gcra' and val[i] > now then
    -- Full until its TAT: every unit it could hold has left by then.
    count, first, last = l, val[i] - p, val[i] - p
  end
  cnt[i], newest[i] = count, last
  local ok, retry, reset = 1, 0, 0
  if count + c > l then
    ok, retry = 0, first + p - now
  end
  if last then
    reset = last + p - now
  end
  return ok, math.max(l - count, 0), retry, reset
end

-- The sliding log of a key read as a log, counted for a GCRA window.
local function log_units(i, key, p)
  if kind[i] == 'zset' then
    return redis.call('ZCOUNT', key, '(' .. int(now - p), '+inf')
  end
  local v = val[i]
  local m = (#v - 9) / 6
  local base = struct.unpack('>i8', v, 2)
  return m - above(v, 0, m, now - p - base)
end

for i = 1, n do
  local key = KEYS[i]
  local g, l, p, c = struct.unpack('>BI4i8I4', a, 18 + 17 * (i - 1))
  algo[i], limit[i], period[i], cost[i] = g, l, p, c
  read(i, key, g == 0 and l > compact, now - p)
  local ok, remaining, retry, reset = 1, 0, 0, 0
  if g == 1 then
    local t = idiv(p, l)
    if t < 1 then
      t = 1
    end
    local stored = 0
    if kind[i] == 'gcra' then
      stored = val[i]
    elseif kind[i] ~= 'none' then
      stored = now + log_units(i, key, p) * t
    end
    local capacity = t * l
    local base = math.max(stored, now)
    local nxt = base + c * t
    if nxt - now > capacity then
      ok, retry = 0, nxt - capacity - now
    end
    remaining = capacity - (base - now)
    if remaining > 0 then
      remaining = idiv(remaining, t)
    else
      remaining = 0
    end
    reset, tat[i] = base - now, base
  else
    ok, remaining, retry, reset = check_log(i, key, l, p, c)
  end
  if ok == 0 then
    allowed = false
  end
  local o = 2 + (i - 1) * 4
  reply[o + 1], reply[o + 2], reply[o + 3], reply[o + 4] = ok, remaining, retry, reset
end

-- The instants of the units key i holds inside its window, ascending.
local function instants(i, key)
  local t = {}
  if kind[i] == 'compact' then
    local v = val[i]
    local base = struct.unpack('>i8', v, 2)
    for j = lo[i], (#v - 9) / 6 - 1 do
      t[#t + 1] = base + off(v, j)
    end
  elseif kind[i] == 'zset' then
    local z = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    for j = 2, #z, 2 do
      t[#t + 1] = tonumber(z[j])
    end
  end
  return t
end

-- Writes key i as a compact string holding its units and c more at now;
-- false when they span more than a compact string holds.
local function commit_compact(i, key, c, px)
  local v
  if kind[i] == 'compact' then
    local s = val[i]
    local m = (#s - 9) / 6
    local d = now - struct.unpack('>i8', s, 2)
    if d >= 0 and d < SPAN then
      local at = m
      if m > lo[i] and off(s, m - 1) > d then
        at = above(s, lo[i], m, d) -- the clock went back: keep the order
      end
      v = string.sub(s, 1, 9) .. string.sub(s, 10 + 6 * lo[i], 9 + 6 * at) ..
        string.rep(struct.pack('>I6', d), c) .. string.sub(s, 10 + 6 * at)
    end
  elseif kind[i] ~= 'zset' then
    v = '\1' .. struct.pack('>i8', now - LEAD) .. string.rep(struct.pack('>I6', LEAD), c)
  end
  if not v then
    local t = instants(i, key)
    local at = #t + 1
    while at > 1 and t[at - 1] > now do
      at = at - 1
    end
    for _ = 1, c do
      table.insert(t, at, now)
    end
    v = encode(t)
    if not v then
      return false
    end
  end
  redis.call('SET', key, v, 'PX', px)
  return true
end

-- Writes key i as a ZSET holding its units and c more at now.
local function commit_zset(i, key, c, px)
  if kind[i] == 'compact' or kind[i] == 'gcra' then
    local t = instants(i, key)
    redis.call('DEL', key)
    for j = 1, #t, 500 do
      local args = {}
      for k = j, math.min(j + 499, #t) do
        args[#args + 1] = int(t[k])
        args[#args + 1] = nonce .. ':c' .. k
      end
      redis.call('ZADD', key, unpack(args))
    end
  end
  local snow = int(now)
  for u = 1, c, 500 do
    local args = {}
    for m = u, math.min(u + 499, c) do
      args[#args + 1] = snow
      args[#args + 1] = nonce .. ':' .. m
    end
    redis.call('ZADD', key, unpack(args))
  end
  redis.call('PEXPIRE', key, px)
end

if not allowed then
  reply[1] = 0
end
for i = 1, n do
  local key = KEYS[i]
  local l, p, c = limit[i], period[i], cost[i]
  local o = 2 + (i - 1) * 4
  if allowed and consume then
    if algo[i] == 1 then
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
      local top = now
      if newest[i] and newest[i] > now then
        top = newest[i]
      end
      local reset = top + p - now
      local px = ttl(reset)
      if l > compact or not commit_compact(i, key, c, px) then
        commit_zset(i, key, c, px)
      end
      reply[o + 2], reply[o + 4] = math.max(l - cnt[i] - c, 0), reset
    end
  elseif trimmed[i] then
    -- Checked only: drop the expired units, as the reference does.
    local v = val[i]
    if cnt[i] == 0 then
      redis.call('DEL', key)
    else
      redis.call('SET', key, string.sub(v, 1, 9) .. string.sub(v, 10 + 6 * lo[i]), 'KEEPTTL')
    end
  end
end
return reply
