package otel_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/adapters/otel"
	"github.com/sluicehq/sluice/domain"
)

// TestNodeState: the node transitions a Limiter records (one breaker per
// Redis Cluster master, docs/adr/008) say, in node_state, which node is
// degraded, and in the application log when.
func TestNodeState(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	ctx := context.Background()
	require.NoError(t, e.rec.RecordNodeTransition(ctx, "10.0.0.1:7000", domain.StateChange{From: domain.Healthy, To: domain.Degraded}, t0))
	require.NoError(t, e.rec.RecordNodeTransition(ctx, "10.0.0.2:7000", domain.StateChange{From: domain.Healthy, To: domain.Degraded}, t0))
	require.NoError(t, e.rec.RecordNodeTransition(ctx, "10.0.0.2:7000", domain.StateChange{From: domain.Degraded, To: domain.Recovering}, t0))
	got := series(scrape(t, e.srv.URL, "")["sluice_node_state"])
	inst := "instance_id=" + testConfig().InstanceID + ","
	assert.Equal(t, 1.0, got[inst+"node=10.0.0.1:7000,state=DEGRADED"])
	assert.Equal(t, 0.0, got[inst+"node=10.0.0.1:7000,state=HEALTHY"])
	assert.Equal(t, 1.0, got[inst+"node=10.0.0.2:7000,state=RECOVERING"])
	assert.Len(t, got, 6, "three states for each of two nodes")
	assert.Contains(t, e.app.text(), otel.MsgNodeTransition)
	assert.True(t, strings.Contains(e.app.text(), `"node":"10.0.0.1:7000"`))
	require.NoError(t, e.rec.Close())
	assert.ErrorIs(t, e.rec.RecordNodeTransition(ctx, "10.0.0.1:7000", domain.StateChange{From: domain.Degraded, To: domain.Recovering}, t0), otel.ErrClosed)
}
