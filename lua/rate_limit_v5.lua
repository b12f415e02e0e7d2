-- sluice rate_limit_v5: the one script of the Redis store. All-or-nothing
-- check of up to 16 rate limits on their keys, for n identical requests
-- at one instant (Evaluate, Peek); reservations (Reserve: a check that
-- also takes concurrency slots under a lease; Settle; Renew). Rules,
-- encodings and how the script may change: docs/adr/017-the-redis-script.md
-- (leases: docs/adr/012-reservations-and-leases.md).
--
-- IMMUTABLE once released: a test pins this file's SHA1. Any change, even
-- to a comment, is a new file (rate_limit_v6.lua) and a new constant.
--
-- KEYS[k]   the k-th distinct key (k <= u), numbered in the order the
--           limits first name them; all keys share one hash slot
-- KEYS[u+1] the lease record (ops 1-3 only), in the slot of KEYS[1]
-- ARGV[1]   binary, big-endian (struct): a 29-byte header, then 17 bytes
--           per limit (n limits, u <= n <= 16).
--             header: i8 now (unix microseconds; with flag 2, added
--                        to TIME: 0, or how far ahead an allotment is
--                        reserved, docs/adr/019)
--                     B  flags: 1 consume (else Peek), 2 take now from
--                        TIME, 8 * op: 0 Evaluate or Peek, 1 Reserve,
--                        2 Settle, 3 Renew
--                     I4 floor of every TTL, in milliseconds (>= 1)
--                     I4 the compact bound (0: every log a ZSET)
--                     i8 grace in microseconds (>= 0)
--                     I4 n, the identical requests (1 for ops 1-3)
--             per limit: B algorithm (0 sliding log, 1 GCRA, 2
--                        concurrency) + 4 * its key's index, I4 limit,
--                        i8 period in microseconds, I4 cost
-- ARGV[2]   op 0: a nonce unique to the call (ZSET members nonce:k);
--           ops 1-3: the lease ID.
-- ARGV[3]   ops 1-3: i8, the lease TTL in microseconds (Reserve, Renew)
--           or the actual cost (Settle).
--
-- A limit names a key named before or the next one. Limits that share a
-- key are sliding logs of one cost: one log, read once, counted per
-- window in its own period, written once, kept for the longest period P
-- (a unit is forgotten at or before latest - P - min(grace, P), latest
-- its newest unit or now). A log is a compact string while, after a
-- write, it holds at most the compact bound of units (or its largest
-- limit is at or below the bound), else a ZSET, which stays one until it
-- expires or is reset.
--
-- Replies. Op 0: {A, then when A > 0, per limit: remaining and
-- reset_after_us after the A-th request; then when A < n, per limit:
-- remaining, retry_after_us, reset_after_us of a refused request}, A the
-- requests admitted, in order, each all or nothing (min(n, min over the
-- limits of what each window alone fits)); retry_after_us is 0 exactly
-- when that window alone would admit. Peek: {A, per limit: remaining,
-- retry_after_us, reset_after_us as the state stands}. Op 1: op 0's, then
-- now. Op 2: {1} settled, {2} already settled, {3} expired or unknown.
-- Op 3: {1, now} renewed, {0} settled, expired or unknown. A value the
-- script cannot interpret: the error "SLUICEVALUE <i> <reason>" (i the
-- first limit naming the key, n + 1 the lease record; reason wrongtype,
-- malformed, range or future), before anything is written.
--
-- Encodings: GCRA "\2", i8 TAT, i8 the emission interval it was written
-- with; compact log "\1" and the instant of each unit (7 bytes, unsigned)
-- ascending; ZSET log one member per unit scored by its instant;
-- concurrency a ZSET of the slots held (ID:k) scored by their lease's
-- expiry; lease record "\3", B state (1 open, 2 settled), i8 the
-- reservation's instant, i8 its expiry.
--
-- Requires Redis 6.0.

local a = ARGV[1]
local u = #KEYS
-- Ops 1-3 carry ARGV[3] and the lease record as the last key. What op 0
-- (every decision) pays for them is a few tests per call, not per key.
local na = #ARGV
local leased = na == 3
if leased then
  u = u - 1
end
local n = (#a - 29) / 17
if u < 1 or na < 2 or na > 3 or n < u or n > 16 or n % 1 ~= 0 then
  return redis.error_reply('ERR sluice rate_limit_v5: want 1 or more keys (and the lease record), ARGV[1] of 29 + 17 bytes per limit (at least one limit per key, at most 16), ARGV[2] a nonce or lease ID (and ARGV[3])')
end
local sunpack, pack, sub, byte, rep, floor = struct.unpack, struct.pack, string.sub, string.byte, string.rep, math.floor
local now, flags, minttl, compact, grace, reps = sunpack('>i8BI4I4i8I4', a)
local op = 0
if leased then
  op = (flags - flags % 8) / 8
  flags = flags % 8
  if op < 1 or op > 3 or reps ~= 1 then
    return redis.error_reply('ERR sluice rate_limit_v5: ARGV[3] is for ops 1-3, each of one request')
  end
elseif flags >= 8 then
  return redis.error_reply('ERR sluice rate_limit_v5: ops 1-3 take ARGV[3] and the lease record')
end
if reps < 1 or grace < 0 then
  return redis.error_reply('ERR sluice rate_limit_v5: n must be at least 1 and the grace not negative')
end
if flags % 4 >= 2 then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2] + now
end
if flags % 8 >= 4 then
  return redis.error_reply('ERR sluice rate_limit_v5: flag 4 is not defined')
