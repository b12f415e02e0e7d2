package envoyrls_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/envoyrls"
	"github.com/sluicehq/sluice/domain"
)

// The verdicts of envoyproxy/ratelimit's test/config/config_test.go, on its
// own files (testdata/peer, see its README): what loads, what each
// descriptor matches, and every file it refuses, refused here too with an
// error that names the file.

const peerDir = "testdata/peer/config/"

var acceptUnlimited = envoyrls.LoadOptions{AcceptUnlimited: true}

func loadPeer(t *testing.T, o envoyrls.LoadOptions, names ...string) (*envoyrls.Config, error) {
	t.Helper()
	files := make([]envoyrls.File, 0, len(names))
	for _, n := range names {
		files = append(files, envoyrls.File{Name: n, Data: readFile(t, filepath.Join("testdata/peer", n))})
	}
	return envoyrls.ParseFiles(o, files...)
}

func mustPeer(t *testing.T, o envoyrls.LoadOptions, names ...string) *envoyrls.Config {
	t.Helper()
	cfg, err := loadPeer(t, o, names...)
	require.NoError(t, err)
	return cfg
}

// kv turns key, value pairs into Lookup's entries.
func kv(pairs ...string) [][2]string {
	var es [][2]string
	for i := 0; i+1 < len(pairs); i += 2 {
		es = append(es, [2]string{pairs[i], pairs[i+1]})
	}
	return es
}

// lookupCase is one GetLimit of the peer's tests: the entries, and the
// limit they match ("" path: none).
type lookupCase struct {
	entries [][2]string
	path    string
	rpu     int64
	unit    string
}

func checkLookups(t *testing.T, cfg *envoyrls.Config, dom string, cases []lookupCase) {
	t.Helper()
	for _, c := range cases {
		l, ok := cfg.Lookup(dom, c.entries...)
		if c.path == "" {
			assert.False(t, ok, "%v matches nothing, got %s", c.entries, l.Path)
			continue
		}
		if assert.True(t, ok, "%v", c.entries) {
			assert.Equal(t, c.path, l.Path, "%v", c.entries)
			assert.Equal(t, c.rpu, l.RequestsPerUnit, "%v", c.entries)
			assert.Equal(t, c.unit, l.Unit, "%v", c.entries)
		}
	}
}

// TestPeerBasicConfig is TestBasicConfig: basic_config.yaml, whose key6 is
// unlimited, so it loads with AcceptUnlimited only.
func TestPeerBasicConfig(t *testing.T) {
	_, err := loadPeer(t, envoyrls.LoadOptions{}, "config/basic_config.yaml")
	require.ErrorIs(t, err, envoyrls.ErrUnlimited)
	var fe *envoyrls.FileError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, envoyrls.FileError{File: "config/basic_config.yaml", Domain: "test-domain", Descriptor: "key6", Err: fe.Err}, *fe)

	cfg := mustPeer(t, acceptUnlimited, "config/basic_config.yaml")
	assert.Equal(t, []string{"test-domain"}, cfg.Domains())
	checkLookups(t, cfg, "test-domain", []lookupCase{
		{kv("key1", "something"), "", 0, ""},
		{kv("key1", "value1"), "", 0, ""},
		{kv("key2", "value2", "subkey", "subvalue"), "", 0, ""},
		{kv("key5", "value5", "subkey5", "subvalue"), "", 0, ""},
		{kv("key1", "value1", "subkey1", "something"), "test-domain.key1_value1.subkey1", 5, "SECOND"},
		{kv("key1", "value1", "subkey1", "subvalue1"), "test-domain.key1_value1.subkey1_subvalue1", 10, "SECOND"},
		{kv("key2", "something"), "test-domain.key2", 20, "MINUTE"},
		{kv("key2", "value2"), "test-domain.key2_value2", 30, "MINUTE"},
		{kv("key2", "value3"), "", 0, ""},
		{kv("key3", "foo"), "test-domain.key3", 1, "HOUR"},
		{kv("key4", "foo"), "test-domain.key4", 1, "DAY"},
		{kv("key7", "unspecified_value"), "test-domain.key7", 70, "MINUTE"},
		{kv("key5", "value5", "subkey5", "subvalue5"), "test-domain.key5_value5.subkey5_subvalue5", 25, "DAY"},
	})
	_, ok := cfg.Lookup("foo_domain", kv("key1", "value1")...)
	assert.False(t, ok, "an unknown domain")
	l, _ := cfg.Lookup("test-domain", kv("key3", "foo")...)
	assert.Empty(t, l.Name, "no name in the file")
	l, _ = cfg.Lookup("test-domain", kv("key4", "foo")...)
	assert.Equal(t, "key4_rate_limit", l.Name)
	l, ok = cfg.Lookup("test-domain", kv("key6", "foo")...)
	assert.True(t, ok && l.Unlimited, "key6 is unlimited")
}

