-- sluice rate_limit_v4: all-or-nothing check of up to 16 rate-limit keys,
-- for n identical requests at one instant; and reservations: a check that
-- also takes concurrency slots under a lease, its settlement and its
-- renewal.
--
-- IMMUTABLE once released: a test pins this file's SHA1. Any change, even
-- to a comment, is a new file (rate_limit_v5.lua) and a new constant.
--
-- A superset of rate_limit_v3: with the op bits of the flags at 0 it
-- takes v3's arguments, reads and writes every rate key exactly as v3
-- does and replies as v3 does, so that v3 and v4 instances share keys
-- during a rolling upgrade. Integer microseconds everywhere, which a Lua
-- double holds exactly below 2^53. The rules (S1-S7) and the rate
-- encodings are those of docs/adr/009-stored-state-and-script-v3.md;
-- reservations, concurrency keys and lease records are
-- docs/adr/012-reservations-and-leases.md and
-- docs/adr/014-redis-script-v4.md.
--
-- KEYS[i]   key of the i-th limit (i <= n); all keys share one hash slot
-- KEYS[n+1] the lease record (ops 1-3 only), in the slot of KEYS[1]
-- ARGV[1]   binary, big-endian (struct): a 29-byte header, then 17 bytes
--           per limit (n = the limits).
--             header: i8 now (unix microseconds; ignored with flag 2)
--                     B  flags: 1 consume (Evaluate, Reserve; else Peek),
--                              2 take now from the server clock (TIME),
--                              4 write GCRA as a bare decimal TAT, the
--                                only GCRA encoding v2 reads,
--                              8 * op: 0 Evaluate or Peek, 1 Reserve,
--                                2 Settle, 3 Renew
--                     I4 floor of every TTL, in milliseconds (>= 1)
--                     I4 largest sliding-log limit stored compactly;
--                        0: store every sliding log as a ZSET
--                     i8 grace in microseconds (>= 0): a sliding log
--                        forgets a unit only once it is at or before
--                        latest - period - min(grace, period), latest
--                        its newest unit or now
--                     I4 n, the number of identical requests (>= 1; 1
--                        for ops 1-3)
--             per limit: B algorithm (0 sliding log, 1 GCRA, 2
--                        concurrency), I4 limit, i8 period in
--                        microseconds, I4 cost
-- ARGV[2]   op 0: a nonce unique to this call: ZSET members are
--           nonce..":"..k. Ops 1-3: the lease ID (32 hex characters).
-- ARGV[3]   ops 1-3 only, i8: Reserve and Renew the lease TTL in
--           microseconds, Settle the actual cost.
--
-- Op 0 (Evaluate, Peek): the n requests are decided in order, each all
-- or nothing, as n calls of one request would be: the first A (the
-- admitted count) pass, and every later one is refused and consumes
-- nothing. A = min(n, min over the keys of the requests each key alone
-- fits). Reply: {A, then when A > 0, per key: remaining, reset_after_us
-- after the A-th request; then when A < n, per key: remaining,
-- retry_after_us, reset_after_us of a refused request}. retry_after_us
-- is 0 exactly when that key alone would admit. Peek (flag 1 off)
-- writes nothing and replies {A, then per key: remaining,
-- retry_after_us, reset_after_us of the state as it stands}. Peek reads
-- concurrency keys too; Evaluate refuses them.
--
-- Op 1 (Reserve): op 0's decision of one request, concurrency windows
-- included; when admitted, the rate keys are written as op 0 writes
-- them (a ZSET log's members named ID..":"..k), each concurrency key
-- gets members ID..":"..k (k = 1..cost) scored by the lease's expiry
-- now + TTL, and the lease record is written. Reply: op 0's, then now.
--
-- Op 2 (Settle): reply {1} settled, {2} already settled, {3} expired
-- (or no record: it outlived its TTL and margin). Settling reads and
-- validates every key, then per rate key d = actual - cost: d > 0
-- charges d units at now (a log records at most its limit of them; GCRA
-- moves its TAT, capped at now + MaxPeriod), d < 0 refunds -d units in
-- the algorithm the key is stored in: a log loses up to -d of the units
-- stamped at the lease's instant (a compact log's units at that instant,
-- a ZSET log's members ID..":"..k, then, should they have been renamed
-- by a rewrite, other members at that instant) unless they left the
-- window, a GCRA
-- TAT moves back -d of the intervals it was written with, never before
-- now. Every concurrency key loses the lease's members; the record is
-- marked settled.
--
-- Op 3 (Renew): reply {1, now} renewed, {0} the lease is settled,
-- expired or unknown. The record and the lease's concurrency members
-- take the expiry now + TTL.
--
-- A value the script cannot interpret makes it return the error
-- "SLUICEVALUE <i> <reason>" (i the 1-based key, n + 1 the lease record;
-- reason wrongtype, malformed, range or future) before anything is
-- written.
--
-- Encodings (what a key holds):
--   GCRA v3: "\2", i8 TAT, i8 emission interval it was written with.
--   GCRA v2: a bare decimal TAT; read with the window's own interval.
--   compact sliding log: "\1", then the instant of each unit (unsigned,
--     7 bytes) ascending, for limits up to the compact bound and instants
--     from 1970 on.
--   ZSET sliding log: one member per unit scored by its instant.
--   concurrency: a ZSET, one member per slot held, ID..":"..k, scored by
--     its lease's expiry; members at or before now are expired and not
--     counted; a write of the key trims those at or before now - grace
--     (a caller whose now lags by less than the grace still counts
--     them), and the key lives until its latest expiry plus the grace.
--   lease record: "\3", B state (1 open, 2 settled), i8 the instant of
--     the reservation, i8 its expiry; PX the TTL plus a margin.
-- A key found nil by MGET under a window that wants a string is probed
-- with one EXISTS over all such keys; only when that finds something is
-- each probed with TYPE (a ZSET log, or a foreign value). A window that
-- v4 always writes as a ZSET (a sliding log above the compact bound, a
-- concurrency window) is left out of the MGET: its first ZSET read, a
-- pcall, answers WRONGTYPE for a string, which one GET then reads. A
-- ZSET log's units at or before the forget bound are trimmed by the
-- first admitted write in each eighth of its period, never by a refusal
-- or a Peek (docs/adr/014-redis-script-v4.md, "Performance").
--
-- Requires Redis 6.0.

