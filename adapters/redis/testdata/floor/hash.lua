-- Floor of a one-hash-per-hash-tag layout (docs/adr/009, the layout
-- study): every window of a decision is a field of one hash, read with
-- one HMGET and written with one HSET, the hash's TTL set with PEXPIRE
-- (Redis 7.0 has no per-field expiry). No logic.
--
-- KEYS[1]: the hash. ARGV: [1] the TTL in milliseconds, [2] the value
-- each field is set to, [3..] the fields.
local t = redis.call('TIME')
redis.call('HMGET', KEYS[1], unpack(ARGV, 3))
local args = {}
for i = 3, #ARGV do
  args[#args + 1] = ARGV[i]
  args[#args + 1] = ARGV[2]
end
redis.call('HSET', KEYS[1], unpack(args))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return t[2]