end
local consume = flags % 2 == 1
-- Every limit's algorithm and key index (one byte: algorithm + 4 ×
-- index), limit, period and cost, in one unpack: arg[4i-3] to arg[4i].
-- The nine windows' format is a constant (no string built per call).
local fmt
if n == 9 then
  fmt = '>BI4i8I4BI4i8I4BI4i8I4BI4i8I4BI4i8I4BI4i8I4BI4i8I4BI4i8I4BI4i8I4'
else
  fmt = '>' .. rep('BI4i8I4', n)
end
local arg = {sunpack(fmt, a, 30)}

-- domain.MaxPeriod in microseconds; no stored instant may lie further
-- ahead of now than AHEAD (a longer wait than any window can ask for).
local MAXP = 31622400000000
local AHEAD = 2 * MAXP
local horizon = now + AHEAD

local NONE, GCRA, COMPACT, ZSET, CONC = 0, 1, 2, 3, 4

-- First index in [lo, hi) of compact string v whose instant exceeds x (hi
-- if none), and that instant when it was read (else nil), given a, the
-- instant at lo, and b, the instant at hi - 1 (or nil: read here). The
-- probes alternate interpolation (arrivals are about even in time: a
-- probe or two) and bisection (a burst at one instant cannot make it
-- linear). Integer division is written (x - x % y) / y: exact below 2^52,
-- and no call; an interpolated index, a quotient of doubles, takes floor.
local function above(v, lo, hi, x, a, b)
  local bisect = false
  while lo < hi do
    a = a or sunpack('>I7', v, 2 + 7 * lo)
    if a > x then
      return lo, a
    end
    b = b or sunpack('>I7', v, 7 * hi - 5)
    if b <= x then
      return hi
    end
    -- a <= x < b: the index is in (lo, hi - 1].
    local g
    if bisect then
      g = lo + hi
      g = (g - g % 2) / 2
    else
      g = lo + 1 + floor((x - a) * (hi - 2 - lo) / (b - a))
    end
    bisect = not bisect
    local y = sunpack('>I7', v, 2 + 7 * g)
    if y > x then
      hi, b = g + 1, y
      if g == lo + 1 then
        return g, y
      end
    else
      lo, a = g + 1, nil
    end
  end
  return lo
end

local function bad(i, reason)
  return redis.error_reply('SLUICEVALUE ' .. i .. ' ' .. reason)
end

local format = string.format

-- A TTL (us microseconds from now) in milliseconds, rounded up and at
-- least the floor of TTLs, as the string redis.call sends: a number
-- argument costs Redis a conversion per call, and the keys of one window
-- share their TTL: the last one converted (ttlpx, ttls) is kept.
local ttlpx, ttls
local function ttl(us)
  local px = us + 999
  px = (px - px % 1000) / 1000
  if px < minttl then
    px = minttl
  end
  if px ~= ttlpx then
    ttlpx, ttls = px, format('%.0f', px)
  end
  return ttls
end

