package envoyrls_test

import (
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/envoyrls"
)

func descriptor(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// TestWindowsRequest: the windows an operator's tool peeks and resets are
// the ones the service matches: replaced limits left out, descriptors
// without a limit skipped, an unknown domain or no limit at all refused.
func TestWindowsRequest(t *testing.T) {
	cfg, err := envoyrls.LoadConfig("testdata/envoyproxy")
	require.NoError(t, err)

	wr, err := cfg.WindowsRequest("example6", []*rlcommon.RateLimitDescriptor{
		descriptor("remote_address", "10.0.0.1"), descriptor("key", "value"), descriptor("nothing", "here"),
	})
	require.NoError(t, err)
	require.Len(t, wr.Windows, 1, "per_ip is replaced by the key's limit")
	assert.Equal(t, int64(50), wr.Windows[0].Window.Limit)
	assert.Equal(t, time.Minute, wr.Windows[0].Window.Period)
	assert.Equal(t, "example6", wr.RouteKey)

	wr, err = cfg.WindowsRequest("example6", []*rlcommon.RateLimitDescriptor{descriptor("remote_address", "10.0.0.1")})
	require.NoError(t, err)
	require.Len(t, wr.Windows, 1)
	assert.Equal(t, "per_ip", wr.Windows[0].Window.Name)

	_, err = cfg.WindowsRequest("nope", []*rlcommon.RateLimitDescriptor{descriptor("key", "value")})
	assert.ErrorIs(t, err, envoyrls.ErrUnknownDomain)
	_, err = cfg.WindowsRequest("example6", []*rlcommon.RateLimitDescriptor{descriptor("nothing", "here")})
	assert.ErrorIs(t, err, envoyrls.ErrNoLimit)
}
