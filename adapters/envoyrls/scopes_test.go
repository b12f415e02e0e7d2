package envoyrls_test

import (
	"fmt"
	"sync"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/adapters/redis"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// tenantsInTwoSlots returns two tenants whose keys in domain "scopes" fall
// in two Redis Cluster slots under r's secret.
func (r *rig) tenantsInTwoSlots(t *testing.T) (string, string) {
	t.Helper()
	p, err := domain.NewPseudonymiser(r.secret)
	require.NoError(t, err)
	slot := func(tenant string) uint16 {
		return redis.Slot("{" + p.Pseudonymise(domain.DimensionDescriptor, "scopes\x00"+tenant) + "}")
	}
	for i := range 100 {
		a, b := fmt.Sprint("tenant-a", i), fmt.Sprint("tenant-b", i)
		if slot(a) != slot(b) {
			return a, b
		}
	}
	t.Fatal("no two tenants in two slots")
	return "", ""
}

// check is a descriptor whose hits_addend is 0: it reads the count.
func check(kv ...string) *rlcommon.RateLimitDescriptor {
	d := desc(kv...)
	d.HitsAddend = wrapperspb.UInt64(0)
	return d
}

// storeOps counts the primary store's calls by operation.
func (r *rig) storeOps() map[ports.StoreOp]int {
	ops := map[ports.StoreOp]int{}
	for _, c := range r.rec.StoreCalls() {
		ops[c.Op]++
	}
	return ops
}

// TestRefusedAcrossSlotsConsumesNothing is the #1060 case across two
// slots: a request counts tenant a and the user of tenant b (another
// scope, another slot on the cluster), 10 hits a request. Two pass, the
// next three are refused by the user's 20 per minute, and tenant a has
// counted 20, not 50: the refused requests consumed nothing on either
// slot. On the cluster the request is decided through a reservation per
// slot, the admitted side released when the other refuses.
func TestRefusedAcrossSlotsConsumesNothing(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, b.primary(t), "sluice/scopes.yaml")
			ta, tb := r.tenantsInTwoSlots(t)
			want := []rlsv3.RateLimitResponse_Code{ok, ok, over, over, over}
			for i, code := range want {
				resp := r.call(t, "scopes", 10, desc("tenant", ta), desc("tenant", tb, "user", "u1"))
				require.Equal(t, code, resp.OverallCode, "request %d", i)
				if code == over {
					assert.Equal(t, ok, resp.Statuses[0].Code, "tenant a alone would admit it")
					assert.Equal(t, over, resp.Statuses[1].Code)
					assert.Equal(t, uint32(80), resp.Statuses[0].LimitRemaining, "nothing consumed on tenant a")
				}
			}
			resp := r.call(t, "scopes", 0, check("tenant", ta), check("tenant", tb, "user", "u1"))
			require.Equal(t, over, resp.OverallCode, "the user's window is spent")
			assert.Equal(t, uint32(80), resp.Statuses[0].LimitRemaining, "100 - 2x10: the refused 30 hits never counted")
			assert.Equal(t, uint32(0), resp.Statuses[1].LimitRemaining)
			ops := r.storeOps()
			if b.name == "cluster" {
				assert.Positive(t, ops[ports.OpReserve], "decided through a reservation per slot")
				assert.Positive(t, ops[ports.OpSettle], "the admitted side released on each refusal")
			} else {
				assert.Zero(t, ops[ports.OpReserve], "one store call where one call can decide")
			}
		})
	}
}

// TestTaggedDescriptorCountsInItsOwnScope: a descriptor that carries the
// tenant counts in that tenant's scope whatever tenant the request's
// first descriptor names. It used to count in the first descriptor's
// scope: tenant b's user counted once per first tenant.
func TestTaggedDescriptorCountsInItsOwnScope(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, b.primary(t), "sluice/scopes.yaml")
			for i, first := range []string{"acme", "initech", "umbrella"} {
				resp := r.call(t, "scopes", 0, desc("tenant", first), desc("tenant", "globex", "user", "u1"))
				require.Equal(t, ok, resp.OverallCode)
				assert.Equal(t, uint32(19-i), resp.Statuses[1].LimitRemaining, "globex's user, beside %s", first)
			}
		})
	}
}

// TestUnscopedKeyCountsAcrossTenants: an address (unscoped_keys) counts
// across tenants; a descriptor not listed (path) counts per the
// request's tenant.
func TestUnscopedKeyCountsAcrossTenants(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, b.primary(t), "sluice/scopes.yaml")
			for i, tenant := range []string{"acme", "globex", "initech"} {
				resp := r.call(t, "scopes", 0, desc("tenant", tenant), desc("remote_address", "192.0.2.7"), desc("path", "/search"))
				require.Equal(t, ok, resp.OverallCode)
				assert.Equal(t, uint32(29-i), resp.Statuses[1].LimitRemaining, "the address across tenants, beside %s", tenant)
				assert.Equal(t, uint32(49), resp.Statuses[2].LimitRemaining, "the path per tenant, beside %s", tenant)
			}
		})
	}
}

// TestAcrossSlotsExactUnderConcurrency releases 100 requests at once,
// each counting one tenant (100 per minute) and one address (30 per
// minute, another slot on the cluster): exactly 30 pass, and the tenant
// counted exactly those 30, no unit left by a refused request. (With
// more requests than the tenant's limit in flight, the tenant's side
// could refuse for units a release then gives back, and fewer than 30
// pass: a true answer at its instant, never one past a limit,
// docs/adr/013.)
func TestAcrossSlotsExactUnderConcurrency(t *testing.T) {
	const calls = 100
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, b.primary(t), "sluice/scopes.yaml")
			var wg sync.WaitGroup
			var mu sync.Mutex
			codes := map[rlsv3.RateLimitResponse_Code]int{}
			start := make(chan struct{})
			for range calls {
				wg.Go(func() {
					<-start
					resp := r.call(t, "scopes", 0, desc("tenant", "acme"), desc("remote_address", "198.51.100.1"))
					mu.Lock()
					codes[resp.OverallCode]++
					mu.Unlock()
				})
			}
			close(start)
			wg.Wait()
			assert.Equal(t, 30, codes[ok], "admitted")
			assert.Equal(t, calls-30, codes[over], "refused")
			resp := r.call(t, "scopes", 0, check("tenant", "acme"), check("remote_address", "198.51.100.1"))
			assert.Equal(t, uint32(70), resp.Statuses[0].LimitRemaining, "the tenant counted the 30 admitted only")
			assert.Equal(t, uint32(0), resp.Statuses[1].LimitRemaining)
		})
	}
}