local a = ARGV[1]
local n = #KEYS
-- Ops 1-3 carry ARGV[3] and the lease record as the last key. What op 0
-- (every decision) pays for them is a few tests per call, not per key.
local na = #ARGV
local leased = na == 3
if leased then
  n = n - 1
end
if n < 1 or na < 2 or na > 3 or #a ~= 29 + 17 * n then
  return redis.error_reply('ERR sluice rate_limit_v4: want 1 or more keys (and the lease record), ARGV[1] of 29 + 17 bytes per key, ARGV[2] a nonce or lease ID (and ARGV[3])')
end
local sunpack, pack, sub, byte, rep, floor = struct.unpack, struct.pack, string.sub, string.byte, string.rep, math.floor
local now, flags, minttl, compact, grace, reps = sunpack('>i8BI4I4i8I4', a)
local op = 0
if leased then
  op = (flags - flags % 8) / 8
  flags = flags % 8
  if op < 1 or op > 3 or reps ~= 1 then
    return redis.error_reply('ERR sluice rate_limit_v4: ARGV[3] is for ops 1-3, each of one request')
  end
elseif flags >= 8 then
  return redis.error_reply('ERR sluice rate_limit_v4: ops 1-3 take ARGV[3] and the lease record')
end
if reps < 1 or grace < 0 then
  return redis.error_reply('ERR sluice rate_limit_v4: n must be at least 1 and the grace not negative')
end
if flags % 4 >= 2 then
  local t = redis.call('TIME')
  now = t[1] * 1000000 + t[2]
end
local consume, bare = flags % 2 == 1, flags >= 4
-- Every key's algorithm, limit, period and cost, in one unpack: arg[4i-3]
-- to arg[4i].
local arg = {sunpack('>' .. rep('BI4i8I4', n), a, 30)}

