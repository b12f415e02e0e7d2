package server

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestSnapshotCountsScriptsApartFromTheirCommands runs scripts that call
// the commands sluice's scripts call (EXISTS and ZCOUNT among them, which
// v2 sends for keys it finds empty) and one command a client sends itself:
// Calls counts that one alone, ScriptCalls the scripts.
func TestSnapshotCountsScriptsApartFromTheirCommands(t *testing.T) {
	s := Attach(redistest.Standalone(t))
	ctx := context.Background()
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	const script = `redis.call('MGET', KEYS[1], KEYS[2])
redis.call('EXISTS', KEYS[1])
redis.call('ZCOUNT', KEYS[2], 0, '+inf')
redis.call('TYPE', KEYS[2])
redis.call('SET', KEYS[1], 1, 'PX', 1000)
redis.call('ZADD', KEYS[2], 1, 'm')
redis.call('PEXPIRE', KEYS[2], 1000)
return 1`
	for range 3 {
		if _, err := s.do(ctx, "EVAL", script, "2", "{t}a", "{t}b"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.do(ctx, "PING"); err != nil {
		t.Fatal(err)
	}
	st, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ScriptCalls != 3 || st.Calls != 1 || st.Keys != 2 {
		t.Errorf("%d script calls, %d other calls, %d keys; want 3, 1 (the PING), 2", st.ScriptCalls, st.Calls, st.Keys)
	}
}
