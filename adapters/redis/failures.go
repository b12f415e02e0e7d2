package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// The failure classes of one script call (docs/adr/008-failure-classes-and-breaker.md):
//
//   - a store fault (a refused or broken connection, a deadline missed, a
//     node that answers CLUSTERDOWN, LOADING, OOM...): the error wraps
//     domain.ErrStoreUnavailable or domain.ErrStoreTimeout and counts
//     toward the breaker of the node;
//   - a safe retry (TRYAGAIN: Redis ran nothing because the keys of a
//     slot in migration are split between two nodes): retried here within
//     the deadline; if the deadline passes first, the error wraps
//     ports.ErrNotRun and domain.ErrStoreTimeout, and counts for nothing.
//     NOSCRIPT (rueidis sends EVAL once) and MOVED/ASK (rueidis follows up
//     to Config.MaxRedirections) are retried by rueidis; redirections past
//     the bound wrap ErrRedirections, ports.ErrNotRun and
//     domain.ErrStoreUnavailable;
//   - a request fault (a key of a type the script does not read, a value
//     it cannot interpret): a *domain.StoreValueError, that decision's
//     own, which counts for nothing;
//   - a call whose script may have run (any error that is not a reply of
//     Redis' own: a broken connection, a deadline) is never retried: its
//     units may have been counted, and a second run would count them twice.

// ErrRedirections is wrapped by the error of a call that Redis Cluster
// kept redirecting (MOVED or ASK) past Config.MaxRedirections: a slot
// whose migration was left half done (a node says IMPORTING, the other no
// longer MIGRATING) bounces forever. Finish or roll back the migration
// (docs/runbook.md, "Resharding").
var ErrRedirections = errors.New("sluice redis: too many cluster redirections (a slot migration left half done?)")

// DefaultMaxRedirections bounds the MOVED and ASK redirections of one call
// when Config.MaxRedirections is zero. A live reshard costs a call one or
// two (an ASK to the importing node, a MOVED once the slot has moved, after
// which the client knows the new owner).
const DefaultMaxRedirections = 8

// Bounds of the wait between two tries of a call refused with TRYAGAIN.
// MIGRATE moves a batch of keys in well under a millisecond: the first
// retry comes soon, the later ones back off so that a long migration
// costs a few round trips per deadline, not a storm.
const (
	tryAgainFirstWait = 500 * time.Microsecond
	tryAgainMaxWait   = 8 * time.Millisecond
)

// exec runs the script once, with the failure classes above: it retries
// TRYAGAIN within ctx's deadline, and turns what rueidis returns for
// redirections past the bound and for a key of the wrong type into errors
// of their class. Every other outcome is returned as it came.
//
// The call is sent now, to the node b's keys live on: exec tells ctx so
// (ports.Dispatched, with the node's answers, progress.go), and a call
// whose caller is already gone is not sent (ports.ErrNotRun). A call
// whose caller gives up once it is sent may have run: its error wraps
// ports.ErrInFlight.
func (s *Store) exec(ctx context.Context, b *batcher, keys, args []string) rueidis.RedisResult {
	if ctx.Err() != nil {
		return rueidis.NewErrorResult(notSent(ctx))
	}
	node := b.node.Load()
	ports.Dispatched(ctx, node)
	wait := tryAgainFirstWait
	for {
		sent := time.Now().UnixNano()
		resp := s.script.Exec(ctx, s.client, keys, args)
		if resp.NonRedisError() == nil {
			node.answered(sent)
		}
		re, ok := rueidis.IsRedisErr(resp.Error())
		if !ok {
			// A success, or no reply of Redis' own: the script may have run.
			if err := resp.Error(); err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return rueidis.NewErrorResult(fmt.Errorf("%w: %w", ports.ErrInFlight, err))
			}
			return resp
		}
		if re.IsTryAgain() {
			if !sleepWithin(ctx, wait) {
				return rueidis.NewErrorResult(fmt.Errorf("%w: %w: TRYAGAIN until the deadline (a slot in migration): %w",
					domain.ErrStoreTimeout, ports.ErrNotRun, context.DeadlineExceeded))
			}
			wait = min(2*wait, tryAgainMaxWait)
			continue
		}
		return s.classify(ctx, keys, resp)
	}
}

// classify turns what rueidis returns for redirections past the bound and
// for a key of the wrong type into errors of their class; every other
// outcome is returned as it came. exec and a request of a batch
// (batch.go) end here.
func (s *Store) classify(ctx context.Context, keys []string, resp rueidis.RedisResult) rueidis.RedisResult {
	re, ok := rueidis.IsRedisErr(resp.Error())
	switch {
	case !ok:
	case isRedirection(re):
		return rueidis.NewErrorResult(fmt.Errorf("%w: %w: %w: last reply %q",
			domain.ErrStoreUnavailable, ports.ErrNotRun, ErrRedirections, re.Error()))
	case foreignValueReply(re):
		return rueidis.NewErrorResult(s.foreignValue(ctx, keys, re))
	}
	return resp
}

// sleepWithin waits d unless ctx's deadline comes first (then it returns
// false at once: a retry that cannot answer in time is not sent).
func sleepWithin(ctx context.Context, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func isRedirection(re *rueidis.RedisError) bool {
	if _, moved := re.IsMoved(); moved {
		return true
	}
	_, ask := re.IsAsk()
	return ask
}

// foreignValueReply reports whether a reply says that a key holds what the
// script cannot read: WRONGTYPE (a LIST, HASH, SET or STREAM where a
// string or a ZSET belongs), or a runtime error of the script itself (it
// met a value it cannot interpret: a string that is not a number). Redis
// keeps the code of an error raised inside a script (WRONGTYPE ...
// script: ...), and a Lua runtime error names user_script (Redis 7 sends
// it without a code, older servers after ERR). An
// OOM, BUSY, LOADING or CLUSTERDOWN is the node's state, not a key's.
func foreignValueReply(re *rueidis.RedisError) bool {
	msg := re.Error()
	return strings.HasPrefix(msg, "WRONGTYPE") || strings.HasPrefix(msg, "user_script:") ||
		(strings.HasPrefix(msg, "ERR") && strings.Contains(msg, "user_script:"))
}

// foreignValue builds the StoreValueError of a call refused for a key's
// value: it asks TYPE of every key (within what is left of ctx) and names
// the first that is neither a string nor a ZSET, the only types the script
// writes; when none is, the value itself is malformed and the index is -1.
func (s *Store) foreignValue(ctx context.Context, keys []string, re *rueidis.RedisError) error {
	reason := re.Error()
	if i := strings.Index(reason, " script:"); i > 0 {
		reason = reason[:i]
	}
	e := &domain.StoreValueError{Index: -1, Reason: reason}
	cmds := make(rueidis.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = s.client.B().Type().Key(k).Build()
	}
	for i, r := range s.client.DoMulti(ctx, cmds...) {
		typ, err := r.ToString()
		if err == nil && typ != "string" && typ != "zset" && typ != "none" {
			e.Index, e.Key, e.Reason = i, keys[i], "holds a "+typ
			break
		}
	}
	return e
}

// classified reports whether err, returned by exec, already carries its
// class, so that mapErr passes it on as it is.
func classified(err error) bool {
	return errors.Is(err, domain.ErrStoreValue) || errors.Is(err, ports.ErrNotRun)
}