-- domain.MaxPeriod in microseconds; no stored instant may lie further
-- ahead of now than AHEAD (a longer wait than any window can ask for).
local MAXP = 31622400000000
local AHEAD = 2 * MAXP
local horizon = now + AHEAD

local NONE, GCRA, COMPACT, ZSET, CONC = 0, 1, 2, 3, 4

-- First index in [lo, hi) of compact string v whose instant exceeds x (hi
-- if none), given a, the instant at lo, and b, the instant at hi - 1 (or
-- nil: read here). The probes alternate between interpolation (arrivals
-- are about even in time: the boundary is found in a probe or two) and
-- bisection (a burst at one instant cannot make it linear). Elsewhere,
-- integer division is written (x - x % y) / y: exact for the integers
-- below 2^52 it meets, and no function call; an interpolated index is a
-- quotient of doubles and takes floor, which x - x % 1 may miss by an
-- ulp.
local function above(v, lo, hi, x, a, b)
  local bisect = false
  while lo < hi do
    a = a or sunpack('>I7', v, 2 + 7 * lo)
    if a > x then
      return lo
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
        return g
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

-- A TTL in milliseconds as the string redis.call sends: a number argument
-- costs Redis a conversion per call, and the keys of one window share
-- their TTL, converted once.
local ttls = {}
local function ttl(px)
  local s = ttls[px]
  if not s then
    s = format('%.0f', px)
    ttls[px] = s
  end
  return s
end

-- Writes a GCRA state (S6): its TAT, bare for v2 readers or with the
-- interval t it was written with, for as long as it holds units (at
-- least the TTL floor). Admission, charge and refund all write it so.
local function settat(key, tat, t)
  local px = tat - now + 999
  px = (px - px % 1000) / 1000
  if px < minttl then
    px = minttl
  end
  if bare then
    redis.call('SET', key, tat, 'PX', ttl(px))
  else
    redis.call('SET', key, pack('>Bi8i8', 2, tat, t), 'PX', ttl(px))
  end
end

-- Ops 1-3: the lease record's key, the lease ID, ARGV[3], and for Settle
-- and Renew what the record says: the lease's instant and expiry. The
-- functions are made only here: a closure costs every call that makes
-- it, and op 0 needs none.
local lkey, lid, X, leaseAt, leaseExp, recordpx, members
local OPEN, SETTLED = 1, 2
if leased then
  if #ARGV[3] ~= 8 then
    return redis.error_reply('ERR sluice rate_limit_v4: ARGV[3] must be 8 bytes')
  end
  lkey, lid, X = KEYS[n + 1], ARGV[2], sunpack('>i8', ARGV[3])
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
    return ttl(ms + m)
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
        if arg[4 * i - 3] == 2 then
          local z = redis.pcall('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
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
          local key = KEYS[i]
          redis.call('ZREMRANGEBYSCORE', key, '-inf', now - grace)
          members('ZADD', key, 'XX', exp, 1, arg[4 * i])
          if exp > top then
            top = exp
          end
          local px = top - now + grace + 999
          px = (px - px % 1000) / 1000
          if px < minttl then
            px = minttl
          end
          redis.call('PEXPIRE', key, ttl(px))
        end
      end
      redis.call('SET', lkey, pack('>BBi8i8', 3, OPEN, leaseAt, exp), 'PX', recordpx(X))
      return {1, now}
    end
  end
end

-- Per key, 12 slots of st from 12(i-1), the ones its window needs: 1
-- kind; for a GCRA window 8 the start (max(TAT, now), converted) and 11
-- the emission interval; for a sliding log 2 the value (compact string
-- or TAT), 4 the first kept index and 5 the first index inside the
-- window (compact), 6 the units inside the window, 7 the newest unit (or
-- false), 9 the lower bound of the window and 10 the forget bound (3
-- and 12 unused). Every slot exists from the start, so that the table
-- is an array: slots written sparsely land in its hash part, and its
-- rehashes cost more than the rest of a key's reading. A constructor
-- sizes it at once for the common requests (the dual layer's 2 keys, the
-- nine windows), cheaper than filling it slot by slot.
local st
if n <= 2 then
  st = {
    false, false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false, false,
  }
elseif n <= 9 then
  st = {
    false, false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false, false, false, false, false,
  }
else
  st = {}
  for k = 1, 12 * n do
    st[k] = false
  end
end

-- Read phase: one MGET reads every string; nothing is written before
-- every key is read and validated. First each key's kind (slot 1 of its
-- state): what MGET found, a ZSET window's key (nil, or a ZSET: the ZSET
-- commands tell), or for a key found missing under a window that wants a
-- string, what one EXISTS over all of them (and TYPE, only when that
-- finds one) says.
-- A window that v4 always writes as a ZSET (a sliding log above the
-- compact bound, a concurrency window) says its key's kind: MGET leaves
-- it out, and its first ZSET command, a pcall, tells a string from a
-- ZSET by WRONGTYPE (then one GET reads it). In the large-log shape
-- every key is one: no MGET at all.
local zw = 0
for i = 1, n do
  local g = arg[4 * i - 3]
  if g == 2 or (g == 0 and arg[4 * i - 2] > compact) then
    zw = zw + 1
  end
