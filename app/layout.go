package app

import (
	"fmt"
	"slices"

	"github.com/sluicehq/sluice/domain"
)

// One log per principal (docs/adr/015): the sliding-log windows of a
// principal (a dimension's identity under one route key; the
// tenant-global dimension under domain.GlobalRouteKey) count in one log,
// the key of its sliding-log window with the longest period (the first in
// profile order on a tie). GCRA and concurrency windows keep a key of
// their own.

// dimKeys is the key layout of one dimension's windows in a profile,
// computed once at boot (docs/adr/015).
type dimKeys struct {
	// of[j] is the index of the window whose name ends window j's key:
	// j itself, or the principal's log window for a sliding-log window
	// whose log is shared.
	of []int
}

// layKeys computes p's key layout: the sliding-log windows of each
// dimension share their log when share(dimension) says so. It refuses two
// sliding-log windows of one shared log with the same limit and period
// (the same window twice on one log, domain.ValidateHeld).
func (p *profile) layKeys(share func(domain.Dimension) bool, path string) error {
	p.keys = make([]dimKeys, len(p.Dimensions))
	for d, dw := range p.Dimensions {
		ws := dw.Windows
		k := dimKeys{of: make([]int, len(ws))}
		log := -1
		if share(dw.Dimension) {
			for j, w := range ws {
				if w.Algorithm == domain.SlidingLog && (log < 0 || w.Period > ws[log].Period) {
					log = j
				}
			}
		}
		for j, w := range ws {
			k.of[j] = j
			if log < 0 || w.Algorithm != domain.SlidingLog {
				continue
			}
			k.of[j] = log
			for i := range j {
				if k.of[i] == log && ws[i].Period == w.Period && ws[i].Limit == w.Limit {
					return &domain.ConfigError{Field: fmt.Sprintf("%s.windows.%s[%s]", path, dw.Dimension, w.Name),
						Reason: fmt.Sprintf("has the limit and period of window %q: on one shared log both would be the same window twice (docs/adr/015)", ws[i].Name)}
				}
			}
		}
		p.keys[d] = k
	}
	return nil
}

// keyWindow is the name that ends the key of window j of p's d-th
// dimension. A profile without a layout (a reset's, admin.go) names
// every window's own key.
func (p *profile) keyWindow(d, j int) string {
	ws := p.Dimensions[d].Windows
	if p.keys == nil {
		return ws[j].Name
	}
	return ws[p.keys[d].of[j]].Name
}

// globalLogShared reports whether the tenant-global windows may share a
// log. Their keys are the same in every profile (docs/adr/004), so one
// log serves them only when every profile that counts a tenant-global
// sliding log counts the same ones, in the same order: a profile with fewer would name
// another key for them, or keep the shared log for a shorter period than
// the others read (docs/adr/015). Otherwise they keep a key each.
func globalLogShared(profiles []*profile) bool {
	var first []string
	seen := false
	for _, p := range profiles {
		var names []string
		for _, dw := range p.Dimensions {
			if dw.Dimension != domain.DimensionTenantGlobal {
				continue
			}
			for _, w := range dw.Windows {
				if w.Algorithm == domain.SlidingLog {
					names = append(names, w.Name)
				}
			}
		}
		if len(names) == 0 {
			continue
		}
		// In order: on a tie of periods the first names the log.
		if !seen {
			first, seen = names, true
			continue
		}
		if !slices.Equal(first, names) {
			return false
		}
	}
	return true
}