// TestPeerWildcardConfig is TestWildcardConfig: trailing, middle and
// repeated '*', nested, and what they do not match.
func TestPeerWildcardConfig(t *testing.T) {
	cfg := mustPeer(t, envoyrls.LoadOptions{}, "config/wildcard.yaml")
	checkLookups(t, cfg, "test-domain", []lookupCase{
		{kv("noVal", "foo1"), "test-domain.noVal", 20, "MINUTE"},
		{kv("noVal", "foo2"), "test-domain.noVal", 20, "MINUTE"},
		{kv("wild", "foo1"), "test-domain.wild_foo*", 20, "MINUTE"},
		{kv("wild", "foo2"), "test-domain.wild_foo*", 20, "MINUTE"},
		{kv("wild", "foo"), "test-domain.wild_foo*", 20, "MINUTE"},
		{kv("nestedWild", "val1", "wild", "goo2"), "test-domain.nestedWild_val1.wild_goo*", 20, "MINUTE"},
		{kv("wild", "bar"), "", 0, ""},
		{kv("noWild", "foo1"), "", 0, ""},
		{kv("midWild", "barab"), "test-domain.midWild_bar*b", 20, "MINUTE"},
		{kv("midWild", "bar123b"), "test-domain.midWild_bar*b", 20, "MINUTE"},
		{kv("midWild", "barb"), "test-domain.midWild_bar*b", 20, "MINUTE"},
		{kv("midWild", "bara"), "", 0, ""},
		{kv("midWild", "xbarb"), "", 0, ""},
		{kv("multiWild", "foo123bar456baz"), "test-domain.multiWild_foo*bar*baz", 10, "MINUTE"},
		{kv("multiWild", "foobarbaz"), "test-domain.multiWild_foo*bar*baz", 10, "MINUTE"},
		{kv("multiWild", "foo123baz"), "", 0, ""},
		{kv("multiWild", "bar456baz"), "", 0, ""},
		{kv("multiWild", "foobazbar"), "", 0, ""},
	})
}

// TestPeerShadowModeConfig is TestShadowModeConfig.
func TestPeerShadowModeConfig(t *testing.T) {
	cfg := mustPeer(t, envoyrls.LoadOptions{}, "config/shadowmode_config.yaml")
	for _, c := range []struct {
		entries [][2]string
		rpu     int64
		shadow  bool
	}{
		{kv("key1", "value1", "subkey1", "something"), 5, false},
		{kv("key1", "value1", "subkey1", "subvalue1"), 10, true},
		{kv("key2", "something"), 20, true},
		{kv("key2", "value2"), 30, false},
	} {
		l, ok := cfg.Lookup("test-domain", c.entries...)
		require.True(t, ok, "%v", c.entries)
		assert.Equal(t, c.rpu, l.RequestsPerUnit, "%v", c.entries)
		assert.Equal(t, c.shadow, l.ShadowMode, "%v", c.entries)
	}
}

