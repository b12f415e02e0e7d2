package main

import (
	"cmp"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/envoyrls"
	"github.com/sluicehq/sluice/app"
)

// demoRoutes are the routes examples/demo exposes (its ServeMux patterns
// and gRPC methods), whose boot check refuses a profile missing.
const demoRoutes = "testdata/demo-routes.txt"

// TestCheckRefusesWhatTheServiceRefuses: over the project's bad
// configurations (app's adversarial files, the demo's configuration
// without a profile, sluice-rls's invalid files, and cmd/sluice's own),
// check fails with exit status 1 and prints every message the services'
// loaders return, each line prefixed with the file and, where the field
// is written, its line.
func TestCheckRefusesWhatTheServiceRefuses(t *testing.T) {
	secret := newSecret(t)
	env := map[string]string{"RATE_LIMIT_HMAC_SECRET": secret}
	withSecret := func(k string) (string, bool) {
		if k == app.EnvHMACSecret {
			return secret, true
		}
		return "", false
	}
	type badFile struct {
		file     string
		envoy    bool
		exposed  string // an -expose-file
		wantLine int    // the line of the first error, when the field is written
	}
	var files []badFile
	for _, pattern := range []string{"../../app/testdata/adversarial/*.yaml", "testdata/bad/*.yaml"} {
		m, err := filepath.Glob(pattern)
		require.NoError(t, err)
		require.NotEmpty(t, m, pattern)
		for _, f := range m {
			files = append(files, badFile{file: f})
		}
	}
	envoyBad, err := filepath.Glob("../../adapters/envoyrls/testdata/invalid/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, envoyBad)
	for _, f := range envoyBad {
		files = append(files, badFile{file: f, envoy: true})
	}
	files = append(files, badFile{file: "../../examples/demo/testdata/missing-profile.yaml", exposed: demoRoutes, wantLine: 19})
	lines := map[string]int{
		"bad/unknown-field.yaml": 7, "bad/zero-limit.yaml": 9, "bad/bad-duration.yaml": 8, "bad/plan-over-ceiling.yaml": 13,
		"bad/route-twice.yaml": 10, "bad/secret-short.yaml": 3, "bad/not-yaml.yaml": 3,
		"invalid/unknown-field.yaml": 6, "invalid/unlimited.yaml": 8, "invalid/bad-unit.yaml": 5, "invalid/missing-key.yaml": 2,
	}
	for i := range files {
		if n, ok := lines[filepath.Base(filepath.Dir(files[i].file))+"/"+filepath.Base(files[i].file)]; ok {
			files[i].wantLine = n
		}
	}
	for _, f := range files {
		t.Run(filepath.Base(filepath.Dir(f.file))+"/"+filepath.Base(f.file), func(t *testing.T) {
			t.Parallel()
			env, lookup := env, withSecret
			if strings.HasPrefix(filepath.Base(f.file), "secret-") {
				// The file's own secret is the one checked: none in the
				// environment, whose secret would win.
				env, lookup = nil, func(string) (string, bool) { return "", false }
			}
			// What the service says: the loaders it calls at boot.
			var serviceErr error
			args := []string{"check"}
			if f.envoy {
				_, serviceErr = envoyrls.LoadConfig(f.file)
				args = append(args, "-envoy-config", f.file)
			} else {
				data, err := os.ReadFile(f.file)
				require.NoError(t, err)
				var cfg app.Config
				cfg, serviceErr = app.ParseConfig(data, lookup)
				args = append(args, "-config", f.file)
				if serviceErr == nil && f.exposed != "" {
					routes, err := readRoutes(f.exposed)
					require.NoError(t, err)
					serviceErr = cfg.CheckRoutes(routes)
					args = append(args, "-expose-file", f.exposed)
				}
			}
			require.Error(t, serviceErr, "the service refuses this file")

			r := sluice(t, env, "", args...)
			assert.Equal(t, exitInvalid, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
			for _, line := range strings.Split(serviceErr.Error(), "\n") {
				assert.Contains(t, r.stderr, line, "the service's own message")
			}
			first := strings.SplitN(r.stderr, "\n", 2)[0]
			assert.True(t, strings.HasPrefix(first, f.file+":"), "names the file: %s", first)
			if f.wantLine > 0 {
				assert.True(t, strings.HasPrefix(first, f.file+":"+strconv.Itoa(f.wantLine)+": "), "names line %d: %s", f.wantLine, first)
			}
			assert.Contains(t, r.stderr, "the service would refuse to boot")

			if f.wantLine == 0 {
				return
			}
			// JSON: the same errors, each with its file.
			r = sluice(t, env, "", append(args, "-json")...)
			assert.Equal(t, exitInvalid, r.code)
			var out checkOut
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
			assert.False(t, out.Valid)
			require.NotEmpty(t, out.Errors)
			for _, e := range out.Errors {
				assert.Equal(t, f.file, e.File)
				assert.Contains(t, serviceErr.Error(), strings.SplitN(e.Message, "\n", 2)[0])
			}
		})
	}
}

// TestCheckPassesTheShippedConfigurations: the demo's, app's full one and
// sluice-rls's deploy files are valid; the report lists profiles, plans,
// routes, domains and the memory needed, and warns.
func TestCheckPassesTheShippedConfigurations(t *testing.T) {
	env := map[string]string{"RATE_LIMIT_HMAC_SECRET": newSecret(t)}
	r := sluice(t, env, "", "check", "-config", demoConfig, "-expose-file", demoRoutes, "-envoy-config", "../../deploy/envoy/config", "-identities", "1000", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var out checkOut
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	assert.True(t, out.Valid)
	names := map[string]profOut{}
	for _, p := range out.Profiles {
		names[p.Name] = p
	}
	assert.Len(t, names, 6)
	assert.Equal(t, []string{"GET /api/v1/search"}, names["search"].Routes)
	assert.Equal(t, 5, names["search"].Keys, "ip, user burst, user gcra, the tenant's shared log, the tenant-global log")
	require.Len(t, out.Plans, 2)
	assert.Equal(t, "pro", out.Plans[0].Name)
	for _, rt := range out.Exposed {
		assert.NotEmpty(t, rt.Profile, rt.Route)
	}
	for _, w := range out.Warnings {
		assert.NotContains(t, w, "limits none of the exposed routes", "the demo exposes a route of every profile")
	}
	r = sluice(t, env, "", "check", "-config", demoConfig, "-expose", "GET /api/v1/search")
	require.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "warning: profile login limits none of the exposed routes")
	require.Len(t, out.Domains, 1)
	assert.Equal(t, "edge", out.Domains[0].Domain)
	require.NotNil(t, out.Memory)
	assert.Equal(t, int64(1000), out.Memory.Identities)
	// At 1000 identities the memory is 1000 times one identity's.
	r2 := sluice(t, env, "", "check", "-config", demoConfig, "-envoy-config", "../../deploy/envoy/config", "-identities", "2000", "-json")
	var out2 checkOut
	require.NoError(t, json.Unmarshal([]byte(r2.stdout), &out2))
	assert.Equal(t, 2*out.Memory.Bytes, out2.Memory.Bytes)
	assert.NotEmpty(t, out.Warnings, "the demo sets no redis_memory_budget_mb")

	for _, f := range []string{"../../app/testdata/full.yaml", "../../app/testdata/reservations.yaml"} {
		r := sluice(t, env, "", "check", "-config", f)
		assert.Equal(t, exitOK, r.code, "%s: %s", f, r.stderr)
		assert.Regexp(t, regexp.MustCompile(`(?m)^valid$`), r.stdout)
	}

}

// TestCheckReportsTheEnvironmentApart: check validates the file whatever
// the environment holds. Without RATE_LIMIT_HMAC_SECRET (a CI step) the
// file is valid, with a warning; a malformed secret in the environment is
// exit status 3 even for a valid file; a secret the file writes is part
// of the file.
func TestCheckReportsTheEnvironmentApart(t *testing.T) {
	cases := []struct {
		name, file, secret string
		code               int
		hmac               string
		want               string // in the output
	}{
		{"no secret, as in CI", demoConfig, "", exitOK, "missing", "warning: RATE_LIMIT_HMAC_SECRET is not set: the file was checked without it"},
		{"a valid secret", demoConfig, newSecret(t), exitOK, "set", "valid"},
		{"a malformed secret", demoConfig, "not-hex", exitSecret, "invalid", "environment: RATE_LIMIT_HMAC_SECRET: "},
		{"a malformed secret beside an invalid file", "testdata/bad/zero-limit.yaml", "not-hex", exitInvalid, "invalid", "zero-limit.yaml:9:"},
		{"no secret and an invalid file", "testdata/bad/zero-limit.yaml", "", exitInvalid, "missing", "zero-limit.yaml:9:"},
		{"the file's own secret, short", "testdata/bad/secret-short.yaml", "", exitInvalid, "in the file", "secret-short.yaml:3:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var env map[string]string
			if c.secret != "" {
				env = map[string]string{"RATE_LIMIT_HMAC_SECRET": c.secret}
			}
			r := sluice(t, env, "", "check", "-config", c.file)
			assert.Equal(t, c.code, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
			assert.Contains(t, r.stdout+r.stderr, c.want)
			if c.code == exitOK {
				assert.Regexp(t, regexp.MustCompile(`(?m)^valid$`), r.stdout)
			}
			r = sluice(t, env, "", "check", "-config", c.file, "-json")
			assert.Equal(t, c.code, r.code)
			var out checkOut
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
			require.NotNil(t, out.Environment)
			assert.Equal(t, c.hmac, out.Environment.HMACSecret)
			assert.Equal(t, c.file != demoConfig, !out.Valid, "valid is the file's alone")
			assert.NotContains(t, r.stdout+r.stderr, "not-hex", "the secret is never printed")
		})
	}
	r := sluice(t, nil, "", "check", "-config", demoConfig, "-skip-secret")
	assert.Equal(t, exitUsage, r.code, "-skip-secret is gone: the file is always checked apart")
}

// TestCheckReadsTheEnvoyFilesAsSluiceRLSWould: envoyproxy/ratelimit's own
// example file holds an unlimited descriptor and a block list; sluice-rls
// loads it only with -accept-unlimited, and so does check, which then
// shows those descriptors for what they are and counts no memory for them.
func TestCheckReadsTheEnvoyFilesAsSluiceRLSWould(t *testing.T) {
	const example = "../../adapters/envoyrls/testdata/peer/examples/example.yaml"
	r := sluice(t, nil, "", "check", "-envoy-config", example)
	assert.Equal(t, exitInvalid, r.code, r.stdout)
	assert.Contains(t, r.stderr, "example.yaml: domain rl: descriptor foo.bar_banned:")
	assert.Contains(t, r.stderr, "-accept-unlimited")

	r = sluice(t, nil, "", "check", "-envoy-config", example, "-accept-unlimited", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var out checkOut
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	algorithms := map[string]string{}
	for _, d := range out.Domains {
		for _, l := range d.Limits {
			algorithms[l.Descriptor] = l.Algorithm
		}
	}
	assert.Equal(t, "block", algorithms["foo,bar=banned"])
	assert.Equal(t, "unlimited", algorithms["qux"])
	assert.Equal(t, "sliding_log", algorithms["unspec"])
}

// TestCheckFindsEnvoyDescriptorsThatReachNoLimit: given Envoy's
// bootstrap beside sluice-rls's files, check lists what each rate_limits
// entry's descriptor reaches, and warns on one that reaches no limit.
// The shipped example before issue 38 (a copy in testdata) sent
// [tenant, remote_address] to a file with remote_address at the top
// level: limited nowhere. The fixed one reaches a limit with every
// descriptor, and explain agrees with both.
func TestCheckFindsEnvoyDescriptorsThatReachNoLimit(t *testing.T) {
	const old = "testdata/envoy-unreachable"
	r := sluice(t, nil, "", "check", "-envoy-config", old+"/config", "-envoy-routes", old+"/envoy.yaml")
	require.Equal(t, exitOK, r.code, "sluice-rls loads the files: a warning, not an error: %s", r.stderr)
	assert.Contains(t, r.stdout, "warning: "+old+"/envoy.yaml:31: the rate_limits descriptor [tenant=<header x-tenant>,remote_address=<client address>] (listener ingress, virtual host backend, route 0 (prefix /)) reaches no limit of domain edge")
	assert.Contains(t, r.stdout, "remote_address is a top-level descriptor: send it in a rate_limits entry of its own, or nest it under tenant")
	assert.Equal(t, 1, strings.Count(r.stdout, "reaches no limit of domain"), "the other two reach theirs")

	const shipped = "../../deploy/envoy"
	r = sluice(t, nil, "", "check", "-envoy-config", shipped+"/config", "-envoy-routes", shipped+"/envoy.yaml", "-json")
	require.Equal(t, exitOK, r.code, r.stderr)
	var out checkOut
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	reaches := map[string][]string{}
	for _, l := range out.EnvoyLimits {
		assert.Equal(t, "edge", l.Domain)
		assert.Empty(t, l.Note, l.Descriptor)
		for _, x := range l.Reaches {
			reaches[l.Descriptor] = append(reaches[l.Descriptor], x.Limit+" "+x.Rate+" "+x.When)
		}
	}
	assert.Equal(t, map[string][]string{
		"tenant=<header x-tenant>":                                 {"edge.tenant 1000/minute "},
		"tenant=<header x-tenant>,remote_address=<client address>": {"edge.tenant.remote_address 100/minute "},
		"path=<header :path>":                                      {"edge.path_/api/* 50/second path=/api/*"},
	}, reaches)
	for _, w := range out.Warnings {
		assert.NotContains(t, w, "rate_limits", "the shipped example has no unreachable descriptor")
	}

	// explain walks the same tree.
	env := map[string]string{"RATE_LIMIT_HMAC_SECRET": newSecret(t)}
	pair := []string{"explain", "-domain", "edge", "-descriptor", "tenant=a,remote_address=1.2.3.4"}
	r = sluice(t, env, "", append(pair, "-envoy-config", old+"/config")...)
	assert.Equal(t, exitUnknown, r.code, r.stderr)
	r = sluice(t, env, "", append(pair, "-envoy-config", shipped+"/config")...)
	assert.Equal(t, exitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "per_ip")
}

// TestCheckReadsEnvoyRouteConfigurations: a RouteConfiguration on its own
// (JSON, lowerCamelCase, as protojson writes it) is checked against every
// configured domain; beside the bootstrap that loads it by RDS, against
// the domain of the rate-limit filter of each entry's stage. A fixed
// value, a descriptor whose optional entry may be absent, a domain
// sluice-rls does not configure, a stage no filter has and an extension
// are each reported for what they are.
func TestCheckReadsEnvoyRouteConfigurations(t *testing.T) {
	const routes, bootstrap = "testdata/envoy-routes/routes.json", "testdata/envoy-routes/bootstrap-rds.yaml"
	type row struct{ domain, descriptor, reaches string }
	rows := func(t *testing.T, files ...string) ([]row, []string) {
		args := []string{"check", "-envoy-config", envoyDir, "-json"}
		for _, f := range files {
			args = append(args, "-envoy-routes", f)
		}
		r := sluice(t, nil, "", args...)
		require.Equal(t, exitOK, r.code, r.stderr)
		var out checkOut
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
		var got []row
		for _, l := range out.EnvoyLimits {
			var rs []string
			for _, x := range l.Reaches {
				rs = append(rs, x.Limit)
			}
			got = append(got, row{l.Domain, l.Descriptor, cmp.Or(strings.Join(rs, ","), l.Note)})
		}
		return got, out.Warnings
	}
	const (
		tenant   = "tenant=<header x-tenant>"
		path     = "path=<header :path>"
		addr     = "remote_address=<client address>"
		noLimit  = "reaches no limit"
		apiLimit = "edge.path_/api/*"
		ext      = "an action check does not know (an extension, or a newer Envoy's): not checked"
	)
	t.Run("alone", func(t *testing.T) {
		got, warnings := rows(t, routes)
		assert.Equal(t, []row{
			{"edge", tenant, "edge.tenant"},
			{"edge", path, apiLimit},
			{"edge", "generic_key=checkout", noLimit},
			{"edge", tenant + "," + path, noLimit},
			{"edge", path, apiLimit},
			{"edge", addr, noLimit},
			{"edge", addr, noLimit},
			{"", "?=<extension>", ext},
		}, got)
		assert.Len(t, warnings, 4, "%q", warnings)
	})
	t.Run("with the bootstrap that loads it", func(t *testing.T) {
		got, warnings := rows(t, routes, bootstrap)
		assert.Equal(t, []row{
			{"edge", tenant, "edge.tenant"},
			{"edge", path, apiLimit},
			{"edge", "generic_key=checkout", noLimit},
			{"edge", tenant + "," + path, noLimit},
			{"edge", path, apiLimit},
			{"nope", addr, "domain not configured: sluice-rls answers OK to every descriptor of it"},
			{"", addr, "never sent: no envoy.filters.http.ratelimit filter of its connection manager has stage 2"},
			{"", "?=<extension>", ext},
		}, got)
		all := strings.Join(warnings, "\n")
		assert.Contains(t, all, routes+":15: the rate_limits descriptor [generic_key=checkout]")
		assert.Contains(t, all, "generic_key matches no descriptor declared at the top level (declared there: path, tenant)")
		assert.Contains(t, all, routes+":16: the rate_limits descriptor ["+tenant+","+path+"]")
		assert.Contains(t, all, `sends domain "nope", which -envoy-config does not configure`)
		assert.Contains(t, all, routes+":21: the rate_limits descriptor ["+addr+"] (route configuration edge_routes, virtual host api, route 0 (prefix /api/)) is never sent")
	})
	r := sluice(t, nil, "", "check", "-envoy-routes", routes, "-config", demoConfig)
	assert.Equal(t, exitUsage, r.code, "-envoy-routes needs -envoy-config")
	r = sluice(t, nil, "", "check", "-envoy-config", envoyDir, "-envoy-routes", demoConfig)
	assert.Equal(t, exitUsage, r.code, "not an Envoy file")
	assert.Contains(t, r.stderr, "neither a bootstrap")
}
