package fakeclock_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/ports/fakeclock"
)

func TestAdvanceFiresDueTicks(t *testing.T) {
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	c := fakeclock.New(start)
	tk := c.NewTicker(10 * time.Second)
	assert.Equal(t, 1, c.Tickers())

	c.Advance(9 * time.Second)
	select {
	case <-tk.C():
		t.Fatal("ticked before its interval")
	default:
	}
	c.Advance(time.Second)
	select {
	case at := <-tk.C():
		assert.Equal(t, start.Add(10*time.Second), at)
	default:
		t.Fatal("no tick at the interval")
	}
	// Three intervals at once: one pending tick, as with time.Ticker.
	c.Advance(30 * time.Second)
	require.Len(t, tk.C(), 1)
	assert.Equal(t, start.Add(40*time.Second), c.Now())

	tk.Stop()
	assert.Equal(t, 0, c.Tickers())
	<-tk.C()
	c.Advance(time.Minute)
	assert.Len(t, tk.C(), 0, "no tick after Stop")
}

func TestBackwards(t *testing.T) {
	start := time.Unix(1000, 0)
	c := fakeclock.New(start)
	c.Advance(-time.Minute)
	assert.Equal(t, start.Add(-time.Minute), c.Now())
	c.Set(start)
	assert.Equal(t, start, c.Now())
}
