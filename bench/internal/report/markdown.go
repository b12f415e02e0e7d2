package report

import (
	"fmt"
	"io"
	"strings"
)

// Markdown writes the report: the run's conditions, the targets, the
// shapes side by side at RefConcurrency, Redis' time per call against the
// floor, the client's side, the HTTP load test, the in-process benchmarks,
// Redis' memory, every measurement and, when chart is not empty, the chart
// (a path relative to the markdown file), and httpChart likewise. The
// Redis tables are left out of a run that measured no shape (make
// bench-http).
func (r *Run) Markdown(w io.Writer, chart, httpChart string) error {
	var b strings.Builder
	r.writeConditions(&b)
	r.writeTargets(&b)
	if len(r.Redis) > 0 {
		r.writeSummary(&b)
		if chart != "" {
			fmt.Fprintf(&b, "\n![decisions/s and p99 against concurrency, per shape and contender](%s)\n", chart)
		}
		r.writeAllotments(&b)
		r.writeFloor(&b)
		r.writeClient(&b)
	}
	r.writeHTTP(&b, httpChart)
	r.writeInProcess(&b)
	if len(r.Redis) > 0 {
		r.writeMemory(&b)
		r.writeAll(&b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Run) writeConditions(b *strings.Builder) {
	m := r.Machine
	fmt.Fprintf(b, "### Run of %s\n\n", r.Date.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(b, "- Machine: %s, %d CPUs (GOMAXPROCS %d), %s/%s, %s; Redis %s on the same machine, over loopback.\n",
		m.CPU, m.CPUs, m.GOMAXPROCS, m.OS, m.Arch, m.Go, m.Redis)
	fmt.Fprintf(b, "- Load average (1, 5, 15 min) before: `%s`; after: `%s`.\n", m.LoadBefore, m.LoadAfter)
	fmt.Fprintf(b, "- Command: `%s`\n", r.Command)
	if len(r.Redis) > 0 {
		fmt.Fprintf(b, "- Each measurement: closed loop of c workers, %s of warm-up then %s measured, over a population of %d clients%s; the contenders of a shape run back to back at each concurrency, in alternating order, %s.\n",
			r.Warmup, r.perPoint(), r.Population, r.otherPopulations(), r.roundsText())
		fmt.Fprintf(b, "- Clients: sluice, the plain script and the floor script on rueidis as sluice's redis.New builds it (auto-pipelined, a few connections); redis_rate on go-redis with %s.\n", r.GoRedisPool)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(b, "- %s\n", n)
	}
}

// otherPopulations names the shapes measured over another population than
// the run's: " (demo: 20000)".
func (r *Run) otherPopulations() string {
	var out []string
	for _, s := range r.shapes() {
		for _, m := range r.Redis {
			if m.Shape == s.name && m.Population > 0 && m.Population != r.Population {
				out = append(out, fmt.Sprintf("%s: %d", s.name, m.Population))
				break
			}
		}
	}
	if len(out) == 0 {
		return ""
	}
	return " (" + strings.Join(out, ", ") + ")"
}

func (r *Run) roundsText() string {
	if r.RedisRounds > 1 {
		return fmt.Sprintf("%d rounds of each, of which each contender's median (by decisions/s) is shown", r.RedisRounds)
	}
	return "once"
}

func (r *Run) writeTargets(b *strings.Builder) {
	b.WriteString("\n#### Targets\n\n| target | want | measured | verdict |\n|---|---|---|---|\n")
	for _, t := range r.Targets() {
		got := t.Got
		if got == "" {
			got = "–"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", t.Name, t.Want, got, t.Verdict())
	}
}

// writeSummary is the table: every shape at RefConcurrency, with
// sluice's ratio to the shape's reference peer and Redis' cost per call.
func (r *Run) writeSummary(b *strings.Builder) {
	c := RefConcurrency
	fmt.Fprintf(b, "\n#### Side by side at c=%d\n\n", c)
	b.WriteString("| shape | contender | decisions/s | p50 | p99 | p999 | vs peer | Redis µs per call | Redis calls per decision | CPU µs per decision: client + Redis | refused |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.shapes() {
		ref := r.find(s.name, s.peer(), c)
		for _, ct := range s.contenders {
			m := r.find(s.name, ct.name, c)
			if m == nil {
				continue
			}
			vs := "–"
			if ct.sluice && ref != nil && ref.PerSecond > 0 {
				vs = times(m.PerSecond/ref.PerSecond) + " " + s.peer()
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %.1f | %.3f | %.1f + %.1f | %s |\n",
				s.title, name(ct), rate(m.PerSecond), micros(m.P50), micros(m.P99), micros(m.P999), vs,
				m.MicrosPerCall(), m.CallsPerDecision(), m.ClientCPUPerDecision(), m.RedisCPUPerDecision(), percent(m.RefusedShare()))
		}
	}
	b.WriteString("\nRedis µs per call is Redis' own time per script call (INFO commandstats, commands inside the script included), or per command for a contender that runs no script (envoyproxy/ratelimit's INCRBY and EXPIRE: compare its time per decision, per call × calls per decision); calls per decision counts every command the contender sent. CPU per decision is the processor time the client process (every worker, the client library and sluice) and Redis (INFO cpu: commands, protocol and network) used over the measurement, divided by its decisions: the two share the machine's cores, so a side that costs less leaves more to the other.\n")
}

// NoAllotmentsSuffix ends the name of a contender's twin with
// allotments off (suite.NoAllotmentsSuffix).
const NoAllotmentsSuffix = ", no allotments"

// writeAllotments sets, at every concurrency, each contender built on
// sluice's Limiter (those whose store calls were counted) beside its twin
// without allotments (docs/adr/019), when the run measured both: the
// decisions/s of each against the shape's peer, and the calls each made,
// as Redis counted them and as the Limiter's Recorder did.
func (r *Run) writeAllotments(b *strings.Builder) {
	var t strings.Builder
	for _, s := range r.shapes() {
		for _, c := range r.Concurrency {
			ref := r.find(s.name, s.peer(), c)
			for _, ct := range s.contenders {
				m := r.find(s.name, ct.name, c)
				if m == nil || m.StoreCalls == nil {
					continue
				}
				vs, twin := "–", "–"
				if ref != nil && ref.PerSecond > 0 {
					vs = times(m.PerSecond/ref.PerSecond) + " " + s.peer()
				}
				if off := r.find(s.name, ct.name+NoAllotmentsSuffix, c); off != nil && off.PerSecond > 0 {
					twin = times(m.PerSecond / off.PerSecond)
				}
				fmt.Fprintf(&t, "| %s | %s | %d | %s | %s | %s | %.5f | %.5f | %s | %s | %s / %s |\n",
					s.name, name(ct), c, rate(m.PerSecond), vs, twin, m.CallsPerDecision(), m.StoreCallsPerDecision(""), m.storeCallsText(), micros(m.StoreCallMean("")), micros(m.P50), micros(m.P99))
			}
		}
	}
	if t.Len() == 0 {
		return
	}
	b.WriteString("\n#### Allotments: the Limiter with and without\n\n")
	b.WriteString("Every contender built on sluice's Limiter, at every concurrency. Allotments (docs/adr/019) are on by default; a contender named \"…" + NoAllotmentsSuffix + "\" is the same with them off (`allotments: off`). Redis commands per decision are INFO commandstats' (every command the contender's client sent, a batch's script call once); store calls are the Limiter's own calls to its store as its Recorder counts them, by operation: an allotment taken (allot), its unspent units given back (settle), a decision at the store (evaluate: one for a batch of coalesced decisions); their mean latency is as the Limiter timed them, from the call to its answer (the client's queues and the wait for a processor included).\n\n")
	b.WriteString("| shape | contender | c | decisions/s | vs the shape's peer | with ÷ without allotments | Redis commands per decision | store calls per decision | by operation | store call mean latency | p50 / p99 |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	b.WriteString(t.String())
}

// writeFloor sets every contender's Redis time per call beside the floor
// of the layout it runs: the floor script's on the same keys, or for the
// plain script, where the shape has one, the per-window floor's (its own
// layout, one key per window). The per-window floor's own row reads it
// against the shape's floor: what sharing logs saves in commands alone.
func (r *Run) writeFloor(b *strings.Builder) {
	c := RefConcurrency
	var t strings.Builder
	for _, s := range r.shapes() {
		fl := r.find(s.name, floorName, c)
		if fl == nil || fl.MicrosPerCall() == 0 {
			continue
		}
		perWindow := r.find(s.name, floorPerWindowName, c)
		for _, ct := range s.contenders {
			m := r.find(s.name, ct.name, c)
			if m == nil || ct.name == floorName || m.ScriptCalls == 0 {
				continue
			}
			floor, against := fl, floorName
			if ct.name == plainScriptName && perWindow != nil && perWindow.MicrosPerCall() > 0 {
				floor, against = perWindow, floorPerWindowName
			}
			fmt.Fprintf(&t, "| %s | %s | %.1f | %.1f (%s) | %s |\n", s.title, name(ct), m.MicrosPerCall(), floor.MicrosPerCall(), against, times(m.MicrosPerCall()/floor.MicrosPerCall()))
		}
	}
	fmt.Fprintf(b, "\n#### Redis time per call against the floor (c=%d)\n\n", c)
	b.WriteString("The floor script sends exactly the commands of sluice's key layout for the shape's keys with no logic between them: TIME; one MGET of the string keys and one SET PX each; per ZSET key one ZREMRANGEBYSCORE (by the longest period of the windows naming it), ZCARD and one ZCOUNT per other window on it, ZADD and PEXPIRE; reads only where the shape refuses. A key several sliding-log windows share (docs/adr/015) is read and written once. It is what the commands alone cost Redis, and the floor the target reads. Where a shape shares logs, the floor script of one key per window is measured too: the plain script (one ZSET per window) is read against it, and its own row against the shared layout's floor says what sharing saves in commands alone. redis_rate's row compares its one key with the shape's floor.\n\n")
	b.WriteString("| shape | contender | Redis µs per call | floor µs per call (which) | × floor |\n|---|---|---|---|---|\n")
	b.WriteString(t.String())
}

// writeClient sets each contender's client CPU per decision (c=64) beside
// its serial latency (c=1): what the client side of a decision costs.
func (r *Run) writeClient(b *strings.Builder) {
	b.WriteString("\n#### The client's side: CPU per decision and serial latency\n\n")
	fmt.Fprintf(b, "Client CPU per decision is this process' processor time (every worker, the client library and sluice) over the c=%d measurement, divided by its decisions; sluice, the plain script and the floor run on the very same client (rueidis as redis.New builds it), redis_rate on go-redis. The serial p50 is at c=1, where latency is the client's path, a loopback round trip and Redis' time.\n\n", RefConcurrency)
	b.WriteString("| shape | contender | client CPU µs per decision (c=64) | vs the plain script | p50 at c=1 | vs redis_rate |\n|---|---|---|---|---|---|\n")
	for _, s := range r.shapes() {
		plain := r.find(s.name, plainScriptName, RefConcurrency)
		rr := r.find(s.name, redisRateName, 1)
		for _, ct := range s.contenders {
			m, serial := r.find(s.name, ct.name, RefConcurrency), r.find(s.name, ct.name, 1)
			if m == nil && serial == nil {
				continue
			}
			cpu, vsPlain, p50, vsRR := "–", "–", "–", "–"
			if m != nil {
				cpu = fmt.Sprintf("%.1f", m.ClientCPUPerDecision())
				if plain != nil && plain.ClientCPUPerDecision() > 0 && ct.name != plainScriptName {
					vsPlain = times(m.ClientCPUPerDecision() / plain.ClientCPUPerDecision())
				}
			}
			if serial != nil {
				p50 = micros(serial.P50)
				if rr != nil && rr.P50 > 0 && ct.name != redisRateName {
					vsRR = times(serial.P50 / rr.P50)
				}
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", s.title, name(ct), cpu, vsPlain, p50, vsRR)
		}
	}
}

func (r *Run) writeInProcess(b *strings.Builder) {
	if len(r.InProcess) == 0 {
		return
	}
	b.WriteString("\n#### In process (Go benchmarks)\n\n")
	if r.InProcessRounds > 1 {
		fmt.Fprintf(b, "Each benchmark ran %d times, round-robin with the others; the median round is shown.\n\n", r.InProcessRounds)
	}
	b.WriteString("| shape | contender | goroutines | ns/op | allocs/op | B/op |\n|---|---|---|---|---|---|\n")
	for _, ip := range r.InProcess {
		g := "1"
		if ip.Parallel {
			g = fmt.Sprintf("%d (RunParallel)", r.Machine.GOMAXPROCS)
		}
		n := ip.Contender
		if ip.Sluice {
			n = "**" + n + "**"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %d | %d |\n", ip.Shape, n, g, nanos(ip.NsPerOp), ip.AllocsPerOp, ip.BytesPerOp)
	}
}

func (r *Run) writeMemory(b *strings.Builder) {
	c := RefConcurrency
	fmt.Fprintf(b, "\n#### Redis memory after the c=%d measurement\n\n", c)
	b.WriteString("| shape | contender | keys | bytes per key (MEMORY USAGE) | used_memory over the empty server's |\n|---|---|---|---|---|\n")
	for _, s := range r.shapes() {
		for _, ct := range s.contenders {
			if m := r.find(s.name, ct.name, c); m != nil {
				fmt.Fprintf(b, "| %s | %s | %d | %.0f | %s |\n", s.title, name(ct), m.DBKeys, m.KeyBytes, byteSize(m.UsedMemory))
			}
		}
	}
	b.WriteString("\nKeys expire with their windows, so the count is what one window of traffic leaves; the Limiter's refusal cache and pseudonyms live in process and are not counted.\n")
}

func (r *Run) writeAll(b *strings.Builder) {
	b.WriteString("\n#### Every measurement\n\n| shape | contender | c | decisions/s | p50 | p99 | p999 | max | Redis µs per call | client CPU µs per decision | refused | errors |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.shapes() {
		for _, c := range r.Concurrency {
			for _, ct := range s.contenders {
				m := r.find(s.name, ct.name, c)
				if m == nil {
					continue
				}
				errs := fmt.Sprint(m.Errors)
				if m.FailedRounds > 0 && m.Errors == 0 {
					errs = fmt.Sprintf("0 (%d of %d rounds set aside)", m.FailedRounds, m.Rounds)
				}
				if m.FirstError != "" {
					errs += " (" + strings.ReplaceAll(m.FirstError, "|", "/") + ")"
				}
				fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s | %s | %s | %.1f | %.1f | %s | %s |\n",
					s.name, name(ct), c, rate(m.PerSecond), micros(m.P50), micros(m.P99), micros(m.P999), micros(m.Max),
					m.MicrosPerCall(), m.ClientCPUPerDecision(), percent(m.RefusedShare()), errs)
			}
		}
	}
}

// name sets sluice's contenders in bold.
func name(c contender) string {
	if c.sluice {
		return "**" + c.name + "**"
	}
	return c.name
}

// rate formats decisions per second: 940, 74.2k, 1.25M.
func rate(v float64) string {
	switch {
	case v >= 999_950:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 999.5: // 999.6 reads 1.0k, not 1000
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// micros formats microseconds: 88 µs, 3.4 ms, 120 ms, 1.2 s.
func micros(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.1f s", us/1e6)
	case us >= 100_000:
		return fmt.Sprintf("%.0f ms", us/1000)
	case us >= 1000:
		return fmt.Sprintf("%.1f ms", us/1000)
	}
	return fmt.Sprintf("%.0f µs", us)
}

// nanos formats nanoseconds: 249 ns, 1.70 µs.
func nanos(ns float64) string {
	if ns >= 1000 {
		return fmt.Sprintf("%.2f µs", ns/1000)
	}
	return fmt.Sprintf("%.0f ns", ns)
}

func times(x float64) string { return fmt.Sprintf("%.2f×", x) }

func percent(x float64) string {
	if x == 0 {
		return "0"
	}
	return fmt.Sprintf("%.2f %%", 100*x)
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
