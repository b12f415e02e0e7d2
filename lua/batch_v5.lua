-- sluice batch_v5: lua.BatchV5 is "local function decide(KEYS, ARGV)",
-- rate_limit_v5.lua, "end", then this file (docs/adr/018-batches.md).
-- ARGV[1]: two bytes per request, its number of KEYS then of ARGV; KEYS
-- and ARGV[2..]: every request's, in order. Reply: per request, in order,
-- its rate_limit_v5 reply or error, each decided after the ones before.
local sizes, byte, unpack, pcall = ARGV[1], string.byte, unpack, pcall
local r, nk, na = #sizes / 2, 0, 1
for x = 1, r do
  local kn, an = byte(sizes, 2 * x - 1, 2 * x)
  nk, na = nk + kn, na + an
end
if r % 1 ~= 0 or nk ~= #KEYS or na ~= #ARGV then
  return redis.error_reply('ERR sluice batch_v5: ARGV[1] must give two bytes per request, naming every KEYS and ARGV sent')
end
local out = {}
nk, na = 0, 1
for x = 1, r do
  local kn, an = byte(sizes, 2 * x - 1, 2 * x)
  local ok, rep = pcall(decide, {unpack(KEYS, nk + 1, nk + kn)}, {unpack(ARGV, na + 1, na + an)})
  if not ok and not (type(rep) == 'table' and rep.err) then
    rep = {err = tostring(rep)}
  end
  out[x], nk, na = rep, nk + kn, na + an
end
return out
