package redistest

import (
	"context"
	"fmt"
	"strconv"
)

// MigrateSlot moves slot from the master serving it to the master to,
// under whatever traffic the test runs, the way `redis-cli --cluster
// reshard` does: CLUSTER SETSLOT IMPORTING on the target, MIGRATING on the
// source, then batches of CLUSTER GETKEYSINSLOT and MIGRATE until the slot
// is empty on the source, then SETSLOT NODE on the target, the source and
// every other master. between, when set, runs after each batch (a drill
// stretches the migration with it, so that its traffic meets the slot
// half moved). It returns how many keys were moved.
//
// While the slot moves, a multi-key command on it gets ASK (its keys are
// all on the target), or TRYAGAIN (some are on each side); after SETSLOT
// NODE, MOVED until the client learns the new owner.
func (c *DedicatedCluster) MigrateSlot(ctx context.Context, slot int, to *Server, batch int, between func()) (int, error) {
	from, err := c.MasterOfSlot(ctx, slot)
	if err != nil {
		return 0, err
	}
	if from.Server == to {
		return 0, nil
	}
	toID, err := nodeID(ctx, to)
	if err != nil {
		return 0, err
	}
	s := strconv.Itoa(slot)
	if _, err := to.Do(ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", from.ID); err != nil {
		return 0, fmt.Errorf("SETSLOT IMPORTING on %s: %w", to.Addr(), err)
	}
	if _, err := from.Server.Do(ctx, "CLUSTER", "SETSLOT", s, "MIGRATING", toID); err != nil {
		return 0, fmt.Errorf("SETSLOT MIGRATING on %s: %w", from.Server.Addr(), err)
	}
	moved := 0
	for {
		v, err := from.Server.Do(ctx, "CLUSTER", "GETKEYSINSLOT", s, strconv.Itoa(batch))
		if err != nil {
			return moved, fmt.Errorf("GETKEYSINSLOT on %s: %w", from.Server.Addr(), err)
		}
		keys, _ := v.([]any)
		if len(keys) == 0 {
			break
		}
		args := []string{"MIGRATE", "127.0.0.1", strconv.Itoa(to.Port()), "", "0", "5000", "KEYS"}
		for _, k := range keys {
			ks, _ := k.(string)
			args = append(args, ks)
		}
		if _, err := from.Server.Do(ctx, args...); err != nil {
			return moved, fmt.Errorf("MIGRATE from %s: %w", from.Server.Addr(), err)
		}
		moved += len(keys)
		if between != nil {
			between()
		}
	}
	// The target first, then the source, then everyone, as redis-cli
	// does: the slot is never left without an owner that accepts it.
	for _, n := range append([]*Server{to, from.Server}, c.otherMasters(ctx, to, from.Server)...) {
		if _, err := n.Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", toID); err != nil {
			return moved, fmt.Errorf("SETSLOT NODE on %s: %w", n.Addr(), err)
		}
	}
	return moved, nil
}

// otherMasters returns the running masters but a and b.
func (c *DedicatedCluster) otherMasters(ctx context.Context, a, b *Server) []*Server {
	masters, err := c.Masters(ctx)
	if err != nil {
		return nil
	}
	var out []*Server
	for _, m := range masters {
		if m.Server != nil && m.Server != a && m.Server != b && m.Server.Running() && !m.Failed {
			out = append(out, m.Server)
		}
	}
	return out
}

// NodeID returns the cluster id of the node n.
func (c *DedicatedCluster) NodeID(ctx context.Context, n *Server) (string, error) {
	return nodeID(ctx, n)
}

func nodeID(ctx context.Context, n *Server) (string, error) {
	v, err := n.Do(ctx, "CLUSTER", "MYID")
	if err != nil {
		return "", fmt.Errorf("node %s: CLUSTER MYID: %w", n.Addr(), err)
	}
	id, _ := v.(string)
	return id, nil
}
