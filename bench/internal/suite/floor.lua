-- The floor: exactly the commands sluice's key layout needs for one
-- decision, with no logic between them, so that Redis' time per call of
-- sluice's script can be read against what the commands alone cost
-- (docs/BENCHMARKS.md, "The floor"). A key is one log or GCRA state, read
-- and written once however many windows share it (docs/adr/015):
--   a string key (GCRA, or a sliding log kept compact: every window
--     naming it at most the compact bound): read by one MGET of every
--     string key, written by one SET PX;
--   a ZSET key (a sliding log above the compact bound): one
--     ZREMRANGEBYSCORE by the longest period of the windows naming it,
--     ZCARD for that longest window and one ZCOUNT for each other window
--     on it, then one ZADD and one PEXPIRE;
-- and the server clock is read once (TIME), as sluice's store does by
-- default. A request with one key per window (the per-window layout) is
-- the same script with one window per key.
--
-- KEYS[1..s]        the string keys, then the ZSET keys, each once
-- ARGV[1]           s, the number of string keys
-- ARGV[2]           1: write (an admitted decision); 0: read only (a
--                   refused one)
-- ARGV[3]           a member unique to this call (ZADD)
-- ARGV[4]           the value every string key is set to
-- ARGV[4+i]         the i-th key's TTL (its longest period), milliseconds
-- then, for each ZSET key in KEYS' order: n, the number of windows naming
-- it, and their periods in microseconds, the longest first.
--
-- Reply: 1.
local s = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
if s > 0 then
  redis.call('MGET', unpack(KEYS, 1, s))
end
local a = 5 + #KEYS
for i = s + 1, #KEYS do
  local n = tonumber(ARGV[a])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - ARGV[a + 1])
  redis.call('ZCARD', KEYS[i])
  for j = 2, n do
    redis.call('ZCOUNT', KEYS[i], now - ARGV[a + j] + 1, '+inf')
  end
  a = a + 1 + n
end
if ARGV[2] == '1' then
  for i = 1, s do
    redis.call('SET', KEYS[i], ARGV[4], 'PX', ARGV[4 + i])
  end
  for i = s + 1, #KEYS do
    redis.call('ZADD', KEYS[i], now, ARGV[3])
    redis.call('PEXPIRE', KEYS[i], ARGV[4 + i])
  end
end
return 1
