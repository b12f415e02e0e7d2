package redis_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/lua"
)

// largeLogLoop drives BenchmarkLargeLogLoop inside one EVAL: the bench's
// log-9-large shape (docs/BENCHMARKS.md) on a simulated population of
// 1 000 clients, each with six ZSET windows of its own (ip, user and api
// key × 2 000 per second and 20 000 per 10 s), and the big tenant's three
// shared ZSETs (100 000 per second, 100 000 per 2 s twice), filled with
// 25 000 units over the last 2 s before the first call. Every contender
// runs on keys of its own; batches rotate the contenders' order, so a
// slow moment of the machine and the position in a batch hit them all.
// Each call's keys and arguments are built before its batch is timed.
const largeLogLoop = `
local pack = struct.pack
-- ARGV[3] 'compact': the log-9 shape instead (every window 1 000 per 1 s
-- or 10 s, compact logs, every key the client's own, nothing prefilled).
local COMPACT = ARGV[3] == 'compact'
local W = {{2000, 1000000}, {20000, 10000000}, {2000, 1000000}, {20000, 10000000},
  {2000, 1000000}, {20000, 10000000}, {100000, 1000000}, {100000, 2000000}, {100000, 2000000}}
if COMPACT then
  W = {{1000, 1000000}, {1000, 10000000}, {1000, 1000000}, {1000, 10000000},
    {1000, 1000000}, {1000, 10000000}, {1000, 1000000}, {1000, 10000000}, {1000, 10000000}}
end
local hdr = pack('>i8BI4I4i8I4', 0, 3, 1000, 1024, 0, 1) -- consume, server time, no grace
local hdr5, hdr5s = hdr, hdr
for i = 1, 9 do
  hdr5 = hdr5 .. pack('>BI4i8I4', 4 * i, W[i][1], W[i][2], 1)
end
-- The shared layout: window i on key S[i] (ip, user, api key and the
-- tenant: burst and sustained on one key each; the tenant-global window
-- alone). The floor's arguments: per key its TTL, its windows and their
-- periods, the longest first.
local S = {1, 1, 2, 2, 3, 3, 4, 4, 5}
for i = 1, 9 do
  hdr5s = hdr5s .. pack('>BI4i8I4', 4 * S[i], W[i][1], W[i][2], 1)
end
local FS = {'10000', '2', '10000000', '1000000', '10000', '2', '10000000', '1000000', '10000', '2', '10000000', '1000000',
  '2000', '2', '2000000', '1000000', '2000', '1', '2000000'}
if COMPACT then
  -- floor.lua's arguments for 5 string keys (MGET, SET PX).
  FS = {'5', '1', 'm', 'x'}
  for k = 1, 5 do
    FS[3 + 2 * k], FS[4 + 2 * k] = '10000', '10000000'
  end
end
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local function keys(v, j)
  local ks = {}
  for i = 1, 9 do
    if i >= 7 and not COMPACT then
      ks[i] = v .. ':{t}:big:' .. i
    else
      ks[i] = v .. ':{t}:' .. j .. ':' .. i
    end
  end
  return ks
end
-- The shared layout's keys: each principal's log named after its longest
-- window's key (docs/adr/015): the tenant's is big:8 (2 s), prefilled
-- like every big key.
local function shared(v, j)
  if COMPACT then
    return {v .. ':{t}:' .. j .. ':2', v .. ':{t}:' .. j .. ':4', v .. ':{t}:' .. j .. ':6', v .. ':{t}:' .. j .. ':8', v .. ':{t}:' .. j .. ':9'}
  end
  return {v .. ':{t}:' .. j .. ':2', v .. ':{t}:' .. j .. ':4', v .. ':{t}:' .. j .. ':6', v .. ':{t}:big:8', v .. ':{t}:big:9'}
end
for _, x in ipairs(COMPACT and {} or C) do
  for i = 7, 9 do
    for b = 0, 24999, 500 do
      local a = {}
      for m = b, b + 499 do
        a[#a + 1] = now - 2000000 + m * 80
        a[#a + 1] = 'pre' .. m
      end
      redis.call('ZADD', x.name .. ':{t}:big:' .. i, unpack(a))
    end
  end
end
local res, nonce, batches, calls = {}, 0, tonumber(ARGV[1]), tonumber(ARGV[2])
for batch = 1, batches do
  for cj = 1, #C do
    local ci = (cj + batch) % #C + 1
    local x = C[ci]
    -- Each call's keys and arguments, built before the batch is timed
    -- (as strings, as Redis passes them): building the plain script's 9
    -- keys and 20 arguments costs the driver about 4 µs a call more than
    -- v5's 5 keys and 2 arguments, which the batch must not charge.
    local todo = {}
    for c = 1, calls do
      nonce = nonce + 1
      local ks
      if x.kind == 'shared' or x.kind == 'floor-shared' then
        ks = shared(x.name, nonce % 1000)
      else
        ks = keys(x.name, nonce % 1000)
      end
      local a
      if x.kind == 'v5' then
        a = {hdr5, 'n' .. nonce}
      elseif x.kind == 'shared' then
        a = {hdr5s, 'n' .. nonce}
      elseif x.kind == 'floor-shared' and COMPACT then
        a = {FS[1], FS[2], 'm' .. nonce}
        for i = 4, #FS do
          a[i] = FS[i]
        end
      elseif x.kind == 'floor-shared' then
        a = {'m' .. nonce}
        for i = 1, #FS do
          a[i + 1] = FS[i]
        end
      elseif x.kind == 'plain' then
        local tt = redis.call('TIME')
        a = {tostring(tt[1] * 1000 + math.floor(tt[2] / 1000)), 'm' .. nonce}
        for i = 1, 9 do
          a[#a + 1], a[#a + 2] = tostring(W[i][1]), tostring(W[i][2] / 1000)
        end
      else
        -- floor.lua's arguments: each key's TTL, then (ZSET keys) each
        -- key's one window.
        a = {COMPACT and '9' or '0', '1', 'm' .. nonce, 'x'}
        for i = 1, 9 do
          a[4 + i] = tostring(W[i][2] / 1000)
        end
        for i = 1, COMPACT and 0 or 9 do
          a[#a + 1], a[#a + 2] = '1', tostring(W[i][2])
        end
      end
      todo[c] = {ks, a}
    end
    local t0 = redis.call('TIME')
    for c = 1, calls do
      x.fn(todo[c][1], todo[c][2])
    end
    local t1 = redis.call('TIME')
    res[ci] = res[ci] or {}
    table.insert(res[ci], ((t1[1] - t0[1]) * 1000000 + (t1[2] - t0[2])) / calls)
  end
end
local out = {}
for ci, x in ipairs(C) do
  table.sort(res[ci])
  out[ci] = {x.name, string.format('%.1f', res[ci][1]), string.format('%.1f', res[ci][math.ceil(#res[ci] / 2)])}
end
return out
`

