-- The plain sliding log, as a service writes it for itself (ADR-002's
-- dual-layer script, generalised to n keys): one ZSET of timestamps per
-- key, now from the caller in milliseconds, the first full key refuses, no
-- retry-after or reset-after computed. The baseline sluice's Redis store
-- is compared with.
--
-- KEYS[i]          the i-th key
-- ARGV[1]          now, unix milliseconds
-- ARGV[2]          a member unique to this call
-- ARGV[1+2i]       limit of the i-th key
-- ARGV[2+2i]       period of the i-th key, milliseconds
--
-- Reply: {allowed, remaining of key 1, ..., remaining of key n}.
local now = tonumber(ARGV[1])
local member = ARGV[2]
local reply = {1}
for i = 1, #KEYS do
  local limit = tonumber(ARGV[1 + 2 * i])
  local period = tonumber(ARGV[2 + 2 * i])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - period)
  local count = redis.call('ZCARD', KEYS[i])
  if count >= limit then
    reply[1] = 0
    reply[i + 1] = 0
    return reply
  end
  reply[i + 1] = limit - count - 1
end
for i = 1, #KEYS do
  redis.call('ZADD', KEYS[i], now, member)
  redis.call('PEXPIRE', KEYS[i], ARGV[2 + 2 * i])
end
return reply