-- Ops 1-3: the lease record's key, the lease ID, ARGV[3], and for Settle
-- and Renew what the record says: the lease's instant and expiry. The
-- functions are made only here: a closure costs every call that makes
-- it, and op 0 needs none.
local lkey, lid, X, leaseAt, leaseExp, recordpx, members
local OPEN, SETTLED = 1, 2
if leased then
  if #ARGV[3] ~= 8 then
    return redis.error_reply('ERR sluice rate_limit_v5: ARGV[3] must be 8 bytes')
  end
  lkey, lid, X = KEYS[u + 1], ARGV[2], sunpack('>i8', ARGV[3])
  -- The record's TTL in milliseconds: the lease's, plus a margin of as
  -- much again (at most a minute, at least the floor of TTLs), so that a
  -- Settle retried after the expiry still finds the lease settled, and a
  -- caller whose clock is a little behind the server's still finds it.
  recordpx = function(us)
    local ms = us + 999
    ms = (ms - ms % 1000) / 1000
    local m = ms
    if m > 60000 then
      m = 60000
    end
    if m < minttl then
      m = minttl
    end
    return ttl(1000 * (ms + m))
  end
  -- cmd on key with the lease's members ID:from..ID:to, each after
  -- score when given, after opt when given; in batches of 500, as Lua's
  -- stack bounds unpack. Returns the sum of the replies.
  members = function(cmd, key, opt, score, from, to)
    local sum = 0
    for k0 = from, to, 500 do
      local args, m = {}, 0
      if opt then
        args[1], m = opt, 1
      end
      for k = k0, math.min(k0 + 499, to) do
        if score then
          m = m + 1
          args[m] = score
        end
        m = m + 1
        args[m] = lid .. ':' .. k
      end
      sum = sum + redis.call(cmd, key, unpack(args))
    end
    return sum
  end
  if op > 1 then
    local r = redis.pcall('GET', lkey)
    if type(r) == 'table' and r.err then
      return bad(n + 1, 'wrongtype')
    end
    local state
    if r then
      if #r ~= 18 or byte(r, 1) ~= 3 then
        return bad(n + 1, 'malformed')
      end
      local _
      _, state, leaseAt, leaseExp = sunpack('>BBi8i8', r)
      if state ~= OPEN and state ~= SETTLED then
        return bad(n + 1, 'malformed')
      end
    end
    if op == 2 then
      -- Settle: an expired lease counted at its cost reserved and its
      -- slots are back; a settled one stays settled.
      if not r or (state == OPEN and leaseExp <= now) then
        return {3}
      end
      if state == SETTLED then
        return {2}
      end
    else
      -- Renew: every concurrency key read and validated, then its
      -- lease's members (those still there) moved to the new expiry,
      -- the expired ones trimmed, the key's TTL its latest expiry.
      if not r or state ~= OPEN or leaseExp <= now then
        return {0}
      end
      local exp, tops = now + X, {}
      for i = 1, n do
        local x = arg[4 * i - 3]
        if x % 4 == 2 then
          -- A concurrency window's key is its own: its index, checked here
          -- (Renew reads nothing else).
          x = (x - 2) / 4
          if x < 1 or x > u then
            return redis.error_reply('ERR sluice rate_limit_v5: a limit names key ' .. x .. ': keys are named 1 to u, each first after the ones before it')
          end
          local z = redis.pcall('ZRANGE', KEYS[x], -1, -1, 'WITHSCORES')
          if z.err then
            return bad(i, 'wrongtype')
          end
          local top = false
          if z[2] then
            top = tonumber(z[2])
            if top ~= top or top % 1 ~= 0 then
              return bad(i, 'range')
            end
          end
          tops[i] = top
        end
      end
      for i = 1, n do
        local top = tops[i]
        if top then
          local key = KEYS[(arg[4 * i - 3] - 2) / 4]
          redis.call('ZREMRANGEBYSCORE', key, '-inf', now - grace)
          members('ZADD', key, 'XX', exp, 1, arg[4 * i])
          if exp > top then
            top = exp
          end
          redis.call('PEXPIRE', key, ttl(top - now + grace))
        end
      end
      redis.call('SET', lkey, pack('>BBi8i8', 3, OPEN, leaseAt, exp), 'PX', recordpx(X))
      return {1, now}
    end
  end
end