// BenchmarkLargeLogLoop measures the large-log shape's Redis time per call
// inside one EVAL (largeLogLoop): rate_limit_v5 on nine keys of one
// window each and on the shared layout (docs/adr/015: five keys, the tenant's
// log named after its 2 s window), the bench's plain script and its
// floor (bench/internal/suite: the plain script's four commands per ZSET
// key and TIME), and the floor of the shared layout
// (testdata/floor/shared.lua: per key one trim, one ZCOUNT per window,
// ZADD, PEXPIRE; and TIME). Without the client and the network sharing the two
// cores, its ratios move less than the bench's. It prints the least and
// the median batch in µs per call; nothing is asserted about time.
//
//	go test -run '^$' -bench BenchmarkLargeLogLoop -benchtime 1x ./adapters/redis/
func BenchmarkLargeLogLoop(b *testing.B) {
	logLoop(b, "large", "log-9-large")
}

// BenchmarkCompactLogLoop is BenchmarkLargeLogLoop on the bench's log-9
// shape (docs/BENCHMARKS.md): every window 1 000 per second or per 10 s,
// so every log is compact (one string; the plain script keeps ZSETs), and
// every key the client's own. The floors are floor.lua's: one MGET of
// the 9 (or, shared, 5) string keys and a SET PX each.
//
//	go test -run '^$' -bench BenchmarkCompactLogLoop -benchtime 1x ./adapters/redis/
func BenchmarkCompactLogLoop(b *testing.B) {
	logLoop(b, "compact", "log-9")
}

