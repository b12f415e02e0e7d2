-- sluice batch_v5: the tail of the batch script. The script is
-- "local function decide(KEYS, ARGV)\n" .. rate_limit_v5.lua .. "\nend\n"
-- .. this file (lua.BatchV5): it decides r independent requests, each as
-- its own rate_limit_v5 call would, in one call (docs/adr/018-batches.md).
--
-- ARGV[1]   two bytes per request: the number of its KEYS, then of its
--           ARGV (each at most 255)
-- KEYS      every request's KEYS, in order
-- ARGV[2..] every request's ARGV, in order
--
-- Reply: one element per request, in order: its rate_limit_v5 reply, or
-- its error (a script error reply such as SLUICEVALUE, or an error raised
-- by a command it sent). Requests are decided one after the other, in
-- arrival order; each reads what those before it wrote, and one's error
-- or refusal changes nothing for the others.
local sizes, byte, unpack, pcall = ARGV[1], string.byte, unpack, pcall
if #sizes < 2 or #sizes % 2 ~= 0 then
  return redis.error_reply('ERR sluice batch_v5: ARGV[1] must be two bytes per request')
end
-- Every request's counts are checked before any runs.
local r, nk, na = #sizes / 2, 0, 1
for x = 1, r do
  local kn, an = byte(sizes, 2 * x - 1, 2 * x)
  nk, na = nk + kn, na + an
end
if nk ~= #KEYS or na ~= #ARGV then
  return redis.error_reply('ERR sluice batch_v5: ARGV[1] must name every KEYS and ARGV sent, no more')
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
