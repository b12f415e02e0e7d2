-- Floor of sluice's one-key-per-window layout: the commands a decision
-- sends, and no logic (docs/adr/009). Measured beside the store's script
-- by BenchmarkScriptCost and BenchmarkScriptLoop.
--
-- KEYS: the string keys (compact logs, GCRA), then ARGV[1] ZSET keys.
-- ARGV: [1] how many of the last keys are ZSETs, [2] the value each
-- string key is set to, [3] the ZSET window in microseconds, [4] the TTL
-- in milliseconds, [5] a nonce unique to the call.
local nz = tonumber(ARGV[1])
local ns = #KEYS - nz
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
if ns > 0 then
  redis.call('MGET', unpack(KEYS, 1, ns))
end
for i = 1, ns do
  redis.call('SET', KEYS[i], ARGV[2], 'PX', ARGV[4])
end
for i = ns + 1, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - ARGV[3])
  redis.call('ZCARD', KEYS[i])
  redis.call('ZADD', KEYS[i], now, ARGV[5])
  redis.call('PEXPIRE', KEYS[i], ARGV[4])
end
return 1
