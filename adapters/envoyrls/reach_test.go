package envoyrls_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/envoyrls"
)

// TestReachListsWhatADescriptorShapeCanMatch: Config.Reach walks the
// tree as a request descriptor is matched, a dynamic value down every
// branch some value takes (each exact value, each wildcard not shadowed
// by an earlier one, the key alone), and says where a shape that reaches
// nothing stops.
func TestReachListsWhatADescriptorShapeCanMatch(t *testing.T) {
	cfg, err := envoyrls.LoadConfig("testdata/sluice/reach.yaml")
	require.NoError(t, err)
	dyn := func(k string) envoyrls.ShapeEntry { return envoyrls.ShapeEntry{Key: k, Dynamic: true} }
	fixed := func(k, v string) envoyrls.ShapeEntry { return envoyrls.ShapeEntry{Key: k, Value: v} }
	type reach struct {
		name   string
		values []string
	}
	cases := []struct {
		name  string
		shape []envoyrls.ShapeEntry
		want  []reach
		stop  envoyrls.Stop
	}{
		{"a key alone", []envoyrls.ShapeEntry{dyn("tenant")}, []reach{{"tenant", []string{""}}}, envoyrls.Stop{}},
		{"a top-level key nested in another's descriptor", []envoyrls.ShapeEntry{dyn("tenant"), dyn("remote_address")}, nil,
			envoyrls.Stop{Entry: 1, Declared: []string{"user"}}},
		{"three levels", []envoyrls.ShapeEntry{dyn("tenant"), dyn("user"), dyn("remote_address")}, []reach{{"user_ip", []string{"", "", ""}}}, envoyrls.Stop{}},
		{"a level without a limit", []envoyrls.ShapeEntry{dyn("tenant"), dyn("user")}, nil, envoyrls.Stop{Entry: 2}},
		{"exact values", []envoyrls.ShapeEntry{dyn("plan")}, []reach{{"premium", []string{"premium"}}, {"free", []string{"free"}}}, envoyrls.Stop{}},
		{"exact, wildcard, any other; a shadowed wildcard never", []envoyrls.ShapeEntry{dyn("path")},
			[]reach{{"v1", []string{"/api/v1"}}, {"api", []string{"/api/*"}}, {"other_paths", []string{""}}}, envoyrls.Stop{}},
		{"a fixed value declared", []envoyrls.ShapeEntry{fixed("generic_key", "checkout")}, []reach{{"checkout", []string{"checkout"}}}, envoyrls.Stop{}},
		{"a fixed value not declared", []envoyrls.ShapeEntry{fixed("generic_key", "cart")}, nil,
			envoyrls.Stop{Entry: 0, Declared: []string{"generic_key", "path", "plan", "remote_address", "tenant"}}},
		{"a fixed path takes the exact value first", []envoyrls.ShapeEntry{fixed("path", "/api/v1")}, []reach{{"v1", []string{"/api/v1"}}}, envoyrls.Stop{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, stop, err := cfg.Reach("reach", c.shape)
			require.NoError(t, err)
			var names []reach
			for _, r := range got {
				names = append(names, reach{r.Limit.Name, r.Values})
				// What a request with these values gets is what Lookup,
				// the service's own match, gives.
				entries := make([][2]string, len(c.shape))
				for i, e := range c.shape {
					v := strings.ReplaceAll(r.Values[i], "*", "x")
					if v == "" {
						v = "no-declared-value"
					}
					entries[i] = [2]string{e.Key, v}
				}
				l, ok := cfg.Lookup("reach", entries...)
				require.True(t, ok, "%v", entries)
				assert.Equal(t, r.Limit, l, "%v", entries)
			}
			assert.Equal(t, c.want, names)
			assert.Equal(t, c.stop, stop)
		})
	}
	_, _, err = cfg.Reach("nope", []envoyrls.ShapeEntry{dyn("tenant")})
	assert.ErrorIs(t, err, envoyrls.ErrUnknownDomain)
}