// TestPeerDomainMerge is TestDomainMerge and TestDuplicateKeyDomainMerge:
// MERGE_DOMAIN_CONFIG merges two files of one domain; the same file twice
// declares a descriptor twice; without the setting, a domain in two files
// is refused.
func TestPeerDomainMerge(t *testing.T) {
	merge := envoyrls.LoadOptions{MergeDomains: true}
	cfg := mustPeer(t, merge, "config/merge_domain_key1.yaml", "config/merge_domain_key2.yaml")
	checkLookups(t, cfg, "test-domain", []lookupCase{
		{kv("key1", "value1"), "test-domain.key1_value1", 10, "MINUTE"},
		{kv("key2", "value2"), "test-domain.key2_value2", 20, "MINUTE"},
	})

	_, err := loadPeer(t, merge, "config/merge_domain_key1.yaml", "config/merge_domain_key1.yaml")
	require.ErrorIs(t, err, envoyrls.ErrDuplicateDescriptor)
	assert.Contains(t, err.Error(), "config/merge_domain_key1.yaml: domain test-domain: descriptor key1_value1: ")

	_, err = loadPeer(t, envoyrls.LoadOptions{}, "config/merge_domain_key1.yaml", "config/merge_domain_key2.yaml")
	require.ErrorIs(t, err, envoyrls.ErrDuplicateDomain)
	assert.Contains(t, err.Error(), "config/merge_domain_key2.yaml: domain test-domain: ")

	// sluice's own fields: in one file of a merged domain, or the same.
	a := envoyrls.File{Name: "a.yaml", Data: []byte("domain: d\nhash_tag_key: tenant\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")}
	b := envoyrls.File{Name: "b.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")}
	c := envoyrls.File{Name: "c.yaml", Data: []byte("domain: d\nhash_tag_key: user\n")}
	_, err = envoyrls.ParseFiles(merge, a, b)
	require.NoError(t, err)
	_, err = envoyrls.ParseFiles(merge, b, a, a)
	require.ErrorIs(t, err, envoyrls.ErrDuplicateDescriptor, "the same descriptor twice")
	_, err = envoyrls.ParseFiles(merge, a, c)
	require.ErrorIs(t, err, envoyrls.ErrDuplicateDomain)
	assert.Contains(t, err.Error(), "c.yaml: domain d: ")
}

// TestPeerShareThreshold is TestShareThreshold's matching: which pattern
// each entry counts as (its limit's cache key in envoyproxy/ratelimit).
func TestPeerShareThreshold(t *testing.T) {
	cfg := mustPeer(t, envoyrls.LoadOptions{}, "config/share_threshold.yaml")
	for _, c := range []struct {
		entries [][2]string
		rpu     int64
		shared  []string
	}{
		{kv("files", "files/a.pdf"), 100, []string{"files/*"}},
		{kv("files", "files/b.csv"), 100, []string{"files/*"}},
		{kv("nested", "parent", "files", "nested/x"), 200, []string{"", "nested/*"}},
		{kv("files", "top/1", "files", "nested/2"), 300, []string{"top/*", "nested/*"}},
		{kv("route", "api/v1", "method", "GET"), 60, []string{"api/*", ""}},
		{kv("service", "svc/a", "endpoint", "e"), 80, []string{"svc/*", ""}},
		{kv("path", "path/a", "file", "file/b", "type", "t"), 120, []string{"path/*", "", ""}},
		{kv("user", "user/a", "resource", "res/b", "action", "get"), 150, []string{"user/*", "res/*", ""}},
		{kv("file", "test1"), 50, nil},
		{kv("file", "test2"), 100, []string{"test*"}},
		{kv("midpath", "/api/x/v1"), 100, []string{"/api*v1"}},
		{kv("multiroute", "svcAepBrpc"), 50, []string{"svc*ep*rpc"}},
		{kv("midroute", "/api/y/v2"), 80, []string{"/api*v2"}},
		{kv("tenant", "t1prod", "resource", "res9v2"), 60, []string{"t*prod", "res*v2"}},
	} {
		l, ok := cfg.Lookup("test-domain", c.entries...)
		require.True(t, ok, "%v", c.entries)
		assert.Equal(t, c.rpu, l.RequestsPerUnit, "%v", c.entries)
		assert.Equal(t, c.shared, l.SharedAs, "%v", c.entries)
	}
	// share_threshold needs a wildcard value.
	_, err := envoyrls.ParseFiles(envoyrls.LoadOptions{}, envoyrls.File{Name: "s.yaml", Data: []byte(
		"domain: s\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")})
	var ce *domain.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "s.descriptors[0].share_threshold", ce.Field)
	assert.Contains(t, err.Error(), "s.yaml: domain s: descriptor k_v: ")
}