end
local got
if zw == 0 then
  if leased then
    got = redis.call('MGET', unpack(KEYS, 1, n))
  else
    got = redis.call('MGET', unpack(KEYS))
  end
elseif zw == n then
  got = {}
else
  local ks, m = {}, 0
  for i = 1, n do
    local g = arg[4 * i - 3]
    if not (g == 2 or (g == 0 and arg[4 * i - 2] > compact)) then
      m = m + 1
      ks[m] = KEYS[i]
    end
  end
  local r = redis.call('MGET', unpack(ks))
  got, m = {}, 0
  for i = 1, n do
    local g = arg[4 * i - 3]
    if g == 2 or (g == 0 and arg[4 * i - 2] > compact) then
      got[i] = false
    else
      m = m + 1
      got[i] = r[m]
    end
  end
end
local probe
for i = 1, n do
  local v = got[i]
  local g = arg[4 * i - 3]
  local kind = NONE
  if g == 0 and arg[4 * i - 2] > compact then
    kind = ZSET
  elseif g == 2 then
    kind = CONC
  elseif v then
    if byte(v, 1) == 1 then
      kind = COMPACT
    else
      kind = GCRA
    end
  else
    probe = probe or {}
    probe[#probe + 1] = i
  end
  st[12 * i - 11] = kind
end
if probe then
  local ks = {}
  for j = 1, #probe do
    ks[j] = KEYS[probe[j]]
  end
  if redis.call('EXISTS', unpack(ks)) > 0 then
    for j = 1, #probe do
      local i = probe[j]
      local ty = redis.call('TYPE', KEYS[i])['ok']
      if ty == 'zset' then
        st[12 * i - 11] = ZSET
      elseif ty ~= 'none' then
        return bad(i, 'wrongtype')
      end
    end
  end
end

-- Then each key's state under its window, validated, written in place
-- (a function per key would be a closure of about fifteen upvalues, made on
-- every call: it cost more than its work); A, the requests every key
-- admits, is the least of what each alone fits.
local A = reps
for i = 1, n do
  local b = 12 * (i - 1)
  local kind, v = st[b + 1], got[i]
  local j = 4 * i
  local g, l, p, c = arg[j - 3], arg[j - 2], arg[j - 1], arg[j]
  local t = (p - p % l) / l
  if t < 1 then
    t = 1
  end
  local tw = false
  -- A key the window says is a ZSET: its newest unit, or WRONGTYPE, then
  -- a string read here (a GCRA state, or a compact log written under a
  -- limit at or below the bound), decoded below as MGET's would be.
  local z
  if kind == ZSET or kind == CONC then
    z = redis.pcall('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
    if z.err then
      v = redis.pcall('GET', KEYS[i])
      if type(v) ~= 'string' then
        return bad(i, 'wrongtype')
      end
      got[i] = v
      if byte(v, 1) == 1 then
        kind = COMPACT
      else
        kind = GCRA
      end
    end
  end
  -- Validate and decode what the key holds.
  if kind == GCRA then
    local tag, x, y = 0
    if #v == 17 then
      -- One unpack reads the tag too; a 17-character decimal starts with
      -- a digit or '-', never byte 2.
      tag, x, y = sunpack('>Bi8i8', v)
    end
    if tag == 2 then
      if y < 1 or y > MAXP then
        return bad(i, 'range')
      end
      v, tw = x, y
    else
      x = tonumber(v)
      if not x then
        return bad(i, 'malformed')
      end
      -- Finite, whole, and exact in a double (inf, nan, 1e19 are not).
      if x ~= x or x % 1 ~= 0 or x >= 2 ^ 53 or x < -AHEAD then
        return bad(i, 'range')
      end
      v = x
    end
    if v > horizon then
      return bad(i, 'future')
    end
  end
  local count, newest, lo, low, lower, fcut = 0, false, 0, 0, 0, 0
  if kind == COMPACT then
    local m = #v - 1
    if m % 7 ~= 0 then
      return bad(i, 'malformed')
    end
    m = m / 7
    if m > 0 then
      local first
      first, newest = sunpack('>I7', v, 2), sunpack('>I7', v, 7 * m - 5)
      if newest > horizon then
        return bad(i, 'future')
      end
      if first > newest then
        return bad(i, 'malformed')
      end
      local latest, gr = now, grace
      if newest > now then
        latest = newest
      end
      if gr > p then
        gr = p
      end
      fcut, lower = latest - p - gr, now - p
      if fcut > lower then
        lower = fcut
      end
      if first <= fcut then
        lo = above(v, 1, m, fcut, nil, newest)
      end
      if lower == fcut then
        -- No grace (and no unit ahead of now): the window's boundary is
        -- the forget bound, found once.
        low = lo
      else
        low = above(v, lo, m, lower, lo == 0 and first or nil, newest)
      end
      count = m - low
    end
  elseif kind == ZSET then
    local key = KEYS[i]
    if z[2] then
      newest = tonumber(z[2])
      if newest ~= newest or newest < -AHEAD or newest % 1 ~= 0 then
        return bad(i, 'range')
      end
      if newest > horizon then
        return bad(i, 'future')
      end
      local latest = now
      if newest > now then
        latest = newest
      end
      local gr = grace
      if gr > p then
        gr = p
      end
      fcut, lower = latest - p - gr, now - p
      if fcut > lower then
        lower = fcut
      end
      -- Whole microseconds: (lower, +inf) is [lower + 1, +inf), and a
      -- number reaches Redis exactly, without a string.format.
      count = redis.call('ZCOUNT', key, lower + 1, '+inf')
    else
      kind = NONE
    end
  end
  local fit
  if g == 1 then
    local start = now
    if kind == GCRA then
      if v > now then
        local w = tw or t
        if w == t then
          start = v
        else
          -- S1: the units outstanding under the interval they were
          -- written with, a partly drained one whole, at the new one.
          local d = v - now
          local u = (d - d % w) / w
          if d % w > 0 then
            u = u + 1
          end
          local x = u * t
          if x > MAXP then
            x = MAXP
          end
          start = now + x
        end
      end
    elseif kind ~= NONE then
      -- S2: a log's units inside the window, consumed now.
      local x = count * t
      if x > MAXP then
        x = MAXP
      end
      start = now + x
    end
    local room = t * l - (start - now)
    if room > 0 then
      fit = (room - room % (c * t)) / (c * t)
    else
      fit = 0
    end
    st[b + 1], st[b + 8], st[b + 11] = kind, start, t
  elseif g == 0 then
    if kind == GCRA then
      -- S3: the units a GCRA state holds, stamped now.
      if v > now then
        local w = tw or t
        local d = v - now
        count = (d - d % w) / w
        if d % w > 0 then
          count = count + 1
        end
        newest = now
      end
    end
    local room = l - count
    if room > 0 then
      fit = (room - room % c) / c
    else
      fit = 0
    end
    st[b + 1], st[b + 2], st[b + 4], st[b + 5], st[b + 6] = kind, v, lo, low, count
    st[b + 7], st[b + 9], st[b + 10] = newest, lower, fcut
  else
    -- A concurrency window: the slots its unexpired members hold, and
    -- (slot 7) its latest expiry. A string there is not a concurrency
    -- key; only a reservation takes a slot.
    if kind ~= CONC then
      return bad(i, 'wrongtype')
    end
    if consume and op ~= 1 then
      return redis.error_reply('ERR sluice rate_limit_v4: a concurrency window is held by a reservation (op 1), not consumed by Evaluate')
    end
    local key = KEYS[i]
    local held, last = 0, false
    if z[2] then
      last = tonumber(z[2])
      if last ~= last or last % 1 ~= 0 then
        return bad(i, 'range')
      end
      if last > horizon then
        return bad(i, 'future')
      end
      if last > now then
        held = redis.call('ZCOUNT', key, now + 1, '+inf')
      end
    end
    local room = l - held
    if room > 0 then
      fit = (room - room % c) / c
    else
      fit = 0
    end
    st[b + 1], st[b + 6], st[b + 7] = kind, held, last
  end
  if fit < A then
    A = fit
  end
end

-- The reply: A, then the statuses after the A-th request (Evaluate, A >
-- 0), then those of a refused request (A < n), or for Peek those of the
-- state as it stands. Reads come before every write.
-- Settle: each concurrency key gives the lease's slots back, each rate
-- key refunds or charges here, but a log's charge goes through the writes
-- of an admission below, its cost (arg[4i]) replaced by the charge; every
-- other key's algorithm is replaced by 3, which those writes skip, so that
-- they cost Evaluate nothing more. The record is marked settled last.
local nonce = ARGV[2]
if op == 2 then
  -- A charge's members must not be the reservation's own (ID:k).
  nonce = nonce .. '+'
  for i = 1, n do
    local b = 12 * (i - 1)
    local j = 4 * i
    local g, l, c = arg[j - 3], arg[j - 2], arg[j]
    local kind, key, d = st[b + 1], KEYS[i], X - c
    arg[j - 3] = 3
    if g == 2 then
      if st[b + 7] then
        members('ZREM', key, false, false, 1, c)
        redis.call('ZREMRANGEBYSCORE', key, '-inf', now - grace)
      end
    elseif d > 0 and g == 1 then
      -- GCRA: the TAT moves on d intervals from max(TAT, now), converted
      -- (S1, S2), at most MaxPeriod ahead of now, in the window's
      -- encoding (S6).
      local t = st[b + 11]
      local new = st[b + 8] + d * t
      if new > now + MAXP then
        new = now + MAXP
      end
      settat(key, new, t)
    elseif d > 0 then
      -- A log charges through an admission's writes below; it records
      -- at most its limit of a charge: beyond that the window is full
      -- until now + period anyway.
      if d > l then
        d = l
      end
      arg[j - 3], arg[j] = 0, d
    elseif d < 0 and kind ~= NONE then
      -- A refund of -d units, in the algorithm the key is stored in (a
      -- key rewritten under another window since the reservation gives
      -- back what its state still holds), as domain.KeyState.Refund.
      local v, p = got[i], arg[j - 1]
      if kind == GCRA then
        -- The TAT moves back -d of the intervals it was written with,
        -- never before now (a bare TAT: the window's interval).
        local tat, tw
        if #v == 17 and byte(v, 1) == 2 then
          local _
          _, tat, tw = sunpack('>Bi8i8', v)
        else
          tat, tw = tonumber(v), (p - p % l) / l
          if tw < 1 then
            tw = 1
          end
        end
        if tat > now then
          local new = tat + d * tw
          if new < now then
            new = now
          end
          settat(key, new, tw)
        end
      elseif leaseAt > now - p then
        -- A log: up to -d of the units stamped at the lease's instant,
        -- unless they left the window (a compact log's units at one
        -- instant are alike; a ZSET log's are the lease's members).
        if kind == COMPACT then
          local m = (#v - 1) / 7
          local hi = above(v, 0, m, leaseAt)
          local k = hi - above(v, 0, hi, leaseAt - 1)
          if k > -d then
            k = -d
          end
          if k > 0 then
            redis.call('SET', key, sub(v, 1, 1 + 7 * (hi - k)) .. sub(v, 2 + 7 * hi), 'KEEPTTL')
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
local reply = {A}
local o = 1
if U > 0 then
  o = 1 + 2 * n
end
if not consume or A < reps then
  -- The k-th oldest unit inside key i's window (1 <= k <= count).
  local function unit(i, k)
    local b = 12 * (i - 1)
    local kind = st[b + 1]
    if kind == COMPACT then
      return sunpack('>I7', st[b + 2], 2 + 7 * (st[b + 5] + k - 1))
    elseif kind == ZSET then
      local z = redis.call('ZRANGEBYSCORE', KEYS[i], '(' .. format('%.0f', st[b + 9]), '+inf', 'WITHSCORES', 'LIMIT', k - 1, 1)
      local x = tonumber(z[2])
      return x - x % 1 -- validated integral up to the newest
    end
    return now
  end

  for i = 1, n do
    local b = 12 * (i - 1)
    local count, newest, t = st[b + 6], st[b + 7], st[b + 11]
    local j = 4 * i
    local g, l, p, c = arg[j - 3], arg[j - 2], arg[j - 1], arg[j]
    local used = U * c
    local remaining, retry, reset = 0, 0, 0
    if g == 1 then
      local start = st[b + 8] + used * t
      local capacity = t * l
      if start + c * t - now > capacity then
        retry = start + c * t - capacity - now
      end
      remaining = capacity - (start - now)
      if remaining > 0 then
        remaining = (remaining - remaining % t) / t
      else
        remaining = 0
      end
      reset = start - now
    elseif g == 0 then
      local total = count + used
      if total + c > l then
        -- The need-th oldest unit of the window's units and the used
        -- ones at now, which sort after every unit up to now.
        local need = total + c - l
        local first
        if need <= count then
          first = unit(i, need)
        end
        if used > 0 and not (first and first <= now) then
          local j = need - used
          first = now
          if j >= 1 then
            local x = unit(i, j)
            if x > now then
              first = x
            end
          end
        end
        retry = first + p - now
      end
      remaining = l - total
      if remaining < 0 then
        remaining = 0
      end
      if total > 0 then
        local top = newest or now
        if used > 0 and top < now then
          top = now
        end
        reset = top + p - now
      end
    else
      -- A concurrency window (Peek, or a refused Reserve): count slots
      -- held, newest their latest expiry; a refusal waits for the
      -- earliest expiry. Instants out of order can find more held than
      -- the limit (a lease expired at a later instant, a slot taken
      -- since): never below zero.
      remaining = l - count
      if remaining < 0 then
        remaining = 0
      end
      if count + c > l then
        local z = redis.call('ZRANGEBYSCORE', KEYS[i], '(' .. format('%.0f', now), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
        retry = tonumber(z[2]) - now
      end
      if count > 0 then
        reset = newest - now
      end
    end
    reply[o + 1], reply[o + 2], reply[o + 3] = remaining, retry, reset
    o = o + 3
  end
end
o = 1
local rec -- the compact record of one unit at now
local one -- a ZSET log's member of one unit: the keys of a call share it
for i = 1, U > 0 and n or 0 do
  local b = 12 * (i - 1)
  local kind, v, count, newest, t = st[b + 1], st[b + 2], st[b + 6], st[b + 7], st[b + 11]
  local j = 4 * i
  local g, l, p, c = arg[j - 3], arg[j - 2], arg[j - 1], arg[j]
  local used = U * c
  do
    local remaining, reset
    if g == 1 then
      local new = st[b + 8] + used * t
      remaining = t * l - (new - now)
      remaining = (remaining - remaining % t) / t
      reset = new - now
      if consume then
        settat(KEYS[i], new, t)
      end
    elseif g == 0 then
      local top = now
      if newest and newest > now then
        top = newest
      end
      remaining = l - count - used
      reset = top + p - now
      if consume then
        local gr = grace
        if gr > p then
          gr = p
        end
        local px = reset + gr + 999
        px = (px - px % 1000) / 1000
        if px < minttl then
          px = minttl
        end
        local key, lo = KEYS[i], st[b + 4]
        local w
        if l <= compact and now >= 0 then
          if not rec then
            rec = pack('>I7', now)
          end
          if kind == NONE then
            w = '\1' .. rep(rec, used)
          elseif kind == GCRA then
            w = '\1' .. rep(rec, count + used)
          elseif kind == COMPACT and top == now then
            -- The common case: c units at now after the kept ones.
            local u = rec
            if used > 1 then
              u = rep(rec, used)
            end
            if lo == 0 then
              w = v .. u
            else
              w = '\1' .. sub(v, 2 + 7 * lo) .. u
            end
          else
            -- A ZSET, or units ahead of now: merge in order.
            local parts, placed = {'\1'}, false
            local function put(x)
              if not placed and x > now then
                parts[#parts + 1], placed = rep(rec, used), true
              end
              parts[#parts + 1] = pack('>I7', x)
            end
            if kind == COMPACT then
              for j = lo, (#v - 1) / 7 - 1 do
                put(sunpack('>I7', v, 2 + 7 * j))
              end
            else
              local z = redis.call('ZRANGEBYSCORE', key, '(' .. format('%.0f', st[b + 10]), '+inf', 'WITHSCORES')
              for j = 2, #z, 2 do
                local x = tonumber(z[j])
                if x < 0 then
                  parts = nil
                  break
                end
                put(x - x % 1)
              end
            end
            if parts then
              if not placed then
                parts[#parts + 1] = rep(rec, used)
              end
              w = table.concat(parts)
            end
          end
        end
        if w then
          redis.call('SET', key, w, 'PX', ttl(px))
        else
          -- A ZSET: add the units. What lies at or before the forget
          -- bound (slot 10) is forgotten for good (S5): no count, no
          -- retry and no rewrite reads it again, so trimming it is
          -- housekeeping, done by the first write in each eighth of the
          -- period (the newest unit, the last write's, lies in an
          -- earlier eighth than now): a busy key is trimmed a few times
          -- a period rather than once a call, and holds at most an
          -- eighth of a period's units more (docs/adr/014,
          -- "Performance").
          if kind == ZSET then
            local q = (p - p % 8) / 8
            if q < 1 then
              q = 1
            end
            if newest - newest % q ~= now - now % q then
              redis.call('ZREMRANGEBYSCORE', key, '-inf', st[b + 10])
            end
          else
            local keep = {}
            if kind == COMPACT then
              for j = lo, (#v - 1) / 7 - 1 do
                keep[#keep + 1] = sunpack('>I7', v, 2 + 7 * j)
              end
            elseif kind == GCRA then
              for j = 1, count do
                keep[j] = now
              end
            end
            if kind ~= NONE then
              redis.call('DEL', key)
            end
            for j = 1, #keep, 500 do
              local args = {}
              for k = j, math.min(j + 499, #keep) do
                args[#args + 1] = keep[k]
                args[#args + 1] = nonce .. ':k' .. k
              end
              redis.call('ZADD', key, unpack(args))
            end
          end
          if used == 1 then
            if not one then
              one = nonce .. ':1'
            end
            redis.call('ZADD', key, now, one)
          end
          for u = 1, used > 1 and used or 0, 500 do
            local args = {}
            for m = u, math.min(u + 499, used) do
              args[#args + 1] = now
              args[#args + 1] = nonce .. ':' .. m
            end
            redis.call('ZADD', key, unpack(args))
          end
          redis.call('PEXPIRE', key, ttl(px))
        end
      end
    elseif g == 2 then
      -- A concurrency window (Reserve): cost slots under the lease
      -- until its expiry, the expired members trimmed, the key kept
      -- until its latest expiry.
      local key, exp, top = KEYS[i], now + X, newest
      if top then
        redis.call('ZREMRANGEBYSCORE', key, '-inf', now - grace)
      end
      if not top or top < exp then
        top = exp
      end
      members('ZADD', key, false, exp, 1, c)
      local px = top - now + grace + 999
      px = (px - px % 1000) / 1000
      if px < minttl then
        px = minttl
      end
      redis.call('PEXPIRE', key, ttl(px))
      remaining, reset = l - count - used, top - now
    else
      remaining, reset = 0, 0 -- Settle: written in its own pass
    end
    if remaining < 0 then
      remaining = 0
    end
    reply[o + 1], reply[o + 2] = remaining, reset
    o = o + 2
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
