-- Driver of BenchmarkScriptLoop (scriptcost_test.go): runs the contenders
-- of one request shape inside one EVAL, so that the time measured is the
-- scripts' own (their commands and their Lua) without the client, the
-- network or the command dispatch, which share the machine's cores in
-- BenchmarkScriptCost. The benchmark prepends CONTENDERS, a list of
-- {name, kind, fn}: fn(KEYS, ARGV) is the store's script or a script
-- taking its arguments (kind 5) or the floor keys.lua (kind 0), each
-- file's text as a function body.
--
-- ARGV: [1] the windows, struct-packed as the script's per-limit fields
-- ("B I4 i8 I4" each, the key index left out); [2] the grace in
-- microseconds per contender of kind 5, comma-separated in CONTENDERS'
-- order; [3] calls per batch; [4] batches.
--
-- Every contender runs the same timeline on its own keys: 64 key sets
-- (a tenant's request, as 4 callers of 16 tenants in BenchmarkScriptCost)
-- taken in turn, one call every 40 µs of a simulated clock (about the
-- rate a server sustains), a ZSET window (limit above the compact bound)
-- on one key shared by every set. The script gets the simulated instant
-- in its arguments (caller time) and the driver reads TIME for each of
-- its calls, as it does under ServerTime, so each contender pays one
-- TIME a call like the floor. Batches of the contenders alternate, so a
-- slow moment of the machine hits all of them; the reply is each
-- contender's microseconds per call, the least and the median batch.
local per, calls, batches = ARGV[1], tonumber(ARGV[3]), tonumber(ARGV[4])
local pack, unpack1 = struct.pack, struct.unpack
local wins = {}
-- per5: the windows as the script takes them, each on a key of its own:
-- the algorithm byte carries the key's index (4 * i).
local per5 = ''
for i = 1, #per / 17 do
  local g, l, p, c = unpack1('>BI4i8I4', per, 17 * (i - 1) + 1)
  wins[i] = {g = g, l = l, p = p, c = c}
  per5 = per5 .. pack('>BI4i8I4', g + 4 * i, l, p, c)
end
local graces = {}
for x in string.gmatch(ARGV[2], '[^,]+') do
  graces[#graces + 1] = tonumber(x)
end
local zset = wins[#wins].g == 0 and wins[#wins].l > 1024
local nz = zset and 1 or 0
local SETS, STEP = 64, 40
local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
local nonce = 0

local function keyset(v, j)
  local ks = {}
  for i = 1, #wins do
    if zset and i == #wins then
      ks[i] = 'loop:{t}:' .. v .. ':global'
    else
      ks[i] = 'loop:{t}:' .. v .. ':' .. j .. ':' .. i
    end
  end
  return ks
end

local floorValue = '\1'
local state = {}
local gi = 0
for v, c in ipairs(CONTENDERS) do
  local s = {now = start, sets = {}, times = {}}
  for j = 1, SETS do
    s.sets[j] = keyset(v, j)
  end
  if c.kind == 5 then
    gi = gi + 1
    s.grace = graces[gi]
  end
  state[v] = s
end

-- One batch of n calls of contender v; returns its microseconds per
-- call.
local function batch(v, calls)
  local c, s = CONTENDERS[v], state[v]
  local a = redis.call('TIME')
  for k = 1, calls do
    s.now = s.now + STEP
    nonce = nonce + 1
    local ks = s.sets[k % SETS + 1]
    local r
    if c.kind == 0 then
      r = c.fn(ks, {tostring(nz), floorValue, tostring(wins[#wins].p), '1000', 'n' .. nonce})
    else
      redis.call('TIME')
      local head = pack('>i8BI4I4i8I4', s.now, 1, 1000, 1024, s.grace, 1)
      r = c.fn(ks, {head .. per5, 'n' .. nonce})
      if type(r) ~= 'table' or r[1] ~= 1 then
        error('contender ' .. c.name .. ' did not admit: ' .. tostring(type(r) == 'table' and (r.err or r[1]) or r))
      end
    end
  end
  local b = redis.call('TIME')
  return ((b[1] - a[1]) * 1000000 + (b[2] - a[2])) / calls
end

-- Warm every contender for 200 ms of its clock (two of the 100 ms
-- windows, a fifth of the ZSET's): its keys then hold what they hold at
-- any later time. The floor then writes values as long as the first
-- script's, on average.
for v, c in ipairs(CONTENDERS) do
  if c.kind ~= 0 then
    batch(v, 200000 / STEP)
  end
end
for v, c in ipairs(CONTENDERS) do
  if c.kind == 5 then
    local sum, m = 0, 0
    for j = 1, SETS do
      for i = 1, #wins - nz do
        sum, m = sum + redis.call('STRLEN', state[v].sets[j][i]), m + 1
      end
    end
    floorValue = '\1' .. string.rep('x', math.max(math.floor(sum / m), 2) - 1)
    break
  end
end
for r = 1, batches do
  for v = 1, #CONTENDERS do
    state[v].times[r] = batch(v, calls)
  end
end
local out = {}
for v, c in ipairs(CONTENDERS) do
  local ts = state[v].times
  table.sort(ts)
  out[v] = {c.name, tostring(ts[1]), tostring(ts[math.floor((#ts + 1) / 2)])}
end
out[#out + 1] = {'value bytes', tostring(#floorValue), ''}
return out