// TestPeerMetadata: metadata.yaml loads; a limit carries its
// descriptor's metadata.
func TestPeerMetadata(t *testing.T) {
	cfg := mustPeer(t, envoyrls.LoadOptions{}, "config/metadata.yaml")
	l, ok := cfg.Lookup("test-domain", kv("key1", "value1", "subkey1", "x")...)
	require.True(t, ok)
	assert.Equal(t, "service_1", l.Metadata.Fields["name"].GetStringValue())
	l, ok = cfg.Lookup("test-domain", kv("key1", "value1", "subkey1", "subvalue1")...)
	require.True(t, ok)
	assert.Nil(t, l.Metadata)
	l, ok = cfg.Lookup("test-domain", kv("key2", "x")...)
	require.True(t, ok)
	assert.Equal(t, "service_2", l.Metadata.Fields["service_with_quota"].GetStructValue().Fields["name"].GetStringValue())
}

// TestPeerRefusedFiles: every file envoyproxy/ratelimit refuses is refused,
// the error naming the file, the domain and descriptor where it has them,
// around a *domain.ConfigError naming the field.
func TestPeerRefusedFiles(t *testing.T) {
	cases := []struct {
		files      []string
		o          envoyrls.LoadOptions
		domain     string
		descriptor string
		field      string
		is         error
	}{
		{[]string{"empty_domain.yaml"}, envoyrls.LoadOptions{}, "", "", "domain", nil},
		{[]string{"basic_config.yaml", "duplicate_domain.yaml"}, acceptUnlimited, "test-domain", "", "domain", envoyrls.ErrDuplicateDomain},
		{[]string{"empty_key.yaml"}, envoyrls.LoadOptions{}, "test-domain", "(empty key)", "test-domain.descriptors[0].key", nil},
		{[]string{"duplicate_key.yaml"}, envoyrls.LoadOptions{}, "test-domain", "key1_value1", "test-domain.descriptors[1].value", envoyrls.ErrDuplicateDescriptor},
		{[]string{"bad_limit_unit.yaml"}, envoyrls.LoadOptions{}, "test-domain", "key1_value1", "test-domain.descriptors[0].rate_limit.unit", nil},
		{[]string{"replaces_self.yaml"}, envoyrls.LoadOptions{}, "test-domain", "key1_value1.subkey1", "test-domain.descriptors[0].descriptors[0].rate_limit.replaces[0].name", envoyrls.ErrReplacesSelf},
		{[]string{"replaces_empty.yaml"}, envoyrls.LoadOptions{}, "test-domain", "key1_value1.subkey1", "test-domain.descriptors[0].descriptors[0].rate_limit.replaces[0].name", nil},
		{[]string{"bad_yaml.yaml"}, envoyrls.LoadOptions{}, "", "", "(document)", nil},
		{[]string{"misspelled_key.yaml"}, envoyrls.LoadOptions{}, "test-domain", "", "ratelimit", envoyrls.ErrUnknownField},
		{[]string{"misspelled_key2.yaml"}, envoyrls.LoadOptions{}, "test-domain", "", "requestsperunit", envoyrls.ErrUnknownField},
		{[]string{"non_string_key.yaml"}, envoyrls.LoadOptions{}, "", "", "0.25", envoyrls.ErrUnknownField},
		{[]string{"non_map_list.yaml"}, envoyrls.LoadOptions{}, "test-domain", "", "(document)", nil},
		{[]string{"unlimited_with_unit.yaml"}, acceptUnlimited, "test-domain", "foo", "test-domain.descriptors[0].rate_limit.unit", nil},
		{[]string{"unlimited_with_unit.yaml"}, envoyrls.LoadOptions{}, "test-domain", "foo", "test-domain.descriptors[0].rate_limit.unlimited", envoyrls.ErrUnlimited},
	}
	for _, c := range cases {
		bad := c.files[len(c.files)-1]
		t.Run(bad, func(t *testing.T) {
			names := make([]string, len(c.files))
			for i, f := range c.files {
				names[i] = "config/" + f
			}
			_, err := loadPeer(t, c.o, names...)
			require.Error(t, err)
			assert.ErrorIs(t, err, domain.ErrInvalidConfig)
			if c.is != nil {
				assert.ErrorIs(t, err, c.is)
			}
			var fe *envoyrls.FileError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, "config/"+bad, fe.File)
			assert.Equal(t, c.domain, fe.Domain)
			assert.Equal(t, c.descriptor, fe.Descriptor)
			assert.True(t, strings.HasPrefix(err.Error(), "config/"+bad+": "), err.Error())
			var ce *domain.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, c.field, ce.Field)
		})
	}
}

