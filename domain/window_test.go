package domain_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/domain"
)

func TestWindowValidate(t *testing.T) {
	ok := domain.Window{Name: "burst", Limit: 10, Period: time.Second}
	tests := []struct {
		name  string
		w     domain.Window
		field string
	}{
		{"valid sliding log", ok, ""},
		{"valid gcra", domain.Window{Limit: 1, Period: time.Minute, Algorithm: domain.GCRA}, ""},
		{"zero limit", domain.Window{Limit: 0, Period: time.Second}, "limit"},
		{"negative limit", domain.Window{Limit: -3, Period: time.Second}, "limit"},
		{"limit too large", domain.Window{Limit: domain.MaxLimit + 1, Period: time.Second, Algorithm: domain.GCRA}, "limit"},
		{"sliding log limit too large", domain.Window{Limit: domain.MaxSlidingLogLimit + 1, Period: time.Second}, "limit"},
		{"gcra takes large limits", domain.Window{Limit: domain.MaxSlidingLogLimit + 1, Period: time.Second, Algorithm: domain.GCRA}, ""},
		{"zero period", domain.Window{Limit: 1}, "period"},
		{"negative period", domain.Window{Limit: 1, Period: -time.Second}, "period"},
		{"period below a millisecond", domain.Window{Limit: 1, Period: time.Microsecond * 999}, "period"},
		{"period too long", domain.Window{Limit: 1, Period: domain.MaxPeriod + time.Second}, "period"},
		{"period with nanoseconds", domain.Window{Limit: 1, Period: time.Second + 1}, "period"},
		{"unknown algorithm", domain.Window{Limit: 1, Period: time.Second, Algorithm: 9}, "algorithm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.w.Validate()
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			var le *domain.LimitError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, tt.field, le.Field)
			assert.ErrorIs(t, err, domain.ErrInvalidLimit)
			assert.Equal(t, domain.CodeInvalidLimit, domain.CodeOf(err))
		})
	}
}

func TestEmissionMicros(t *testing.T) {
	assert.Equal(t, int64(100_000), domain.Window{Limit: 10, Period: time.Second}.EmissionMicros())
	assert.Equal(t, int64(333_333), domain.Window{Limit: 3, Period: time.Second}.EmissionMicros())
	// More units than microseconds: the interval never drops to zero.
	assert.Equal(t, int64(1), domain.Window{Limit: 5000, Period: time.Millisecond}.EmissionMicros())
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range []domain.Algorithm{domain.SlidingLog, domain.GCRA} {
		got, err := domain.ParseAlgorithm(a.String())
		require.NoError(t, err)
		assert.Equal(t, a, got)
	}
	got, err := domain.ParseAlgorithm("")
	require.NoError(t, err)
	assert.Equal(t, domain.SlidingLog, got, "the default algorithm is the sliding log")
	_, err = domain.ParseAlgorithm("token_bucket")
	assert.Error(t, err)
}

func TestValidateLimits(t *testing.T) {
	w := domain.Window{Name: "burst", Limit: 5, Period: time.Second}
	lim := func(key string, cost int64) domain.Limit { return domain.Limit{Key: key, Window: w, Cost: cost} }
	many := make([]domain.Limit, domain.MaxLimits+1)
	for i := range many {
		many[i] = lim(string(rune('a'+i)), 1)
	}
	long10 := domain.Window{Name: "sustained", Limit: 50, Period: 10 * time.Second}
	gcra10 := domain.Window{Name: "sustained", Limit: 50, Period: 10 * time.Second, Algorithm: domain.GCRA}
	long := make([]byte, domain.MaxKeyLen+1)
	for i := range long {
		long[i] = 'k'
	}
	tests := []struct {
		name   string
		limits []domain.Limit
		index  int
		field  string
	}{
		{"one limit", []domain.Limit{lim("a", 1)}, 0, ""},
		{"max limits", many[:domain.MaxLimits], 0, ""},
		{"cost equal to limit", []domain.Limit{lim("a", 5)}, 0, ""},
		{"no limits", nil, -1, "limits"},
		{"too many limits", many, -1, "limits"},
		{"empty key", []domain.Limit{lim("a", 1), lim("", 1)}, 1, "key"},
		{"key too long", []domain.Limit{lim(string(long), 1)}, 0, "key"},
		{"duplicate key", []domain.Limit{lim("a", 1), lim("b", 1), lim("a", 1)}, 2, "key"},
		{"shared log", []domain.Limit{lim("a", 2), {Key: "a", Window: long10, Cost: 2}}, 0, ""},
		{"shared log, another cost", []domain.Limit{lim("a", 2), {Key: "a", Window: long10, Cost: 1}}, 1, "cost"},
		{"shared key, gcra", []domain.Limit{lim("a", 1), {Key: "a", Window: gcra10, Cost: 1}}, 1, "key"},
		{"zero cost", []domain.Limit{lim("a", 0)}, 0, "cost"},
		{"negative cost", []domain.Limit{lim("a", -1)}, 0, "cost"},
		{"cost above limit", []domain.Limit{lim("a", 6)}, 0, "cost"},
		{"bad window", []domain.Limit{{Key: "a", Window: domain.Window{Limit: 0, Period: time.Second}, Cost: 1}}, 0, "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := domain.ValidateLimits(tt.limits)
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			var le *domain.LimitError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, tt.index, le.Index)
			assert.Equal(t, tt.field, le.Field)
			assert.True(t, errors.Is(err, domain.ErrInvalidLimit))
		})
	}
}

func TestSharesLog(t *testing.T) {
	w := domain.Window{Name: "burst", Limit: 5, Period: time.Second}
	limits := []domain.Limit{{Key: "a", Window: w, Cost: 1}, {Key: "b", Window: w, Cost: 1}, {Key: "a", Window: domain.Window{Limit: 9, Period: time.Minute}, Cost: 1}}
	for i, want := range []struct {
		first  int
		shared bool
	}{{0, false}, {1, false}, {0, true}} {
		first, shared := domain.SharesLog(limits, i)
		require.Equal(t, want.first, first, "limit %d", i)
		require.Equal(t, want.shared, shared, "limit %d", i)
	}
}