// logLoop runs largeLogLoop on shape ("large" or "compact") and logs its
// table, titled name.
func logLoop(b *testing.B, shape, name string) {
	srv := redistest.NewServer(b)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	require.NoError(b, err)
	b.Cleanup(client.Close)
	suite := func(name string) string {
		src, err := os.ReadFile("../../bench/internal/suite/" + name)
		require.NoError(b, err)
		return string(src)
	}
	contender := func(name, kind, src string) string {
		return fmt.Sprintf("{name = %q, kind = %q, fn = function(KEYS, ARGV)\n%s\nend},\n", name, kind, src)
	}
	floorShared := suite("floor.lua")
	if shape == "large" {
		src, err := os.ReadFile("testdata/floor/shared.lua")
		require.NoError(b, err)
		floorShared = string(src)
	}
	src := "local C = {\n" +
		contender("v5", "v5", lua.RateLimitV5) +
		contender("v5-shared", "shared", lua.RateLimitV5) +
		extraLog(contender) +
		contender("plain", "plain", suite("plain.lua")) +
		contender("floor", "floor", suite("floor.lua")) +
		contender("floor-shared", "floor-shared", floorShared) +
		"}\n" + largeLogLoop
	var table strings.Builder
	table.WriteString("\n" + name + " inside one EVAL, Redis µs per call (least / median of 41 batches of 150 calls)\n" +
		"| run | v5 | v5 shared | plain script | floor | floor shared | v5 shared/plain | v5 shared/floor shared | plain/floor |\n" +
		"|---|---|---|---|---|---|---|---|---|\n")
	for run := range b.N {
		require.NoError(b, client.Do(b.Context(), client.B().Flushall().Build()).Error())
		ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
		rows, err := client.Do(ctx, client.B().Eval().Script(src).Numkeys(0).Arg("41", "150", shape).Build()).ToArray()
		cancel()
		require.NoError(b, err)
		fig := map[string][2]float64{}
		for _, row := range rows {
			f, err := row.AsStrSlice()
			require.NoError(b, err)
			var least, median float64
			_, err = fmt.Sscan(f[1]+" "+f[2], &least, &median)
			require.NoError(b, err)
			fig[f[0]] = [2]float64{least, median}
		}
		cell := func(name string) string { return fmt.Sprintf("%.1f / %.1f", fig[name][0], fig[name][1]) }
		versus := func(x, y string) string {
			return fmt.Sprintf("%.2f / %.2f", fig[x][0]/fig[y][0], fig[x][1]/fig[y][1])
		}
		fmt.Fprintf(&table, "| %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", run+1,
			cell("v5"), cell("v5-shared"), cell("plain"), cell("floor"), cell("floor-shared"),
			versus("v5-shared", "plain"), versus("v5-shared", "floor-shared"), versus("plain", "floor"))
		_, names := extraContenders(nil)
		for _, x := range names {
			fmt.Fprintf(&table, "| %d | %s: %s (%s v5) | %s-shared: %s (%s v5 shared) |\n", run+1, x, cell(x), versus(x, "v5"), x, cell(x+"-shared"), versus(x+"-shared", "v5-shared"))
		}
	}
	b.Log(table.String())
}

// extraLog is the SLUICE_SCRIPTS contenders on both layouts.
func extraLog(contender func(name, kind, src string) string) string {
	out := ""
	srcs, names := extraContenders(nil)
	for i, src := range srcs {
		out += contender(names[i], "v5", src) + contender(names[i]+"-shared", "shared", src)
	}
	return out
}

