package redistest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errFirst = errors.New("not tried yet")

func TestKeySlot(t *testing.T) {
	// Known values (Redis Cluster specification) and hash-tag rules.
	assert.Equal(t, 12182, KeySlot("foo"))
	assert.Equal(t, 0, KeySlot(""))
	assert.Equal(t, KeySlot("user1000"), KeySlot("{user1000}.following"))
	assert.Equal(t, KeySlot("user1000"), KeySlot("rl:{user1000}:x"))
	assert.Equal(t, KeySlot("foo{}{bar}"), KeySlot("foo{}{bar}"))
	assert.NotEqual(t, KeySlot("bar"), KeySlot("foo{}{bar}"), "an empty first tag hashes the whole key")
	assert.Equal(t, KeySlot("{bar"), KeySlot("foo{{bar}}zap"))

	// And Redis agrees on a spread of keys.
	ctx := t.Context()
	node := Cluster(t)[0]
	for i := range 200 {
		key := fmt.Sprintf("k%d{t%d}x", i, i%17)
		if i%3 == 0 {
			key = "plain:" + strconv.Itoa(i*7919)
		}
		v, err := Do(ctx, node, "CLUSTER", "KEYSLOT", key)
		require.NoError(t, err)
		require.Equal(t, v, int64(KeySlot(key)), "key %q", key)
	}
}

func TestClusterWithReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	start := time.Now()
	c := ClusterWithReplicas(t)
	t.Logf("cluster of 3 masters and 3 replicas up in %s", time.Since(start).Round(10*time.Millisecond))
	require.Len(t, c.Nodes(), 6)
	require.Len(t, c.Addrs(), 6)

	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	replicas, err := c.Replicas(ctx)
	require.NoError(t, err)
	require.Len(t, masters, 3)
	require.Len(t, replicas, 3)
	served := 0
	ids := map[string]bool{}
	for _, m := range masters {
		for _, r := range m.Slots {
			served += r.Last - r.First + 1
		}
		ids[m.ID] = true
		assert.False(t, m.Failed)
	}
	assert.Equal(t, 16384, served, "the masters serve every slot once")
	replicaOf := map[string]ClusterNode{}
	for _, r := range replicas {
		require.True(t, ids[r.MasterID], "replica %s follows %q, not a master", r.Server.Addr(), r.MasterID)
		replicaOf[r.MasterID] = r
	}
	require.Len(t, replicaOf, 3, "each master has its own replica")

	// A real cluster client, seeded with every node, writes a key.
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: c.Addrs(), DisableCache: true})
	require.NoError(t, err)
	defer client.Close()
	const key = "rl:{drill}:k"
	require.NoError(t, client.Do(ctx, client.B().Set().Key(key).Value("1").Build()).Error())

	owner, err := c.MasterOf(ctx, key)
	require.NoError(t, err)
	require.True(t, owner.Serves(KeySlot(key)))
	bySlot, err := c.MasterOfSlot(ctx, KeySlot(key))
	require.NoError(t, err)
	require.Equal(t, owner.ID, bySlot.ID)
	_, err = c.MasterOfSlot(ctx, 16384)
	require.Error(t, err, "no master serves a slot out of range")
	successor := replicaOf[owner.ID]
	// Replication is asynchronous: the kill below must not race the
	// write to the replica (on a loaded machine it did, now and then).
	waitReplicated(ctx, t, owner.Server, successor.Server)

	start = time.Now()
	killed, err := c.KillMasterOf(ctx, key)
	require.NoError(t, err)
	require.Same(t, owner.Server, killed)
	require.False(t, killed.Running())
	require.NoError(t, c.WaitHealthy(ctx))
	t.Logf("failover of a killed master: %s (cluster-node-timeout %s)", time.Since(start).Round(10*time.Millisecond), DefaultNodeTimeout)

	promoted, err := c.MasterOf(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, successor.ID, promoted.ID, "the killed master's replica took over")
	assert.Same(t, successor.Server, promoted.Server)
	// The replica had the key: it had caught up with the write before
	// the kill.
	v, err := promoted.Server.Do(ctx, "GET", key)
	require.NoError(t, err)
	assert.Equal(t, "1", v)
	// A client seeded with Addrs finds the new master (after a refused
	// connection or two while it refreshes its slot map).
	deadline := time.Now().Add(10 * time.Second)
	for err = errFirst; err != nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		err = client.Do(ctx, client.B().Set().Key(key).Value("2").Build()).Error()
	}
	require.NoError(t, err, "the client does not follow the failover")

	// The killed master comes back on its port as a replica of its successor.
	addr := killed.Addr()
	require.NoError(t, killed.Start())
	require.Equal(t, addr, killed.Addr())
	require.NoError(t, c.WaitHealthy(ctx))
	// The restarted node learns from the cluster bus that it lost its
	// slots, then turns replica: on a loaded machine a view taken right
	// after WaitHealthy can still show it an empty master.
	var rejoined bool
	for deadline := time.Now().Add(10 * time.Second); !rejoined && time.Now().Before(deadline); {
		view, err := c.Topology(ctx)
		require.NoError(t, err)
		for _, n := range view {
			if n.Server == killed && !n.Master {
				assert.Equal(t, promoted.ID, n.MasterID, "the restarted master replicates its successor")
				rejoined = true
			}
		}
		if !rejoined {
			time.Sleep(50 * time.Millisecond)
		}
	}
	require.True(t, rejoined, "the restarted master rejoins as a replica within 10 s")
	// It restarted empty and holds its master's one key again once its
	// first sync is done.
	var n any
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if n, err = killed.Do(ctx, "DBSIZE"); err == nil && n == int64(1) {
			break
		}
	}
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the restarted replica synced its master's key")
}

