-- Floor of the shared layout of sliding logs kept as ZSETs
-- (docs/adr/015, docs/adr/016): exactly the commands a decision on it
-- needs, and no logic. Per key, one log serving one or more windows:
-- one trim by its longest period (ZREMRANGEBYSCORE), one ZCOUNT per
-- window, then, the decision admitted, ZADD and PEXPIRE; and the
-- server clock read once (TIME). Measured beside rate_limit_v5 by
-- BenchmarkLargeLogLoop (largelog_test.go).
--
-- KEYS[k]   the k-th key
-- ARGV[1]   a member unique to this call
-- then per key: its TTL in milliseconds, w (its windows), and the w
-- periods in microseconds, the longest first.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local a = 2
for k = 1, #KEYS do
  local key, w = KEYS[k], tonumber(ARGV[a + 1])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - ARGV[a + 2])
  for j = 1, w do
    redis.call('ZCOUNT', key, now - ARGV[a + 1 + j], '+inf')
  end
  a = a + 2 + w
end
a = 2
for k = 1, #KEYS do
  redis.call('ZADD', KEYS[k], now, ARGV[1])
  redis.call('PEXPIRE', KEYS[k], ARGV[a])
  a = a + 2 + tonumber(ARGV[a + 1])
end
return 1
