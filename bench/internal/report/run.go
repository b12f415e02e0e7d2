// Package report holds a benchmark run's results and turns them into what
// people read: markdown tables (every measurement, the shapes side by side
// at the reference concurrency, Redis' own costs, the in-process
// benchmarks), the targets met or missed, and an SVG chart of decisions/s
// and p99 against concurrency. Results are also kept as JSON, so that a
// report can be regenerated from a run without measuring again.
package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// RefConcurrency is the concurrency the targets and the summary table read.
const RefConcurrency = 64

// Run is one benchmark run.
type Run struct {
	Date    time.Time `json:"date"`
	Command string    `json:"command"`
	Machine Machine   `json:"machine"`
	// Warmup and Duration are per measurement; Population is the number of
	// clients the Redis shapes cycle through.
	// Ops, when set, replaced Duration: requests per measurement.
	Warmup      Duration `json:"warmup"`
	Duration    Duration `json:"duration"`
	Ops         int64    `json:"ops,omitempty"`
	Concurrency []int    `json:"concurrency"`
	// RedisRounds is how many times each contender ran at each
	// concurrency; the median round (by decisions/s) is kept.
	RedisRounds int `json:"redis_rounds,omitempty"`
	Population  int `json:"population"`
	// GoRedisPool describes redis_rate's connection pool.
	GoRedisPool string        `json:"goredis_pool"`
	Redis       []Measurement `json:"redis"`
	InProcess   []InProcess   `json:"in_process"`
	// InProcessRounds is how many times each in-process benchmark ran; the
	// median round is kept.
	InProcessRounds int `json:"in_process_rounds,omitempty"`
	// HTTP is the HTTP load test of the demo, when it ran.
	HTTP *HTTPRun `json:"http,omitempty"`
	// Notes are remarks the run adds to the report (e.g. a benchmark that
	// could not run and why).
	Notes []string `json:"notes,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPU        string `json:"cpu"`
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	Go         string `json:"go"`
	Redis      string `json:"redis"`
	// LoadBefore and LoadAfter are /proc/loadavg at the start and the end:
	// other work on the machine shows there.
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
}

// Measurement is one contender on one shape at one concurrency.
type Measurement struct {
	Shape      string `json:"shape"`
	ShapeTitle string `json:"shape_title"`
	// Keys is the number of keys a decision of sluice's store checks;
	// Windows the number of windows it decides, more than Keys where
	// sliding-log windows share a log (docs/adr/015; absent from runs
	// before it, where the two were equal).
	Keys        int    `json:"keys"`
	Windows     int    `json:"windows,omitempty"`
	Hot         bool   `json:"hot,omitempty"`
	Contender   string `json:"contender"`
	Sluice      bool   `json:"sluice"`
	Concurrency int    `json:"concurrency"`
	// Population is the number of clients the measurement cycled through.
	Population int `json:"population,omitempty"`
	// Rounds is how many rounds ran; FailedRounds how many of them saw an
	// error and were set aside (FirstError then says why). The
	// measurement is the median of the others.
	Rounds       int `json:"rounds,omitempty"`
	FailedRounds int `json:"failed_rounds,omitempty"`

	Ops        int64   `json:"ops"`
	Allowed    int64   `json:"allowed"`
	Refused    int64   `json:"refused"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	PerSecond  float64 `json:"per_second"`
	// Latencies, in microseconds.
	P50  float64 `json:"p50_us"`
	P99  float64 `json:"p99_us"`
	P999 float64 `json:"p999_us"`
	Max  float64 `json:"max_us"`

	// What Redis says: script calls and their server time (INFO
	// commandstats, reset after the warm-up), other top-level commands,
	// the keys left and the memory they take (used_memory over the empty
	// server's, read once the client is gone, and the mean MEMORY USAGE of
	// sampled keys).
	ScriptCalls  int64 `json:"script_calls"`
	ScriptMicros int64 `json:"script_us"`
	OtherCalls   int64 `json:"other_calls"`
	OtherMicros  int64 `json:"other_us"`
	DBKeys       int64 `json:"db_keys"`
	// ClientCPU and RedisCPU are the processor time, in microseconds, the
	// tool's process (the clients, sluice included) and Redis used over
	// the measured period.
	ClientCPU  float64 `json:"client_cpu_us"`
	RedisCPU   float64 `json:"redis_cpu_us"`
	UsedMemory int64   `json:"used_memory"`
	KeyBytes   float64 `json:"key_bytes"`
	// StoreCalls is, for a contender built on sluice's Limiter, the calls
	// it made to its primary store over the measured period, by operation
	// (ports.StoreOp's names: "evaluate", "allot", "settle"...), as its
	// Recorder counted them: a batch of coalesced decisions is one call,
	// an allotment taken one, its unspent units given back one more.
	// Null for the other contenders.
	StoreCalls map[string]int64 `json:"store_calls"`
	// StoreMicros is those calls' latencies summed, in microseconds, by
	// operation, as the Limiter timed them (queueing in the client
	// included).
	StoreMicros map[string]float64 `json:"store_us,omitempty"`
}

// StoreCallMean is the mean latency of the Limiter's store calls of
// operation op (every operation when op is empty), in microseconds; 0
// when it made none.
func (m *Measurement) StoreCallMean(op string) float64 {
	var n int64
	var us float64
	for o, calls := range m.StoreCalls {
		if op == "" || o == op {
			n, us = n+calls, us+m.StoreMicros[o]
		}
	}
	if n == 0 {
		return 0
	}
	return us / float64(n)
}