func TestClusterWithPassword(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	// NewCluster returns only once each replica's link is up, which needs
	// the password (masterauth) as much as the harness' own commands.
	c := NewCluster(t, ClusterConfig{Masters: 3, Replicas: 1, Node: Config{Password: "pw", Users: []User{{Name: "app", Password: "s"}}}})
	_, err := Do(ctx, c.Addrs()[0], "CLUSTER", "INFO")
	require.ErrorContains(t, err, "NOAUTH")
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: c.Addrs(), Username: "app", Password: "s", DisableCache: true})
	require.NoError(t, err)
	defer client.Close()
	require.NoError(t, client.Do(ctx, client.B().Set().Key("{a}k").Value("1").Build()).Error())
}

func TestClusterConfigRefused(t *testing.T) {
	bin := serverBinary(t)
	for name, cfg := range map[string]ClusterConfig{
		"TLS":               {Masters: 3, NodeTimeout: time.Second, Node: Config{TLS: true}},
		"no master":         {Masters: -1, NodeTimeout: time.Second},
		"negative replicas": {Masters: 3, Replicas: -1, NodeTimeout: time.Second},
		"bad node config":   {Masters: 3, NodeTimeout: time.Second, Node: Config{ClientCerts: true}},
		"no node timeout":   {Masters: 3},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := startCluster(bin, t.TempDir(), cfg, true)
			require.Error(t, err)
		})
	}
}

// waitReplicated waits until replica has processed every write master
// had made: its replication offset reaches the master's.
func waitReplicated(ctx context.Context, t *testing.T, master, replica *Server) {
	t.Helper()
	want := replOffset(ctx, t, master)
	deadline := time.Now().Add(10 * time.Second)
	for replOffset(ctx, t, replica) < want {
		if time.Now().After(deadline) {
			t.Fatalf("replica %s did not reach the master's replication offset %d in 10 s", replica.Addr(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// replOffset is s's master_repl_offset (INFO replication): on a replica,
// how far into its master's stream it has processed.
func replOffset(ctx context.Context, t *testing.T, s *Server) int64 {
	t.Helper()
	v, err := s.Do(ctx, "INFO", "replication")
	require.NoError(t, err)
	info, _ := v.(string)
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "master_repl_offset:"); ok {
			n, err := strconv.ParseInt(rest, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("%s: no master_repl_offset in INFO replication", s.Addr())
	return 0
}