-- Per limit i: lw[i], a log window's first unit inside it (a compact
-- log's index, a ZSET's lower bound) or a GCRA window's start (max(TAT,
-- now), converted); cnt[i], the units inside the window (a concurrency
-- window's slots held) or a GCRA window's emission interval. Its key's
-- index and algorithm stay in arg[4i-3] (x = algorithm + 4 × index): g =
-- x % 4, and its key's slots end at 2.75(x - g) = 11k.
-- Per key, 11 slots of ks from 11(k-1), reached from the last (kb = 11k,
-- slot s at kb - 11 + s): 1 kind, 2 value (a compact string, a GCRA
-- state's TAT), 3 the newest unit (a concurrency key's latest expiry; now
-- for a GCRA state holding units, S3; or false), 4 a compact log's first
-- kept index, 5 its first kept unit (false: none), a ZSET log's forget
-- bound or a GCRA state's interval, 6 the units it holds; from the
-- arguments, 7 the first limit naming it (which a write and an error
-- name), 8 the longest period, 9 the largest limit, 10 the algorithm it
-- is written in (3: not written), 11 the cost. Each slot is written by a
-- statement of its own (a multiple assignment copies each value again),
-- and exists from the start, so that each table is an array (a hash
-- part's rehashes cost more than a key's reading): constructors size
-- them for the common requests (2 windows; nine windows on 5 or 9 keys).
local lw, cnt, ks
if n <= 2 then
  lw, cnt = {false, false}, {false, false}
elseif n <= 9 then
  lw = {false, false, false, false, false, false, false, false, false}
  cnt = {false, false, false, false, false, false, false, false, false}
else
  lw, cnt = {}, {}
  for i = 1, n do
    lw[i] = false
    cnt[i] = false
  end
end
if u <= 2 then
  ks = {
    false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false,
  }
elseif u <= 5 then
  ks = {
    false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false,
  }
elseif u <= 9 then
  ks = {
    false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false,
  }
else
  ks = {}
  for x = 1, 11 * u do
    ks[x] = false
  end
end
-- zw counts the concurrency keys, marked in slot 1 for the read below;
-- seen is the last key named so far, by its last slot (11 × its index).
local seen, zw = 0, 0
for i = 1, n do
  local j = 4 * i
  local x, l, p = arg[j - 3], arg[j - 2], arg[j - 1]
  local g = x % 4
  local kb = 2.75 * (x - g)
  if kb == seen + 11 then
    seen = kb
    ks[kb - 4] = i
    ks[kb - 3] = p
    ks[kb - 2] = l
    ks[kb - 1] = g
    ks[kb] = arg[j]
    if g == 2 then
      zw, ks[kb - 10] = zw + 1, true
    end
  elseif kb < 11 or kb > seen then
    return redis.error_reply('ERR sluice rate_limit_v5: a limit names key ' .. kb / 11 .. ': keys are named 1 to u, each first after the ones before it')
  else
    -- A shared log: sliding-log windows of one cost.
    if g ~= 0 or ks[kb - 1] ~= 0 or arg[j] ~= ks[kb] then
      return redis.error_reply('ERR sluice rate_limit_v5: limits that share a key must be sliding logs of one cost')
    end
    if p > ks[kb - 3] then
      ks[kb - 3] = p
    end
    if l > ks[kb - 2] then
      ks[kb - 2] = l
    end
  end
end
if seen ~= 11 * u then
  return redis.error_reply('ERR sluice rate_limit_v5: every key must be named by a limit')
end

-- Read phase: one MGET reads every string; nothing is written before
-- every key is read and validated. First each key's kind (slot 1): what
-- MGET found; for a key it finds nil under windows above the compact
-- bound, a ZSET log or none (its ZSET read tells); for a key found
-- missing under windows that want a string, what one EXISTS over all of
-- them (and TYPE, only when that finds one) says. A concurrency key is
-- always a ZSET: it is left out of the MGET, and its first ZSET command,
-- a pcall, tells a string by WRONGTYPE.
local got
if zw == 0 then
  if leased then
    got = redis.call('MGET', unpack(KEYS, 1, u))
  else
    got = redis.call('MGET', unpack(KEYS))
  end
elseif zw == u then
  got = {}
else
  local ss, m = {}, 0
  for k = 1, u do
    if not ks[11 * k - 10] then
      m = m + 1
      ss[m] = KEYS[k]
    end
  end
  local r = redis.call('MGET', unpack(ss))
  got, m = {}, 0
  for k = 1, u do
    if ks[11 * k - 10] then
      got[k] = false
    else
      m = m + 1
      got[k] = r[m]
    end
  end
end
local probe, np = false, 0
for k = 1, u do
  local kb = 11 * k
  local v = got[k]
  local kind = COMPACT
  if v then
    -- By its length: a GCRA state is 17 bytes, a compact log never (1 +
    -- 7 per unit); each is validated below, its tag included. A
    -- concurrency key is not in the MGET.
    if #v == 17 then
      kind = GCRA
    end
  elseif zw > 0 and ks[kb - 10] then
    kind = CONC
  elseif ks[kb - 2] > compact and ks[kb - 1] == 0 then
    kind = ZSET
  else
    kind = NONE
    probe = probe or {}
    np = np + 1
    probe[np] = KEYS[k]
  end
  ks[kb - 10] = kind
end
if probe and redis.call('EXISTS', unpack(probe)) > 0 then
  for k = 1, u do
    if ks[11 * k - 10] == NONE then
      local ty = redis.call('TYPE', KEYS[k])['ok']
      if ty == 'zset' then
        ks[11 * k - 10] = ZSET
      elseif ty ~= 'none' then
        return bad(ks[11 * k - 4], 'wrongtype')
      end
    end
  end
end

-- Then each window's count in its key, and A, the requests every window
-- admits: the least of what each alone fits. A key's value is validated
-- and decoded once, at the first limit naming it (keys are named in
-- order), whatever the windows that read it: one pass over the limits.
-- A key is named first when its slots lie past the last key decoded.
-- gcra: a GCRA state or window was met (settat below is made only then).
local A, last, gcra = reps, 0, false
for i = 1, n do
  local j = 4 * i
  local x, l, p, c = arg[j - 3], arg[j - 2], arg[j - 1], arg[j]
  local g = x % 4
  local kb = 2.75 * (x - g)
  if kb > last then
    last = kb
    local k = kb / 11
    local kind, v, z = ks[kb - 10], got[k]
    -- A key the windows say is a ZSET (ZSET or CONC, the kinds from 3
    -- on): its newest unit, or WRONGTYPE, then a string read here (a GCRA
    -- state, or a compact log written under a limit at or below the
    -- bound), decoded below as MGET's would be. Each kind writes the
    -- slots it has (the others stay false or nil), and slot 1 when it
    -- changes.
    if kind >= ZSET then
      z = redis.pcall('ZRANGE', KEYS[k], -1, -1, 'WITHSCORES')
      if z.err then
        v = redis.pcall('GET', KEYS[k])
        if type(v) ~= 'string' then
          return bad(i, 'wrongtype')
        end
        if #v == 17 then
          kind = GCRA
        else
          kind = COMPACT
        end
        ks[kb - 10] = kind
      end
    end
    if kind == COMPACT or kind == ZSET then
      -- A log: its units (a compact one's), first and newest unit, then
      -- the forget bound of its longest window (S5) and, in a compact log,
      -- the first unit it keeps.
      local m, first, newest
      local fcut = 0
      if kind == COMPACT then
        m = #v - 1
        if m % 7 ~= 0 then
          return bad(i, 'malformed')
        end
        m = m / 7
        if m > 0 then
          -- One unpack reads the tag with the first unit (a call into C
          -- costs more than the arithmetic around it).
          local tag
          tag, first = sunpack('>BI7', v)
          newest = sunpack('>I7', v, 7 * m - 5)
          if tag ~= 1 or first > newest then
            return bad(i, 'malformed')
          end
        elseif byte(v) ~= 1 then
          return bad(i, 'malformed')
        end
        ks[kb - 9] = v
        ks[kb - 7] = 0
        ks[kb - 5] = m
      elseif z[2] then
        newest = tonumber(z[2])
        if newest ~= newest or newest < -AHEAD or newest % 1 ~= 0 then
          return bad(i, 'range')
        end
      else
        ks[kb - 10] = NONE
      end
      if newest then
        if newest > horizon then
          return bad(i, 'future')
        end
        local p, gr = ks[kb - 3], grace
        if gr > p then
          gr = p
        end
        fcut = now - p - gr
        if first and first <= fcut then
          local lo, fa = above(v, 1, m, fcut, nil, newest)
          ks[kb - 7] = lo
          first = fa or lo < m and sunpack('>I7', v, 2 + 7 * lo)
        end
      end
      ks[kb - 8] = newest
      -- Slot 5: a compact log's first unit kept, a ZSET's forget bound.
      if kind == COMPACT then
        ks[kb - 6] = first
      else
        ks[kb - 6] = fcut
      end
    elseif kind == GCRA then
      -- One unpack reads the tag too.
      gcra = true
      local tag, tat, tw = sunpack('>Bi8i8', v)
      if tag ~= 2 then
        return bad(i, 'malformed')
      end
      if tw < 1 or tw > MAXP then
        return bad(i, 'range')
      end
      if tat > horizon then
        return bad(i, 'future')
      end
      -- The units it holds: ceil((TAT - now) / its interval), a partly
      -- drained one whole (S1, S3), stamped now for a log's window (S3).
      local m = 0
      if tat > now then
        local d = tat - now
        m = (d - d % tw) / tw
        if d % tw > 0 then
          m = m + 1
        end
      end
      ks[kb - 9] = tat
      ks[kb - 6] = tw
      ks[kb - 8] = m > 0 and now
      ks[kb - 5] = m
    elseif kind == CONC then
      -- The slots its unexpired members hold (slot 6) and its latest
      -- expiry.
      local newest, m = false, 0
      if z[2] then
        newest = tonumber(z[2])
        if newest ~= newest or newest % 1 ~= 0 then
          return bad(i, 'range')
        end
        if newest > horizon then
          return bad(i, 'future')
        end
        if newest > now then
          m = redis.call('ZCOUNT', KEYS[k], now + 1, '+inf')
        end
      end
      ks[kb - 8] = newest
      ks[kb - 5] = m
    end
  end
  -- The units the key holds for this window: a log's inside the window,
  -- (now - p, +inf): units ahead of now count (S5); low the first of
  -- them (a compact log's index or a ZSET's lower bound); a GCRA
  -- state's, the slots a concurrency key holds (decoded once).
  local kind = ks[kb - 10]
  local count, low = 0, 0
  if kind == COMPACT or kind == ZSET then
    local newest = ks[kb - 8]
    if newest then
      local lower = now - p
      if kind == COMPACT then
        -- A search, from the first unit kept, only when that unit is not
        -- inside the window.
        local m, fa = ks[kb - 5], ks[kb - 6]
        low = ks[kb - 7]
        if fa and fa <= lower then
          low = above(ks[kb - 9], low, m, lower, fa, newest)
        end
        count = m - low
      else
        -- Whole microseconds: (lower, +inf) is [lower + 1, +inf), and a
        -- number reaches Redis exactly, without a string.format.
        low = lower
        count = redis.call('ZCOUNT', KEYS[kb / 11], lower + 1, '+inf')
      end
    end
  elseif kind ~= NONE then
    count = ks[kb - 5]
  end
  -- What fits: room, in units of c (a request's cost, or for GCRA its
  -- cost in intervals).
  local room = l - count
  if g == 0 then
    lw[i] = low
    cnt[i] = count
  elseif g == 1 then
    gcra = true
    -- The emission interval, truncated, at least a microsecond.
    local t = (p - p % l) / l
    if t < 1 then
      t = 1
    end
    local start = now
    if kind == GCRA and ks[kb - 6] == t then
      local tat = ks[kb - 9]
      if tat > now then
        start = tat
      end
    else
      -- S1 (a GCRA state of another interval: the units it holds), S2
      -- (a log's units inside the window), consumed now at this
      -- interval.
      local x = count * t
      if x > MAXP then
        x = MAXP
      end
      start = now + x
    end
    room, c = t * l - (start - now), c * t
    lw[i] = start
    cnt[i] = t
  else
    -- A string there is not a concurrency key; only a reservation takes
    -- a slot.
    if kind ~= CONC then
      return bad(i, 'wrongtype')
    end
    if consume and op ~= 1 then
      return redis.error_reply('ERR sluice rate_limit_v5: a concurrency window is held by a reservation (op 1), not consumed by Evaluate')
    end
    cnt[i] = count
  end
  if room < c * A then
    A = room > 0 and (room - room % c) / c or 0
  end
end

-- Writes a GCRA state (S6): its TAT with the interval t it was written
-- with, for as long as it holds units (at least the TTL floor).
-- Admission, charge and refund all write it so. Made only when a GCRA
-- state or window was met: a closure costs every call that makes it.
local settat
if gcra then
  settat = function(key, tat, t)
    redis.call('SET', key, pack('>Bi8i8', 2, tat, t), 'PX', ttl(tat - now))
  end
end

-- Settle: each concurrency key gives the lease's slots back, each rate
-- key (once, whatever the windows sharing it) refunds or charges here,
-- but a log's charge goes through the writes of an admission below, its
-- cost (slot 11) replaced by the charge; every other key's algorithm
-- (slot 10) is replaced by 3, which those writes skip. The record is
-- marked settled last.
local nonce = ARGV[2]
if op == 2 then
  -- A charge's members must not be the reservation's own (ID:k).
  nonce = nonce .. '+'
  for k = 1, u do
    local kb = 11 * k
    local i = ks[kb - 4]
    local g, c = ks[kb - 1], ks[kb]
    local kind, key, d = ks[kb - 10], KEYS[k], X - c
    ks[kb - 1] = 3
    if g == 2 then
      if ks[kb - 8] then
        members('ZREM', key, false, false, 1, c)
        redis.call('ZREMRANGEBYSCORE', key, '-inf', now - grace)
      end
    elseif d > 0 and g == 1 then
      -- GCRA: the TAT moves on d intervals from max(TAT, now), converted
      -- (S1, S2), at most MaxPeriod ahead of now, in the window's
      -- encoding (S6).
      local t = cnt[i]
      local new = lw[i] + d * t
      if new > now + MAXP then
        new = now + MAXP
      end
      settat(key, new, t)
    elseif d > 0 then
      -- A log charges through an admission's writes below; it records
      -- at most its largest window's limit of a charge: beyond that
      -- every window of it is full until now + its period anyway.
      local l = ks[kb - 2]
      if d > l then
        d = l
      end
      ks[kb - 1], ks[kb] = 0, d
    elseif d < 0 and kind ~= NONE then
      -- A refund of -d units, in the algorithm the key is stored in (a
      -- key rewritten under another window since the reservation gives
      -- back what its state still holds), as domain.KeyState.Refund.
      local v, p = ks[kb - 9], ks[kb - 3]
      if kind == GCRA then
        -- The TAT moves back -d of the intervals it was written with,
        -- never before now.
        local tw = ks[kb - 6]
        if v > now then
          local new = v + d * tw
          if new < now then
            new = now
          end
          settat(key, new, tw)
        end
      elseif leaseAt > now - p then
        -- A log: up to -d of the units stamped at the lease's instant,
        -- unless they left its longest window (a compact log's units at
        -- one instant are alike; a ZSET log's are the lease's members).
        if kind == COMPACT then
          local m = ks[kb - 5]
          local hi = above(v, 0, m, leaseAt)
          local x = hi - above(v, 0, hi, leaseAt - 1)
          if x > -d then
            x = -d
          end
          if x > 0 then
            redis.call('SET', key, sub(v, 1, 1 + 7 * (hi - x)) .. sub(v, 2 + 7 * hi), 'KEEPTTL')
          end
        else
          -- The lease's own members; then, for a log rewritten as a
          -- ZSET since (its members renamed), units at its instant.
          local left = -d - members('ZREM', key, false, false, c + d + 1, c)
          while left > 0 do
            local z = redis.call('ZRANGEBYSCORE', key, leaseAt, leaseAt, 'LIMIT', 0, math.min(left, 500))
            if #z == 0 then
              break
            end
            redis.call('ZREM', key, unpack(z))
            left = left - #z
          end
        end
      end
    end
  end
  consume, A = true, reps
end
local U = 0 -- the requests consumed
if consume then
  U = A
end
-- Nine windows, admitted or refused: the reply's 19 or 28 slots sized at
-- once (each is written below), cheaper than growing it.
local reply
if n ~= 9 or (U > 0 and U < reps) then
  reply = {A}
elseif U > 0 then
  reply = {A, false, false, false, false, false, false, false, false, false, false, false, false, false, false, false, false, false, false}
else
  reply = {
    A, false, false, false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false, false, false, false,
  }
end
-- Each window's figures (ops 0 and 1): its remaining and reset after the
-- A admitted requests (U consumed), in the reply when any was admitted;
-- with its retry when a request is refused or peeked, after them.
local refused = not consume or A < reps
local unit
if refused then
  -- The x-th oldest unit inside limit i's window (1 <= x <= count).
  unit = function(i, x)
    local k = arg[4 * i - 3] / 4 -- a log's window: algorithm 0
    local kind = ks[11 * k - 10]
    if kind == COMPACT then
      return sunpack('>I7', ks[11 * k - 9], 2 + 7 * (lw[i] + x - 1))
    elseif kind == ZSET then
      local z = redis.call('ZRANGEBYSCORE', KEYS[k], '(' .. format('%.0f', lw[i]), '+inf', 'WITHSCORES', 'LIMIT', x - 1, 1)
      local y = tonumber(z[2])
      return y - y % 1 -- validated integral up to the newest
    end
    return now
  end
end
local o1, o2 = 1, 1
if U > 0 then
  o2 = 1 + 2 * n
end
for i = 1, op ~= 2 and n or 0 do
  local j = 4 * i
  local x, l, p, c = arg[j - 3], arg[j - 2], arg[j - 1], arg[j]
  local g, count = x % 4, cnt[i]
  local used = U * c
  local total = count + used
  -- Each branch sets remaining and reset; retry stays nil (0 in the
  -- reply) unless the window alone would refuse.
  local remaining, retry, reset
  if g == 0 then
    -- reset: p after its key's newest unit (kb = 2.75x), or after now when
    -- units are used now and none is ahead of now; 0 for no unit.
    local top = ks[2.75 * x - 8]
    remaining = l - total
    if total == 0 then
      reset = 0
    elseif top and (top > now or used == 0) then
      reset = top + p - now
    else
      reset = p
    end
  elseif g == 1 then
    local t = cnt[i]
    local start, capacity = lw[i] + used * t, t * l
    remaining = capacity - (start - now)
    remaining = remaining > 0 and (remaining - remaining % t) / t or 0
    reset = start - now
    if refused and start + c * t - now > capacity then
      retry = start + c * t - capacity - now
    end
  elseif U > 0 then
    -- A concurrency window of an admitted Reserve: its slots and the
    -- lease's, held until the latest expiry.
    local exp, newest = now + X, ks[2.75 * (x - 2) - 8]
    if not newest or newest < exp then
      newest = exp
    end
    remaining, reset = l - total, newest - now
  else
    -- A concurrency window (Peek, or a refused Reserve): newest is the
    -- latest expiry; a refusal waits for the earliest.
    remaining, reset = l - count, 0
    if count > 0 then
      reset = ks[2.75 * (x - 2) - 8] - now
    end
    if count + c > l then
      local z = redis.call('ZRANGEBYSCORE', KEYS[(x - 2) / 4], '(' .. format('%.0f', now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
      retry = tonumber(z[2]) - now
    end
  end
  -- Instants out of order can find more units than the limit.
  if remaining < 0 then
    remaining = 0
  end
  if U > 0 then
    o1 = o1 + 2
    reply[o1 - 1] = remaining
    reply[o1] = reset
  end
  if refused then
    -- A log's retry: the units are read only for a refusal.
    if g == 0 and total + c > l then
      -- The need-th oldest unit of the window's units and the used ones
      -- at now, which sort after every unit up to now.
      local need = total + c - l
      local first
      if need <= count then
        first = unit(i, need)
      end
      if used > 0 and not (first and first <= now) then
        local y = need - used
        first = now
        if y >= 1 then
          local x = unit(i, y)
          if x > now then
            first = x
          end
        end
      end
      retry = first + p - now
    end
    o2 = o2 + 3
    reply[o2 - 2] = remaining
    reply[o2 - 1] = retry or 0
    reply[o2] = reset
  end
end
-- The writes, once per key, after every read.
-- px: the TTL of the last log written, for pxus microseconds.
local rec, nows, one, pxus, px
for k = 1, U > 0 and u or 0 do
  local kb = 11 * k
  local g = ks[kb - 1]
  local key, used = KEYS[k], U * ks[kb]
  if g == 0 then
    -- A log, kept for its longest window (P, slot 8) and stored as its
    -- largest limit (slot 9) says.
    local kind, v, lo, newest = ks[kb - 10], ks[kb - 9], ks[kb - 7], ks[kb - 8]
    local l, p = ks[kb - 2], ks[kb - 3]
    local top = now
    if newest and newest > now then
      top = newest
    end
    local gr = grace
    if gr > p then
      gr = p
    end
    -- The keys of one longest period share their TTL (with no unit
    -- ahead of now): converted by the first of them.
    local us = top + p - now + gr
    if us ~= pxus then
      pxus, px = us, ttl(us)
    end
    -- The write (S5, S6): compact while the log, after it, holds at most
    -- the compact bound of units or its largest limit is at or below it
    -- (a ZSET, or one holding an instant before 1970, stays a ZSET): the
    -- used units at now after the kept ones (a compact log's from lo, m
    -- at now for a GCRA state, S3; a ZSET's after its forget bound), or
    -- before the first unit ahead of now. Else a ZSET, trimmed at its
    -- forget bound by the first write in each eighth of the longest
    -- period, so that a busy key is trimmed a few times a period, not
    -- once a call; a log of another kind becomes one, its kept units
    -- named nonce:k1 on, the new ones nonce:1 on (one nonce per call).
    local m = ks[kb - 5]
    local w
    if now >= 0 and (l <= compact or kind ~= ZSET
        and (kind == COMPACT and m - lo or kind == GCRA and m or 0) + used <= compact) then
      if not rec then
        rec = pack('>I7', now)
      end
      local x = rec
      if used > 1 then
        x = rep(rec, used)
      end
      if kind == COMPACT then
        if top == now then
          if lo == 0 then
            w = v .. x
          else
            w = '\1' .. sub(v, 2 + 7 * lo) .. x
          end
        else
          local y = above(v, lo, m, now)
          w = '\1' .. sub(v, 2 + 7 * lo, 1 + 7 * y) .. x .. sub(v, 2 + 7 * y)
        end
      elseif kind == NONE then
        w = '\1' .. x
      elseif kind == GCRA then
        w = '\1' .. rep(rec, m + used)
      else
        local parts, placed = {'\1'}, false
        local z = redis.call('ZRANGEBYSCORE', key, '(' .. format('%.0f', ks[kb - 6]), '+inf', 'WITHSCORES')
        for y = 2, #z, 2 do
          local t = tonumber(z[y])
          if t < 0 then
            parts = nil
            break
          end
          t = t - t % 1
          if not placed and t > now then
            parts[#parts + 1], placed = x, true
          end
          parts[#parts + 1] = pack('>I7', t)
        end
        if parts then
          if not placed then
            parts[#parts + 1] = x
          end
          w = table.concat(parts)
        end
      end
    end
    if w then
      redis.call('SET', key, w, 'PX', px)
    else
      if kind == ZSET then
        local q = (p - p % 8) / 8
        if q < 1 then
          q = 1
        end
        if newest - newest % q ~= now - now % q then
          redis.call('ZREMRANGEBYSCORE', key, '-inf', ks[kb - 6])
        end
      elseif kind ~= NONE then
        redis.call('DEL', key)
        if kind == GCRA then
          lo = 0
        end
        for y = lo, m - 1, 500 do
          local args = {}
          for x = y, math.min(y + 499, m - 1) do
            args[#args + 1] = kind == COMPACT and sunpack('>I7', v, 2 + 7 * x) or now
            args[#args + 1] = nonce .. ':k' .. (x - lo + 1)
          end
          redis.call('ZADD', key, unpack(args))
        end
      end
      if not nows then
        nows = format('%.0f', now)
      end
      if used == 1 then
        if not one then
          one = nonce .. ':1'
        end
        redis.call('ZADD', key, nows, one)
      else
        for y = 1, used, 500 do
          local args = {}
          for x = y, math.min(y + 499, used) do
            args[#args + 1] = nows
            args[#args + 1] = nonce .. ':' .. x
          end
          redis.call('ZADD', key, unpack(args))
        end
      end
      redis.call('PEXPIRE', key, px)
    end
  elseif g == 1 then
    local i = ks[kb - 4]
    local t = cnt[i]
    settat(key, lw[i] + used * t, t)
  elseif g == 2 then
    -- A concurrency window (Reserve): cost slots under the lease until
    -- its expiry, the expired members trimmed, the key kept until its
    -- latest expiry.
    local exp, top = now + X, ks[kb - 8]
    if top then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', now - grace)
    end
    if not top or top < exp then
      top = exp
    end
    members('ZADD', key, false, exp, 1, ks[kb])
    redis.call('PEXPIRE', key, ttl(top - now + grace))
  end
end
if leased then
  if op == 2 then
    redis.call('SET', lkey, pack('>BBi8i8', 3, SETTLED, leaseAt, leaseExp), 'KEEPTTL')
    return {1}
  end
  if U > 0 then
    redis.call('SET', lkey, pack('>BBi8i8', 3, OPEN, now, now + X), 'PX', recordpx(X))
  end
  reply[#reply + 1] = now
end
return reply
