package domain_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/domain"
)

// TestKeyStateRefundAndCharge scripts the settle rules of docs/adr/012 on
// one key: what Refund takes back and Charge adds, read as the units a
// window of 10 per 10 s then admits.
func TestKeyStateRefundAndCharge(t *testing.T) {
	s := time.Second
	sl, gc := win(domain.SlidingLog, 10, 10*s), win(domain.GCRA, 10, 10*s) // GCRA: T = 1 s
	type op struct {
		at     int64 // µs
		spend  int64 // units committed at `at`
		refund int64 // units refunded at `at`, of those spent at `of`
		of     int64
		charge int64 // units charged at `at`
	}
	tests := []struct {
		name string
		w    domain.Window
		ops  []op
		at   int64 // instant of the final count
		want int64 // units the window admits then
	}{
		{"log: refund of own units", sl, []op{{at: 0, spend: 6}, {at: 0, refund: 4, of: 0}}, 0, 8},
		{"log: refund never more than stamped", sl, []op{{at: 0, spend: 3}, {at: sec, spend: 2}, {at: sec, refund: 9, of: 0}}, sec, 8},
		{"log: refund at an instant with no units", sl, []op{{at: 0, spend: 3}, {at: sec, refund: 3, of: 2 * sec}}, sec, 7},
		{"log: refund after the units left", sl, []op{{at: 0, spend: 5}, {at: 10 * sec, spend: 10}, {at: 10 * sec, refund: 5, of: 0}}, 10 * sec, 0},
		{"log: refund of a middle entry", sl, []op{{at: 0, spend: 1}, {at: sec, spend: 4}, {at: 2 * sec, spend: 2}, {at: 2 * sec, refund: 4, of: sec}}, 10 * sec, 8},
		{"log: charge stamped at its instant", sl, []op{{at: 0, spend: 4}, {at: 5 * sec, charge: 5}}, 10 * sec, 5},
		{"log: charge records at most Limit", sl, []op{{at: 0, charge: 25}}, 0, 0},
		{"log: charge past the limit leaves one period on", sl, []op{{at: 0, charge: 25}}, 10 * sec, 10},
		{"gcra: refund moves the TAT back", gc, []op{{at: 0, spend: 6}, {at: 0, refund: 4}}, 0, 8},
		{"gcra: refund never before now", gc, []op{{at: 0, spend: 5}, {at: 3 * sec, refund: 5}}, 3 * sec, 10},
		{"gcra: a huge refund does not overflow", gc, []op{{at: 0, spend: 5}, {at: 0, refund: domain.MaxLimit}}, 0, 10},
		{"gcra: charge past the limit, full until TAT - capacity", gc, []op{{at: 0, spend: 10}, {at: 0, charge: 5}}, 5*sec + sec - 1, 0},
		{"gcra: charge past the limit, one unit back", gc, []op{{at: 0, spend: 10}, {at: 0, charge: 5}}, 6 * sec, 1},
		{"gcra: charge from a drained state", gc, []op{{at: 0, spend: 4}, {at: 6 * sec, charge: 3}}, 6 * sec, 7},
		{"gcra: charge stops at MaxPeriod", gc, []op{{at: 0, charge: domain.MaxLimit}}, domain.MaxPeriodMicros - 10*sec, 0},
		{"gcra: charged state drains after MaxPeriod", gc, []op{{at: 0, charge: domain.MaxLimit}}, domain.MaxPeriodMicros, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var k domain.KeyState
			for _, o := range tt.ops {
				if o.spend > 0 {
					st := k.Check(o.at, tt.w, o.spend, grace)
					if !assert.True(t, st.Allowed, "spending %d at %d", o.spend, o.at) {
						return
					}
					k.Committed(o.at, tt.w, o.spend, grace, st)
				}
				k.Refund(o.at, o.of, tt.w, o.refund)
				k.Charge(o.at, tt.w, o.charge, grace)
			}
			assert.Equal(t, int(tt.want), spend(&k, tt.at, tt.w, 20))
		})
	}
	t.Run("charge converts a log to GCRA (S6)", func(t *testing.T) {
		var k domain.KeyState
		st := k.Check(0, sl, 3, grace)
		k.Committed(0, sl, 3, grace, st)
		k.Charge(0, gc, 2, grace)
		assert.Equal(t, domain.GCRA, k.Algorithm())
		assert.Equal(t, 5, spend(&k, 0, gc, 20), "3 units of the log and 2 charged")
	})
	t.Run("refund follows the stored algorithm", func(t *testing.T) {
		var k domain.KeyState
		st := k.Check(0, gc, 6, grace)
		k.Committed(0, gc, 6, grace, st)
		k.Refund(0, 0, sl, 4) // the window changed to a log since
		assert.Equal(t, 8, spend(&k, 0, gc, 20))
	})
}
