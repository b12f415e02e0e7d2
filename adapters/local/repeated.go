package local

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

var (
	_ ports.Repeater = (*Store)(nil)
	_ ports.Batcher  = (*Store)(nil)
)

// EvaluateBatch decides reqs at now in order, each as its own Evaluate
// would; see ports.Batcher. In process a batch saves no round trip: it is
// one Evaluate after another.
func (s *Store) EvaluateBatch(ctx context.Context, now time.Time, reqs [][]domain.Limit) ([]domain.Result, []error) {
	return ports.EvaluateEach(ctx, s, now, reqs)
}

// EvaluateRepeated decides n identical requests at now, in order, exactly
// as n sequential Evaluate calls at now would (see ports.Repeater), in one
// lock of the request's entries: how many fit is worked out per window
// (domain.KeyState.Fit), so a call costs O(keys), not O(n).
func (s *Store) EvaluateRepeated(ctx context.Context, now time.Time, limits []domain.Limit, n int) (domain.Repeated, error) {
	if err := ctx.Err(); err != nil {
		return domain.Repeated{}, fmt.Errorf("local: %w", err)
	}
	if err := validateRepeat(n); err != nil {
		return domain.Repeated{}, err
	}
	if err := domain.ValidateLimits(limits); err != nil {
		return domain.Repeated{}, err
	}
	if s.closed.Load() {
		return domain.Repeated{}, errClosed
	}
	t := now.UnixMicro()
	s.observe(t)
	var b batch
	for i := range limits {
		b.hash[i] = s.hash(limits[i].Key)
	}
	b.link(limits)
	for i := range limits {
		if b.of[i] == 0 {
			b.ents[i] = s.load(b.hash[i], limits[i].Key)
		}
	}
	if err := s.lockAll(&b, limits, t, true); err != nil {
		return domain.Repeated{}, err
	}
	rep := s.repeatLocked(&b, limits, t, n)
	s.unlockAll(&b, len(limits))
	return rep, nil
}

// validateRepeat refuses an n out of 1..ports.MaxRepeat.
func validateRepeat(n int) error {
	if n < 1 || n > ports.MaxRepeat {
		return &domain.LimitError{Index: -1, Field: "n", Reason: fmt.Sprintf("must be between 1 and %d, got %d", ports.MaxRepeat, n)}
	}
	return nil
}

// repeatLocked decides the n requests on the batch's locked entries: the
// first k, k the fewest any limit fits, consume k times their cost at once
// (the same units sequential calls at one instant record, once per key
// for a shared log), the rest are refused by the state that leaves.
func (s *Store) repeatLocked(b *batch, limits []domain.Limit, t int64, n int) domain.Repeated {
	var st [domain.MaxLimits]domain.LimitStatus
	k := int64(n)
	for i := range limits {
		e, l := b.ents[i], &limits[i]
		st[i] = e.st.Check(t, l.Window, l.Cost, s.grace)
		k = min(k, e.st.Fit(t, l.Window, l.Cost, s.grace))
	}
	rep := domain.Repeated{N: n, Admitted: int(k)}
	if k > 0 {
		for i := range limits {
			st[i].Allowed, st[i].RetryAfter = true, 0
			st[i] = s.commitRate(b, limits, i, k*limits[i].Cost, t, st[i])
		}
		rep.Last = domain.NewResult(st[:len(limits)])
		if k == int64(n) {
			return rep
		}
		for i := range limits {
			st[i] = b.ents[i].st.Check(t, limits[i].Window, limits[i].Cost, s.grace)
		}
	}
	rep.Refused = domain.NewResult(st[:len(limits)])
	return rep
}
