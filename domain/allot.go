package domain

import "time"

// Allotments (docs/adr/019-allotments.md). An instance takes an allotment
// of m requests of a key set at the store in one reservation, at instant
// t0, and admits up to m of the key set's next requests in process, at any
// instants in [t0, t0 + hold], with no further store call. The
// reservation is made as if at t0 + hold (ports.Allotter) under the
// windows AllotWindow returns, which makes it exactly as strict as every
// instant of the hold requires:
//
//   - a sliding log of L per P becomes L per P + hold: at t0 + hold it
//     counts the units after t0 − P, as a decision at t0 does (later
//     units included: units ahead of an instant count), and records the
//     allotment's units at t0 + hold. A unit spent at u ≤ t0 + hold then
//     counts for every caller until t0 + hold + P ≥ u + P: it occupies
//     every window its admission at u falls in.
//   - GCRA of L per P (emission interval T = ⌊P/L⌋) becomes L − ⌈hold/T⌉
//     per (L − ⌈hold/T⌉)·T, the same T: at t0 + hold its room, T·L' −
//     (start − t0 − hold), is at most the room the window has at t0, T·L
//     − (start − t0), start the later of the state's TAT and t0 + hold.
//     Each request spent at u gets slots of the state at or after
//     t0 + hold ≥ u, ending by t0 + T·L ≤ u + T·L: the admitted sequence
//     itself conforms.
//
// The proof, and what a crash, an outage, a limit change and a reset do
// to units out in allotments, are in the ADR.

// MaxAllotmentHold bounds how long an allotment may be spent.
const MaxAllotmentHold = time.Minute

// AllotWindow returns the window an allotment held for hold (0 < hold ≤
// MaxAllotmentHold) reserves under for w, at the store's instant plus
// hold; ok is false when w leaves no unit to allot that way (a GCRA
// window whose whole burst fits in the hold) or is not a rate window.
func AllotWindow(w Window, hold time.Duration) (Window, bool) {
	if hold <= 0 || hold > MaxAllotmentHold {
		return Window{}, false
	}
	h := int64((hold + time.Microsecond - 1) / time.Microsecond)
	switch w.Algorithm {
	case SlidingLog:
		p := w.Period.Truncate(time.Microsecond) + time.Duration(h)*time.Microsecond
		if p > MaxPeriod {
			return Window{}, false
		}
		w.Period = p
		return w, true
	case GCRA:
		t := w.EmissionMicros()
		l := w.Limit - (h+t-1)/t
		if l < 1 {
			return Window{}, false
		}
		w.Limit, w.Period = l, time.Duration(l*t)*time.Microsecond
		return w, true
	}
	return Window{}, false
}
