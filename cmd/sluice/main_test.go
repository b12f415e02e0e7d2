package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/cmdtest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// bin is the sluice binary the tests run, built once by TestMain as a
// release is built (internal/cmdtest: static, as make image builds its
// binaries; with coverage under make cover).
var bin string

func TestMain(m *testing.M) {
	var err error
	if bin, err = cmdtest.Binary("sluice"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := redistest.Run(m)
	cmdtest.RemoveBinary()
	os.Exit(code)
}

// result is one run of the binary.
type result struct {
	code           int
	stdout, stderr string
}

// sluice runs the binary with args, env (added to a clean environment:
// no REDIS_URL or secret unless given) and stdin.
func sluice(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Env = cmdtest.Env([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()})
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running sluice: %v", err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// newSecret returns a fresh HMAC secret.
func newSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

// unique returns a name no other test run uses.
func unique(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

const (
	demoConfig = "../../examples/demo/sluice.yaml"
	envoyDir   = "testdata/envoy"
)

// TestHelpOfEverySubcommand: --help succeeds and documents the exit codes.
func TestHelpOfEverySubcommand(t *testing.T) {
	for _, sub := range []string{"check", "explain", "peek", "reset"} {
		r := sluice(t, nil, "", sub, "--help")
		assert.Equal(t, exitOK, r.code, sub)
		assert.Contains(t, r.stderr, "Usage: sluice "+sub, sub)
		assert.Contains(t, r.stderr, "Exit codes:", sub)
		assert.Contains(t, r.stderr, "4  the store is unreachable", sub)
		assert.Contains(t, r.stderr, "8  reset deleted nothing", sub)
	}
	r := sluice(t, nil, "", "check", "--help")
	assert.Contains(t, r.stderr, "without\nRATE_LIMIT_HMAC_SECRET (a CI step has no production secret) the file is\nchecked, and a warning says the secret was not")
	assert.Contains(t, r.stderr, "-envoy-routes")
	r = sluice(t, nil, "", "reset", "--help")
	assert.Contains(t, r.stderr, "once before any key is deleted (phase=begun)")
	assert.Contains(t, r.stderr, "None deleted exits 8")
	r = sluice(t, nil, "")
	assert.Equal(t, exitUsage, r.code)
	assert.Contains(t, r.stderr, "Exit codes:")
	r = sluice(t, nil, "", "frobnicate")
	assert.Equal(t, exitUsage, r.code)
	r = sluice(t, nil, "", "check", "-no-such-flag")
	assert.Equal(t, exitUsage, r.code)
}

// TestExplainShowsPseudonymisedKeysAndSlots: explain resolves the profile
// and plan, and prints each window's key, never the raw id, with the
// key's Redis Cluster hash slot.
func TestExplainShowsPseudonymisedKeysAndSlots(t *testing.T) {
	env := map[string]string{"RATE_LIMIT_HMAC_SECRET": newSecret(t)}
	r := sluice(t, env, "", "explain", "-config", demoConfig, "-route", "GET /api/v1/search",
		"-user", "alice@example.org", "-tenant", "globex", "-ip", "203.0.113.9", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.NotContains(t, r.stdout, "alice")
	assert.NotContains(t, r.stdout, "globex")
	assert.NotContains(t, r.stdout, "203.0.113.9")
	var out decisionOut
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	assert.Equal(t, "search", out.Profile)
	assert.Equal(t, "pro", out.Plan, "globex is on the pro plan")
	require.Len(t, out.Windows, 6)
	byName := map[string]windowOut{}
	for _, w := range out.Windows {
		byName[w.Dimension+"/"+w.Window] = w
		assert.Equal(t, redistest.KeySlot(w.Key), int(w.Slot), w.Key)
		assert.True(t, strings.HasPrefix(w.Key, "rl:{"), w.Key)
	}
	assert.Equal(t, int64(50), byName["user/burst"].Limit, "the plan's ten times 5")
	assert.Equal(t, "gcra", byName["user/sustained"].Algorithm)
	assert.True(t, byName["tenant/burst"].SharedKey, "the tenant's sliding logs share one key")
	assert.Equal(t, byName["tenant/burst"].Key, byName["tenant/sustained"].Key)

	// Another secret names other keys.
	env2 := map[string]string{"RATE_LIMIT_HMAC_SECRET": newSecret(t)}
	r2 := sluice(t, env2, "", "explain", "-config", demoConfig, "-route", "GET /api/v1/search", "-user", "alice@example.org", "-tenant", "globex", "-json")
	require.Equal(t, exitOK, r2.code, r2.stderr)
	var out2 decisionOut
	require.NoError(t, json.Unmarshal([]byte(r2.stdout), &out2))
	assert.NotEqual(t, byName["user/burst"].Key, out2.Windows[0].Key)

	// The table names the same.
	r = sluice(t, env, "", "explain", "-config", demoConfig, "-route", "GET /api/v1/search", "-user", "alice@example.org")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "profile search")
	assert.Contains(t, r.stdout, "ip windows left out")
	assert.NotContains(t, r.stdout, "alice")

	// sluice-rls's descriptors.
	r = sluice(t, env, "", "explain", "-envoy-config", envoyDir, "-domain", "edge", "-descriptor", "tenant=acme", "-descriptor", "path=/api/x", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out.Windows, 2)
	assert.Equal(t, "tenant", out.Windows[0].Window)
	assert.Equal(t, "api", out.Windows[1].Window)
	assert.Equal(t, out.Windows[0].Slot, out.Windows[1].Slot, "hash_tag_key tenant: one slot")
	assert.NotContains(t, r.stdout, "acme")
}

// TestExitCodes: a wrong secret, an unreachable or missing store, an
// unknown route, domain or descriptor, a malformed identity and a missing
// argument each have their code.
func TestExitCodes(t *testing.T) {
	secret := newSecret(t)
	redisURL := redistest.StandaloneURL(t)
	closed := closedPort(t)
	cases := []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string
	}{
		{"secret missing", map[string]string{"REDIS_URL": redisURL}, []string{"peek", "-config", demoConfig, "-user", "u"}, exitSecret, "HMAC secret missing"},
		{"secret malformed", map[string]string{"RATE_LIMIT_HMAC_SECRET": "not-hex"}, []string{"explain", "-config", demoConfig, "-route", "GET /api/v1/search"}, exitSecret, "64 hex characters"},
		{"redis unreachable", map[string]string{"RATE_LIMIT_HMAC_SECRET": secret, "REDIS_URL": "redis://" + closed}, []string{"peek", "-config", demoConfig, "-user", "u", "-dial-timeout", "1s"}, exitStore, "store unreachable"},
		{"no store", map[string]string{"RATE_LIMIT_HMAC_SECRET": secret}, []string{"reset", "-config", demoConfig, "-user", "u", "-actor", "a", "-yes"}, exitStore, "no store"},
		{"unknown route", map[string]string{"RATE_LIMIT_HMAC_SECRET": secret}, []string{"explain", "-config", demoConfig, "-route", "GET /api/v1/nope"}, exitUnknown, "profile_missing"},
		{"unknown route on peek", map[string]string{"RATE_LIMIT_HMAC_SECRET": secret, "REDIS_URL": redisURL}, []string{"peek", "-config", demoConfig, "-route", "GET /nope", "-user", "u"}, exitUnknown, "profile_missing"},
		{"unknown domain", map[string]string{"RATE_LIMIT_HMAC_SECRET": secret}, []string{"explain", "-envoy-config", envoyDir, "-domain", "nope", "-descriptor", "tenant=a"}, exitUnknown, "no configured domain"},
		{"descriptor without limit", map[string]string{"RATE_LIMIT_HMAC_SECRET": secret}, []string{"explain", "-envoy-config", envoyDir, "-domain", "edge", "-descriptor", "colour=red"}, exitUnknown, "no descriptor matches a limit"},
		{"bad ip", map[string]string{"RATE_LIMIT_HMAC_SECRET": secret}, []string{"explain", "-config", demoConfig, "-route", "GET /api/v1/search", "-ip", "300.1.1.1"}, exitBadIdentity, "-ip"},
		{"reset without actor", map[string]string{"RATE_LIMIT_HMAC_SECRET": secret, "REDIS_URL": redisURL}, []string{"reset", "-config", demoConfig, "-user", "u"}, exitUsage, "-actor"},
		{"reset of an unknown profile", map[string]string{"RATE_LIMIT_HMAC_SECRET": secret, "REDIS_URL": redisURL}, []string{"reset", "-config", demoConfig, "-user", "u", "-actor", "a", "-profile", "nope"}, exitUnknown, "no profile of that name"},
		{"peek without identity", map[string]string{"RATE_LIMIT_HMAC_SECRET": secret, "REDIS_URL": redisURL}, []string{"peek", "-config", demoConfig}, exitUsage, "identity"},
		{"invalid configuration", map[string]string{"RATE_LIMIT_HMAC_SECRET": secret}, []string{"explain", "-config", "testdata/bad/zero-limit.yaml", "-route", "GET /api/v1/search"}, exitInvalid, "zero-limit.yaml:9:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := sluice(t, c.env, "", c.args...)
			assert.Equal(t, c.code, r.code, "stderr: %s", r.stderr)
			assert.Contains(t, r.stderr, c.want)
		})
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