// TestOneBadFileAmongGood: a directory of good files and one bad one is
// refused, naming the bad file.
func TestOneBadFileAmongGood(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"wildcard.yaml", "metadata.yaml", "misspelled_key2.yaml"} {
		data := readFile(t, peerDir+f)
		if f != "misspelled_key2.yaml" {
			data = []byte(strings.Replace(string(data), "domain: test-domain", "domain: "+strings.TrimSuffix(f, ".yaml"), 1))
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), data, 0o600))
	}
	_, err := envoyrls.LoadConfig(dir)
	require.ErrorIs(t, err, envoyrls.ErrUnknownField)
	assert.True(t, strings.HasPrefix(err.Error(), filepath.Join(dir, "misspelled_key2.yaml")+": "), err.Error())
	assert.Contains(t, err.Error(), "line 7")
	require.NoError(t, os.Remove(filepath.Join(dir, "misspelled_key2.yaml")))
	cfg, err := envoyrls.LoadConfig(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"metadata", "wildcard"}, cfg.Domains())
}

// TestPeerRuntimeAndExamples: its integration runtime directory loads as
// is; reload.yaml (a block of requests_per_unit 0) and the docker-compose
// example (unlimited entries and a block) load with AcceptUnlimited, and
// are refused without it, naming the entry.
func TestPeerRuntimeAndExamples(t *testing.T) {
	cfg, err := envoyrls.LoadConfig("testdata/peer/runtime/config")
	require.NoError(t, err)
	assert.Equal(t, []string{"another", "basic", "share-threshold-test"}, cfg.Domains())

	_, err = envoyrls.LoadConfig("testdata/peer/runtime/reload")
	require.ErrorIs(t, err, envoyrls.ErrUnlimited)
	assert.Contains(t, err.Error(), "reload.yaml: domain reload: descriptor block: ")
	cfg, err = envoyrls.LoadConfigWith("testdata/peer/runtime/reload", acceptUnlimited)
	require.NoError(t, err)
	l, ok := cfg.Lookup("reload", kv("block", "x")...)
	assert.True(t, ok && l.Block && l.RequestsPerUnit == 0, "a block")

	_, err = envoyrls.LoadConfig("testdata/peer/examples")
	require.ErrorIs(t, err, envoyrls.ErrUnlimited)
	assert.Contains(t, err.Error(), "example.yaml: domain rl: descriptor foo.bar_banned: ")
	cfg, err = envoyrls.LoadConfigWith("testdata/peer/examples", acceptUnlimited)
	require.NoError(t, err)
	assert.Equal(t, []string{"mongo_cps", "rl"}, cfg.Domains())
	checkLookups(t, cfg, "rl", []lookupCase{
		{kv("category", "account"), "rl.category_account", 4, "MINUTE"},
		{kv("source_cluster", "proxy", "destination_cluster", "bkthomps"), "rl.source_cluster_proxy.destination_cluster_bkthomps", 2, "MINUTE"},
		{kv("foo", "x"), "rl.foo", 2, "MINUTE"},
		{kv("foo", "x", "bar", "y"), "rl.foo.bar", 3, "MINUTE"},
		{kv("foo", "x", "bar", "banned"), "rl.foo.bar_banned", 0, "MINUTE"},
		{kv("foo", "x", "baz", "shady"), "rl.foo.baz_shady", 3, "MINUTE"},
		{kv("unspec", "x"), "rl.unspec", 2, "MINUTE"},
		{kv("service", "service_1"), "rl.service_service_1", 1, "MINUTE"},
	})
	l, _ = cfg.Lookup("rl", kv("category", "account")...)
	assert.Equal(t, []string{"bkthomps", "fake_name"}, l.Replaces, "replaces under rate_limit")
	l, _ = cfg.Lookup("rl", kv("service", "service_2")...)
	assert.True(t, l.QuotaMode)
	assert.Equal(t, "service_2", l.Metadata.Fields["service_with_quota"].GetStructValue().Fields["name"].GetStringValue())
	for _, e := range [][][2]string{kv("qux", "x"), kv("foo", "x", "bay", "y")} {
		l, ok = cfg.Lookup("rl", e...)
		assert.True(t, ok && l.Unlimited, "%v is unlimited", e)
	}
}

