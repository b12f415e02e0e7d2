-- The floor: exactly the commands sluice's key layout needs for one
-- decision, with no logic between them, so that Redis' time per call of
-- sluice's script can be read against what the commands alone cost
-- (docs/BENCHMARKS.md, "The floor"). Every key is one window:
--   a string key (GCRA, or a sliding log kept compact): read by one MGET
--     of every string key, written by one SET PX;
--   a ZSET key (a sliding log above the compact bound): ZREMRANGEBYSCORE
--     and ZCARD to read, ZADD and PEXPIRE to write, the plain script's
--     four commands;
-- and the server clock is read once (TIME), as sluice's store does by
-- default.
--
-- KEYS[1..s]        the string keys, then the ZSET keys
-- ARGV[1]           s, the number of string keys
-- ARGV[2]           1: write (an admitted decision); 0: read only (a
--                   refused one)
-- ARGV[3]           a member unique to this call (ZADD)
-- ARGV[4]           the value every string key is set to
-- ARGV[3+2i]        the i-th key's TTL, milliseconds
-- ARGV[4+2i]        the i-th key's period, microseconds (ZSET keys)
--
-- Reply: 1.
local s = tonumber(ARGV[1])
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
if s > 0 then
  redis.call('MGET', unpack(KEYS, 1, s))
end
for i = s + 1, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - ARGV[4 + 2 * i])
  redis.call('ZCARD', KEYS[i])
end
if ARGV[2] == '1' then
  for i = 1, s do
    redis.call('SET', KEYS[i], ARGV[4], 'PX', ARGV[3 + 2 * i])
  end
  for i = s + 1, #KEYS do
    redis.call('ZADD', KEYS[i], now, ARGV[3])
    redis.call('PEXPIRE', KEYS[i], ARGV[3 + 2 * i])
  end
end
return 1
