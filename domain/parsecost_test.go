package domain_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluicehq/sluice/domain"
)

func TestParseCost(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"7", 7, true},
		{" \t12 ", 12, true},
		{strconv.Itoa(domain.MaxLimit), domain.MaxLimit, true},
		{strconv.Itoa(domain.MaxLimit + 1), 0, false},
		{"99999999999999999999", 0, false},
		{"", 0, false},
		{"  ", 0, false},
		{"-1", 0, false},
		{"+1", 0, false},
		{"2.5", 0, false},
		{"1,2", 0, false},
		{"0x10", 0, false},
		{"1 2", 0, false},
	} {
		got, ok := domain.ParseCost(tc.in)
		assert.Equal(t, tc.ok, ok, "%q", tc.in)
		assert.Equal(t, tc.want, got, "%q", tc.in)
	}
}
