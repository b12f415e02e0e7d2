package app

import (
	"fmt"
	"slices"

	"github.com/sluicehq/sluice/domain"
)

// LogLayout is how a profile's sliding-log windows name their keys
// (Config.LogLayout, docs/adr/015).
type LogLayout uint8

// The key layouts of sliding-log windows.
const (
	// LogLayoutShared (the default) counts the sliding-log windows of one
	// principal (a dimension's identity under one route key; the
	// tenant-global dimension under domain.GlobalRouteKey) in one log: the
	// key of its sliding-log window with the longest period (the first in
	// profile order on a tie), so that an upgrade from LogLayoutPerWindow
	// reuses the key that already holds every unit. GCRA and concurrency
	// windows keep a key of their own.
	LogLayoutShared LogLayout = iota + 1
	// LogLayoutPerWindow gives every window a key of its own (docs/adr/004).
	LogLayoutPerWindow
	// LogLayoutBoth is the rollout's step between the two: every window
	// is decided as under LogLayoutShared and, a sliding-log window whose
	// own key is not the shared log, on its own key too, so that
	// instances of either layout running beside it stay exact
	// (docs/adr/015, "Rollout").
	LogLayoutBoth
)

// String returns "shared", "per_window" or "both".
func (l LogLayout) String() string {
	switch l {
	case LogLayoutShared:
		return "shared"
	case LogLayoutPerWindow:
		return "per_window"
	case LogLayoutBoth:
		return "both"
	}
	return fmt.Sprintf("log_layout(%d)", uint8(l))
}

// ParseLogLayout reads "shared", "per_window" or "both"; anything else is
// a *domain.UnknownNameError.
func ParseLogLayout(s string) (LogLayout, error) {
	for _, l := range [...]LogLayout{LogLayoutShared, LogLayoutPerWindow, LogLayoutBoth} {
		if s == l.String() {
			return l, nil
		}
	}
	return 0, &domain.UnknownNameError{Kind: "log layout", Name: s, Valid: "shared, per_window or both"}
}

// MarshalText returns the layout's name ("" for the zero value, which
// WithDefaults makes LogLayoutShared).
func (l LogLayout) MarshalText() ([]byte, error) {
	switch l {
	case 0:
		return nil, nil
	case LogLayoutShared, LogLayoutPerWindow, LogLayoutBoth:
		return []byte(l.String()), nil
	}
	return nil, &domain.UnknownNameError{Kind: "log layout", Name: l.String(), Valid: "shared, per_window or both"}
}

// UnmarshalText reads a layout's name, as ParseLogLayout.
func (l *LogLayout) UnmarshalText(b []byte) error {
	v, err := ParseLogLayout(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// dimKeys is the key layout of one dimension's windows in a profile,
// computed once at boot (docs/adr/015).
type dimKeys struct {
	// of[j] is the index of the window whose name ends window j's key:
	// j itself, or the principal's log window for a sliding-log window
	// whose log is shared.
	of []int
	// also[j] is set, under LogLayoutBoth, for a window whose key is
	// another window's: it is checked on its own key too, as a hidden
	// limit at the end of the request.
	also []bool
}

// layKeys computes p's key layout: the windows of each dimension share
// their sliding log when share(dimension) says so, and under both the
// windows moved to a shared log are checked on their own key too. It
// refuses two sliding-log windows of one shared log with the same limit
// and period (the same window twice on one log, domain.ValidateHeld) and,
// under both, a request that the hidden limits would take past
// domain.MaxLimits.
func (p *profile) layKeys(layout LogLayout, share func(domain.Dimension) bool, path string) error {
	p.keys = make([]dimKeys, len(p.Dimensions))
	total := 0
	for d, dw := range p.Dimensions {
		ws := dw.Windows
		k := dimKeys{of: make([]int, len(ws)), also: make([]bool, len(ws))}
		log := -1
		if layout != LogLayoutPerWindow && share(dw.Dimension) {
			for j, w := range ws {
				if w.Algorithm == domain.SlidingLog && (log < 0 || w.Period > ws[log].Period) {
					log = j
				}
			}
		}
		for j, w := range ws {
			total++
			k.of[j] = j
			if log < 0 || w.Algorithm != domain.SlidingLog {
				continue
			}
			k.of[j] = log
			for i := range j {
				if k.of[i] == log && ws[i].Period == w.Period && ws[i].Limit == w.Limit {
					return &domain.ConfigError{Field: fmt.Sprintf("%s.windows.%s[%s]", path, dw.Dimension, w.Name),
						Reason: fmt.Sprintf("has the limit and period of window %q: under log_layout %s both would be the same window twice on one log (docs/adr/015)", ws[i].Name, layout)}
				}
			}
			if layout == LogLayoutBoth && log != j {
				k.also[j] = true
				total++
			}
		}
		p.keys[d] = k
	}
	if total > domain.MaxLimits {
		return &domain.ConfigError{Field: path + ".windows", Reason: fmt.Sprintf("%d limits under log_layout both (each window moved to a shared log is checked on its own key too), at most %d", total, domain.MaxLimits)}
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

// hidden reports whether window j of p's d-th dimension is also checked
// on its own key (LogLayoutBoth).
func (p *profile) hidden(d, j int) bool {
	return p.keys != nil && p.keys[d].also[j]
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