// compactSizeLoop drives BenchmarkCompactLogSize inside one EVAL: the
// log-9 shape's shared layout (9 windows on 5 compact logs, 1 000 clients)
// with every key prefilled with ARGV[1] units spread over the last 9 s,
// so that the logs hold what the bench's do (about 130 units a key)
// rather than the few of BenchmarkCompactLogLoop. F is the contender.
const compactSizeLoop = `
local pack = struct.pack
local units = tonumber(ARGV[1])
local W = {{1000, 1000000}, {1000, 10000000}, {1000, 1000000}, {1000, 10000000},
  {1000, 1000000}, {1000, 10000000}, {1000, 1000000}, {1000, 10000000}, {1000, 10000000}}
local S = {1, 1, 2, 2, 3, 3, 4, 4, 5}
local hdr = pack('>i8BI4I4i8I4', 0, 3, 1000, 1024, 0, 1)
for i = 1, 9 do
  hdr = hdr .. pack('>BI4i8I4', 4 * S[i], W[i][1], W[i][2], 1)
end
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
for j = 0, 999 do
  local parts = {'\1'}
  for m = 1, units do
    parts[#parts + 1] = pack('>I7', now - 9000000 + m * math.floor(9000000 / (units + 1)))
  end
  local v = table.concat(parts)
  for k = 1, 5 do
    redis.call('SET', 'c:{t}:' .. j .. ':' .. k, v, 'PX', 60000)
  end
end
local res = {}
for batch = 1, 21 do
  local t0 = redis.call('TIME')
  for c = 1, 150 do
    local j = (batch * 150 + c) % 1000
    local ks = {}
    for k = 1, 5 do
      ks[k] = 'c:{t}:' .. j .. ':' .. k
    end
    F(ks, {hdr, 'n' .. batch .. ':' .. c})
  end
  local t1 = redis.call('TIME')
  res[batch] = ((t1[1] - t0[1]) * 1000000 + (t1[2] - t0[2])) / 150
end
table.sort(res)
return {string.format('%.1f', res[1]), string.format('%.1f', res[11])}
`

// compactSizeFloor is the commands of the compact shared layout with no
// logic, on the logs' own values: TIME, one MGET of the 5 keys, and per
// key one SET PX of its value and one new unit (the bench's floor writes
// a 16-byte value whatever the log).
const compactSizeFloor = `
local t = redis.call('TIME')
local got = redis.call('MGET', unpack(KEYS))
local r = struct.pack('>I7', t[1] * 1000000 + t[2])
for k = 1, #KEYS do
  redis.call('SET', KEYS[k], (got[k] or '\1') .. r, 'PX', 10000)
end
return 1
`

// BenchmarkCompactLogSize measures what the compact logs' size costs
// (docs/adr/016, "Second round"): rate_limit_v5 on the shared layout of
// log-9 and compactSizeFloor, each on 5 keys × 1 000 clients prefilled
// with 5 and with 130 units. It prints the least and the median batch in
// µs per call; nothing is asserted about time.
//
//	go test -run '^$' -bench BenchmarkCompactLogSize -benchtime 1x ./adapters/redis/
func BenchmarkCompactLogSize(b *testing.B) {
	srv := redistest.NewServer(b)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	require.NoError(b, err)
	b.Cleanup(client.Close)
	var table strings.Builder
	table.WriteString("\nlog-9 shared, compact logs of 5 and 130 units, inside one EVAL, Redis µs per call (least / median of 21 batches of 150 calls)\n" +
		"| run | v5, 5 units | v5, 130 units | floor, 5 units | floor, 130 units |\n|---|---|---|---|---|\n")
	for run := range b.N {
		var cells []string
		for _, c := range []string{lua.RateLimitV5, compactSizeFloor} {
			for _, units := range []string{"5", "130"} {
				require.NoError(b, client.Do(b.Context(), client.B().Flushall().Build()).Error())
				src := "local F = function(KEYS, ARGV)\n" + c + "\nend\n" + compactSizeLoop
				ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
				f, err := client.Do(ctx, client.B().Eval().Script(src).Numkeys(0).Arg(units).Build()).AsStrSlice()
				cancel()
				require.NoError(b, err)
				cells = append(cells, f[0]+" / "+f[1])
			}
		}
		fmt.Fprintf(&table, "| %d | %s |\n", run+1, strings.Join(cells, " | "))
	}
	b.Log(table.String())
}