// TestRefusalsBeyondThePeers: the rules that keep sluice's invariants, and
// sluice's own placement of replaces.
func TestRefusalsBeyondThePeers(t *testing.T) {
	parse := func(o envoyrls.LoadOptions, yaml string) error {
		_, err := envoyrls.ParseFiles(o, envoyrls.File{Name: "x.yaml", Data: []byte(yaml)})
		return err
	}
	// A wildcard value declared twice at one level.
	err := parse(envoyrls.LoadOptions{}, "domain: x\ndescriptors:\n  - key: w\n    value: a*\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: w\n    value: a*\n    rate_limit: {unit: minute, requests_per_unit: 2}\n")
	require.ErrorIs(t, err, envoyrls.ErrDuplicateDescriptor)
	assert.Contains(t, err.Error(), "x.yaml: domain x: descriptor w_a*: ")
	// Self-replacement in sluice's placement, beside rate_limit.
	err = parse(envoyrls.LoadOptions{}, "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {name: me, unit: second, requests_per_unit: 5}\n    replaces: [{name: me}]\n")
	require.ErrorIs(t, err, envoyrls.ErrReplacesSelf)
	// replaces without a limit to carry it.
	err = parse(envoyrls.LoadOptions{}, "domain: x\ndescriptors:\n  - key: k\n    replaces: [{name: a}]\n")
	var ce *domain.ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "x.descriptors[0].replaces", ce.Field)
	// An unlimited limit that replaces another: an allow list.
	err = parse(acceptUnlimited, "domain: x\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, replaces: [{name: a}]}\n")
	require.ErrorIs(t, err, envoyrls.ErrUnlimited)
	assert.Contains(t, err.Error(), "x.yaml: domain x: descriptor k: ")
	// Errors of unnamed documents name them by place.
	_, err = envoyrls.ParseConfig([]byte("domain: a\n"), []byte("domain: b\ndescriptors: [{key: ''}]\n"))
	assert.True(t, strings.HasPrefix(err.Error(), "document 2: domain b: "), err.Error())
	assert.True(t, errors.Is(err, domain.ErrInvalidConfig))
}
