package redis_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/lua"
)

// BenchmarkScriptCost measures Redis' own time per script call (INFO
// commandstats, cmdstat_evalsha usec_per_call after CONFIG RESETSTAT) of
// the store's script and the floor script that sends the same commands
// with no logic (testdata/floor), on the request shapes of docs/adr/009,
// at 4 callers on a dedicated server, every call admitted; the script is
// measured in the default configuration (ServerTime, no grace) and under
// CallerTime with its default grace (DefaultGrace, the whole period of
// these 100 ms windows: the worst case); then the floors of the three key
// layouts of the layout study. It prints a table; nothing is asserted
// about time (a shared machine is noisy: compare the columns of one run).
//
//	go test -run '^$' -bench BenchmarkScriptCost -benchtime 20000x ./adapters/redis/
func BenchmarkScriptCost(b *testing.B) {
	srv := redistest.NewServer(b)
	addr := srv.Addr()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, AlwaysPipelining: true, PipelineMultiplex: -1})
	require.NoError(b, err)
	b.Cleanup(client.Close)
	server := newStore(b, redis.Config{Addrs: []string{addr}, Timeout: testTimeout})                         // the default: ServerTime, no grace
	caller := newStore(b, redis.Config{Addrs: []string{addr}, Timeout: testTimeout, Time: redis.CallerTime}) // DefaultGrace
	floorKeys := rueidis.NewLuaScript(readFloor(b, "keys.lua"))
	floorHash := rueidis.NewLuaScript(readFloor(b, "hash.lua"))

	small := domain.Window{Name: "w", Limit: 1000, Period: 100 * time.Millisecond, Algorithm: domain.SlidingLog}
	big := domain.Window{Name: "w", Limit: 50_000, Period: time.Second, Algorithm: domain.SlidingLog}
	huge := domain.Window{Name: "w", Limit: domain.MaxLimit, Period: time.Hour, Algorithm: domain.GCRA}
	shapes := []struct {
		name string
		// windows of one tenant's request; a ZSET window is one key shared
		// by every call (the tenant-global window taking every decision).
		windows []domain.Window
	}{
		{"log9", repeatWindow(small, 9)},
		{"gcra9", repeatWindow(huge, 9)},
		{"large9", append(repeatWindow(small, 8), big)},
		{"dual2", repeatWindow(small, 2)},
	}
	results := map[string]float64{}
	sizes := map[string]int{}
	measure := func(name string, call func(ctx context.Context, g, i int) error) {
		b.Run(name, func(b *testing.B) {
			do(b, addr, "FLUSHALL")
			// Warm: the script cached, the connection up.
			require.NoError(b, call(b.Context(), 0, 0))
			do(b, addr, "CONFIG", "RESETSTAT")
			const callers = 4
			var next atomic.Int64
			var firstErr atomic.Value
			var wg sync.WaitGroup
			b.ResetTimer()
			for g := range callers {
				wg.Go(func() {
					for {
						i := int(next.Add(1) - 1)
						if i >= b.N {
							return
						}
						if err := call(b.Context(), g, i); err != nil {
							firstErr.CompareAndSwap(nil, err)
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if err := firstErr.Load(); err != nil {
				b.Fatalf("a call failed or was refused: %v", err)
			}
			us := evalshaMicros(b, addr)
			b.ReportMetric(us, "redis-µs/call")
			results[name] = us
		})
	}
	for _, sh := range shapes {
		limits := tenantLimits(sh.windows)
		keys := make([][][]string, 4)
		for g := range keys {
			for _, set := range limits[g] {
				ks := make([]string, len(set))
				for i, l := range set {
					ks[i] = l.Key
				}
				keys[g] = append(keys[g], ks)
			}
		}
		nz := 0
		if sh.windows[len(sh.windows)-1].Limit > redis.CompactLogMaxLimit && sh.windows[len(sh.windows)-1].Algorithm == domain.SlidingLog {
			nz = 1
		}
		var nonce atomic.Uint64
		measure(sh.name+"/caller", func(ctx context.Context, g, i int) error {
			r, err := caller.Evaluate(ctx, time.Now(), limits[g][i%rotation])
			if err == nil && !r.Allowed {
				err = fmt.Errorf("refused: %+v", r)
			}
			return err
		})
		measure(sh.name+"/server", func(ctx context.Context, g, i int) error {
			r, err := server.Evaluate(ctx, time.Now(), limits[g][i%rotation])
			if err == nil && !r.Allowed {
				err = fmt.Errorf("refused: %+v", r)
			}
			return err
		})
		// The floor writes values as long as the script's in the default
		// configuration (the run just before), on average: the same bytes
		// through MGET and SET.
		size := meanStrlen(b, addr, keys)
		value := "\x01" + strings.Repeat("x", max(size, 2)-1)
		sizes[sh.name] = size
		measure(sh.name+"/floor", func(ctx context.Context, g, i int) error {
			return floorKeys.Exec(ctx, client, keys[g][i%rotation],
				[]string{strconv.Itoa(nz), value, strconv.FormatInt(big.PeriodMicros(), 10), "1000", "n" + strconv.FormatUint(nonce.Add(1), 36)}).Error()
		})
	}
	// The layout study: the floors of one key per window (9 keys), one
	// key per principal holding its windows (5 keys, each value twice as
	// long), one hash per hash tag (9 fields).
	layoutKeys := func(n int) [][]string {
		var sets [][]string
		for range rotation {
			tg := tag(b)
			var ks []string
			for i := range n {
				ks = append(ks, fmt.Sprintf("lay:{%s}:%d", tg, i))
			}
			sets = append(sets, ks)
		}
		return sets
	}
	nine, five, one := layoutKeys(9), layoutKeys(5), layoutKeys(1)
	measure("layout/window-keys-9", func(ctx context.Context, g, i int) error {
		return floorKeys.Exec(ctx, client, nine[(g*rotation+i)%len(nine)], []string{"0", "\x01" + strings.Repeat("x", 14), "0", "1000", ""}).Error()
	})
	measure("layout/principal-keys-5", func(ctx context.Context, g, i int) error {
		return floorKeys.Exec(ctx, client, five[(g*rotation+i)%len(five)], []string{"0", "\x01" + strings.Repeat("x", 29), "0", "1000", ""}).Error()
	})
	fields := []string{"1000", "\x01" + strings.Repeat("x", 14)}
	for i := range 9 {
		fields = append(fields, "w"+strconv.Itoa(i))
	}
	measure("layout/hash-fields-9", func(ctx context.Context, g, i int) error {
		return floorHash.Exec(ctx, client, one[(g*rotation+i)%len(one)], fields).Error()
	})

	var table strings.Builder
	table.WriteString("\nRedis µs per call (cmdstat_evalsha usec_per_call, 4 callers)\n" +
		"| shape | store (ServerTime, no grace) | store (CallerTime, grace) | floor | store/floor | caller/floor | string value bytes |\n" +
		"|---|---|---|---|---|---|---|\n")
	for _, sh := range shapes {
		sv, ct, fl := results[sh.name+"/server"], results[sh.name+"/caller"], results[sh.name+"/floor"]
		fmt.Fprintf(&table, "| %s | %.1f | %.1f | %.1f | %.2f | %.2f | %d |\n", sh.name, sv, ct, fl, sv/fl, ct/fl, sizes[sh.name])
	}
	table.WriteString("| layout floor | µs |\n|---|---|\n")
	for _, name := range []string{"layout/window-keys-9", "layout/principal-keys-5", "layout/hash-fields-9"} {
		fmt.Fprintf(&table, "| %s | %.1f |\n", strings.TrimPrefix(name, "layout/"), results[name])
	}
	b.Log(table.String())
}

// meanStrlen is the mean length of the string keys among keys (a ZSET
// counts for nothing).
func meanStrlen(b *testing.B, addr string, keys [][][]string) int {
	var sum, n int64
	for _, caller := range keys {
		for _, set := range caller {
			for _, k := range set {
				if do(b, addr, "TYPE", k) != "string" {
					continue
				}
				sum += do(b, addr, "STRLEN", k).(int64)
				n++
			}
		}
	}
	if n == 0 {
		return 0
	}
	return int(sum / n)
}

func readFloor(b *testing.B, name string) string {
	src, err := os.ReadFile("testdata/floor/" + name)
	require.NoError(b, err)
	return string(src)
}

func repeatWindow(w domain.Window, n int) []domain.Window {
	return slices.Repeat([]domain.Window{w}, n)
}

// tenantLimits returns, per caller, rotation request sets of windows on
// one tenant's keys (one hash tag): each set its own keys (its users),
// but a ZSET window (limit above the compact bound) on the one key every
// call shares, the tenant-global window.
func tenantLimits(windows []domain.Window) [][][]domain.Limit {
	out := make([][][]domain.Limit, 4)
	for g := range out {
		for range rotation {
			var set []domain.Limit
			for i, w := range windows {
				k := fmt.Sprintf("cost:{tenant}:%d-%d:%d", g, len(out[g]), i)
				if w.Algorithm == domain.SlidingLog && w.Limit > redis.CompactLogMaxLimit {
					k = "cost:{tenant}:__global__"
				}
				set = append(set, domain.Limit{Key: k, Window: w, Cost: 1})
			}
			out[g] = append(out[g], set)
		}
	}
	return out
}

// evalshaMicros reads usec_per_call of EVALSHA (and EVAL, should a
// NOSCRIPT have sent the script whole) since the last CONFIG RESETSTAT.
func evalshaMicros(b *testing.B, addr string) float64 {
	b.Helper()
	var calls, usec int64
	for line := range strings.Lines(do(b, addr, "INFO", "commandstats").(string)) {
		if !strings.HasPrefix(line, "cmdstat_eval") {
			continue
		}
		for f := range strings.SplitSeq(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls += n
			case "usec":
				usec += n
			}
		}
	}
	if calls == 0 {
		b.Fatal("no script call reached the server")
	}
	return float64(usec) / float64(calls)
}

// BenchmarkScriptLoop measures the script's own time per call inside
// Redis: testdata/floor/loop.lua runs rate_limit_v5 on keys of one window
// each (the default, no grace, and with DefaultGrace as under
// CallerTime), v5 once more as a control (its ratio to the first is the
// benchmark's own noise) and the floor on the shapes of
// BenchmarkScriptCost, in alternating batches of one EVAL, on a simulated
// clock. Without the client, the network and the dispatch sharing the
// two cores, its figures move far less between runs than
// BenchmarkScriptCost's, and they are what a change of the script
// changes. It prints the least and the median batch, in µs per call;
// nothing is asserted about time.
//
//	go test -run '^$' -bench BenchmarkScriptLoop -benchtime 1x ./adapters/redis/
func BenchmarkScriptLoop(b *testing.B) {
	srv := redistest.NewServer(b)
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	require.NoError(b, err)
	b.Cleanup(client.Close)
	contender := func(name string, kind int, src string) string {
		return fmt.Sprintf("{name = %q, kind = %d, fn = function(KEYS, ARGV)\n%s\nend},\n", name, kind, src)
	}
	extra, names := extraContenders(b)
	src := "local CONTENDERS = {\n" +
		contender("v5", 5, lua.RateLimitV5) +
		contender("v5-control", 5, lua.RateLimitV5) +
		contender("v5-grace", 5, lua.RateLimitV5)
	dg := strconv.FormatInt(redis.DefaultGrace.Microseconds(), 10)
	graces := "0,0," + dg
	for i, x := range extra {
		src += contender(names[i], 5, x)
		graces += ",0"
	}
	src += contender("floor", 0, readFloor(b, "keys.lua")) + "}\n" + readFloor(b, "loop.lua")
	small := domain.Window{Limit: 1000, Period: 100 * time.Millisecond, Algorithm: domain.SlidingLog}
	big := domain.Window{Limit: 50_000, Period: time.Second, Algorithm: domain.SlidingLog}
	huge := domain.Window{Limit: domain.MaxLimit, Period: time.Hour, Algorithm: domain.GCRA}
	shapes := []struct {
		name    string
		windows []domain.Window
	}{
		{"log9", repeatWindow(small, 9)},
		{"gcra9", repeatWindow(huge, 9)},
		{"large9", append(repeatWindow(small, 8), big)},
		{"dual2", repeatWindow(small, 2)},
	}
	var table strings.Builder
	table.WriteString("\nRedis µs per call inside one EVAL (least / median of 31 batches of 300 calls)\n" +
		"| shape | v5 (no grace) | v5 (DefaultGrace) | floor | v5 again/v5 (the noise) | v5/floor | v5 grace/floor | string value bytes |\n" +
		"|---|---|---|---|---|---|---|---|\n")
	for _, sh := range shapes {
		var per []byte
		for _, w := range sh.windows {
			per = append(per, byte(w.Algorithm))
			per = binary.BigEndian.AppendUint32(per, uint32(w.Limit))
			per = binary.BigEndian.AppendUint64(per, uint64(w.PeriodMicros()))
			per = binary.BigEndian.AppendUint32(per, 1)
		}
		for range b.N {
			require.NoError(b, client.Do(b.Context(), client.B().Flushall().Build()).Error())
			ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
			rows, err := client.Do(ctx, client.B().Eval().Script(src).Numkeys(0).Arg(string(per), graces, "300", "31").Build()).ToArray()
			cancel()
			require.NoError(b, err)
			fig := map[string][2]float64{}
			var bytes string
			for _, row := range rows {
				f, err := row.AsStrSlice()
				require.NoError(b, err)
				if f[0] == "value bytes" {
					bytes = f[1]
					continue
				}
				least, _ := strconv.ParseFloat(f[1], 64)
				median, _ := strconv.ParseFloat(f[2], 64)
				fig[f[0]] = [2]float64{least, median}
			}
			cell := func(name string) string { return fmt.Sprintf("%.1f / %.1f", fig[name][0], fig[name][1]) }
			ratio := func(name string) string {
				return fmt.Sprintf("%.2f / %.2f", fig[name][0]/fig["floor"][0], fig[name][1]/fig["floor"][1])
			}
			versus := func(a, b string) string {
				return fmt.Sprintf("%.2f / %.2f", fig[a][0]/fig[b][0], fig[a][1]/fig[b][1])
			}
			fmt.Fprintf(&table, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", sh.name,
				cell("v5"), cell("v5-grace"), cell("floor"), versus("v5-control", "v5"), ratio("v5"), ratio("v5-grace"), bytes)
			for _, x := range names {
				fmt.Fprintf(&table, "| %s | %s: %s | %s/v5: %s |\n", sh.name, x, cell(x), x, versus(x, "v5"))
			}
		}
	}
	b.Log(table.String())
}

// extraContenders reads SLUICE_SCRIPTS (name=path,...): scripts taking
// rate_limit_v5's arguments, measured beside it.
func extraContenders(b testing.TB) (srcs, names []string) {
	for _, f := range strings.Split(os.Getenv("SLUICE_SCRIPTS"), ",") {
		name, path, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			panic(err)
		}
		srcs, names = append(srcs, string(src)), append(names, name)
	}
	return srcs, names
}