// StoreCallsPerDecision is how many calls a Limiter made to its store
// per decision, in all and of operation op (every operation when op is
// empty); 0 for a contender that counts none.
func (m *Measurement) StoreCallsPerDecision(op string) float64 {
	if m.Ops == 0 {
		return 0
	}
	var n int64
	for o, calls := range m.StoreCalls {
		if op == "" || o == op {
			n += calls
		}
	}
	return float64(n) / float64(m.Ops)
}

// CallsPerDecision is how many commands Redis ran per decision.
func (m *Measurement) CallsPerDecision() float64 {
	if m.Ops == 0 {
		return 0
	}
	return float64(m.ScriptCalls+m.OtherCalls) / float64(m.Ops)
}

// storeCallsText lists StoreCalls per decision by operation, allot,
// settle and evaluate first: "allot 0.00002, settle 0.00001".
func (m *Measurement) storeCallsText() string {
	if len(m.StoreCalls) == 0 {
		return "none"
	}
	ops := slices.Collect(maps.Keys(m.StoreCalls))
	rank := func(op string) int {
		if i := slices.Index([]string{"allot", "settle", "evaluate"}, op); i >= 0 {
			return i
		}
		return 3
	}
	slices.SortFunc(ops, func(a, b string) int { return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a, b)) })
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = fmt.Sprintf("%s %.5f", op, m.StoreCallsPerDecision(op))
	}
	return strings.Join(out, ", ")
}

// ClientCPUPerDecision is the client process' processor time per
// decision, in microseconds.
func (m *Measurement) ClientCPUPerDecision() float64 { return m.perOp(m.ClientCPU) }

// RedisCPUPerDecision is Redis' processor time per decision, in
// microseconds: its commands, and the network and protocol work around
// them.
func (m *Measurement) RedisCPUPerDecision() float64 { return m.perOp(m.RedisCPU) }

func (m *Measurement) perOp(v float64) float64 {
	if m.Ops == 0 {
		return 0
	}
	return v / float64(m.Ops)
}

// MicrosPerCall is Redis' own time per script call, or per command for a
// contender that runs no script (envoyproxy/ratelimit's INCRBY and
// EXPIRE).
func (m *Measurement) MicrosPerCall() float64 {
	if m.ScriptCalls == 0 {
		if m.OtherCalls == 0 {
			return 0
		}
		return float64(m.OtherMicros) / float64(m.OtherCalls)
	}
	return float64(m.ScriptMicros) / float64(m.ScriptCalls)
}

// RefusedShare is the fraction of decisions refused.
func (m *Measurement) RefusedShare() float64 {
	if m.Ops == 0 {
		return 0
	}
	return float64(m.Refused) / float64(m.Ops)
}

// InProcess is one in-process Go benchmark.
type InProcess struct {
	Shape       string  `json:"shape"`
	Contender   string  `json:"contender"`
	Sluice      bool    `json:"sluice"`
	Parallel    bool    `json:"parallel"`
	N           int     `json:"n"`
	NsPerOp     float64 `json:"ns_per_op"`
	AllocsPerOp int64   `json:"allocs_per_op"`
	BytesPerOp  int64   `json:"bytes_per_op"`
}

// Duration is a time.Duration that reads and writes as "5s" in JSON.
type Duration time.Duration

// String is time.Duration's.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText writes the duration as time.Duration.String does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads what time.ParseDuration reads.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

// Save writes the run as indented JSON.
func (r *Run) Save(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Load reads a run saved by Save.
func Load(path string) (*Run, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Run
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// perPoint says how long each measurement lasted.
func (r *Run) perPoint() string {
	if r.Ops > 0 {
		return fmt.Sprintf("%d requests", r.Ops)
	}
	return r.Duration.String()
}

// find returns the measurement of contender on shape at concurrency c.
func (r *Run) find(shape, contender string, c int) *Measurement {
	for i := range r.Redis {
		m := &r.Redis[i]
		if m.Shape == shape && m.Contender == contender && m.Concurrency == c {
			return m
		}
	}
	return nil
}

// findInProcess returns an in-process benchmark.
func (r *Run) findInProcess(shape, contender string, parallel bool) *InProcess {
	for i := range r.InProcess {
		b := &r.InProcess[i]
		if b.Shape == shape && b.Contender == contender && b.Parallel == parallel {
			return b
		}
	}
	return nil
}

// shapes returns the shapes in run order, each with its contenders in
// run order.
func (r *Run) shapes() []shapeInfo {
	var out []shapeInfo
	idx := map[string]int{}
	for _, m := range r.Redis {
		i, ok := idx[m.Shape]
		if !ok {
			i = len(out)
			idx[m.Shape] = i
			out = append(out, shapeInfo{name: m.Shape, title: m.ShapeTitle, keys: m.Keys, hot: m.Hot})
		}
		s := &out[i]
		if !containsName(s.contenders, m.Contender) {
			s.contenders = append(s.contenders, contender{m.Contender, m.Sluice})
		}
	}
	return out
}

type shapeInfo struct {
	name, title string
	keys        int
	hot         bool
	contenders  []contender
}

type contender struct {
	name   string
	sluice bool
}

// peer returns the shape's reference peer: its first contender that is
// not sluice's.
func (s *shapeInfo) peer() string {
	for _, c := range s.contenders {
		if !c.sluice {
			return c.name
		}
	}
	return ""
}

func containsName(cs []contender, name string) bool {
	for _, c := range cs {
		if c.name == name {
			return true
		}
	}
	return false
}
