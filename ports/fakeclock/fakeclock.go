// Package fakeclock is a ports.Clock that moves only when told to, for
// tests that step through time without sleeping.
package fakeclock

import (
	"sync"
	"time"

	"github.com/sluicehq/sluice/ports"
)

// Clock is a controllable ports.Clock. The zero value is not usable; call
// New. It is safe for simultaneous use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	tickers []*ticker
}

var _ ports.Clock = (*Clock)(nil)

// New returns a clock at start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's instant.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (or backwards when d < 0) and fires,
// in order, every tick that falls due, each at its own instant. A ticker
// delivers at most one pending tick, as time.Ticker does.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	for {
		var next *ticker
		for _, t := range c.tickers {
			if !t.stopped && !t.next.After(target) && (next == nil || t.next.Before(next.next)) {
				next = t
			}
		}
		if next == nil {
			break
		}
		if next.next.After(c.now) {
			c.now = next.next
		}
		at := next.next
		next.next = next.next.Add(next.every)
		select {
		case next.ch <- at:
		default:
		}
	}
	c.now = target
	c.mu.Unlock()
}

// Set moves the clock to t, firing due ticks as Advance does.
func (c *Clock) Set(t time.Time) { c.Advance(t.Sub(c.Now())) }

// NewTicker returns a ticker that fires every d of this clock's time.
func (c *Clock) NewTicker(d time.Duration) ports.Ticker {
	if d <= 0 {
		panic("fakeclock: non-positive ticker interval")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &ticker{clock: c, every: d, next: c.now.Add(d), ch: make(chan time.Time, 1)}
	c.tickers = append(c.tickers, t)
	return t
}

// Tickers returns how many tickers are running: tests use it to wait until
// a loop has started, and to check that Close stopped it.
func (c *Clock) Tickers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.tickers {
		if !t.stopped {
			n++
		}
	}
	return n
}

type ticker struct {
	clock   *Clock
	every   time.Duration
	next    time.Time
	ch      chan time.Time
	stopped bool
}

func (t *ticker) C() <-chan time.Time { return t.ch }

func (t *ticker) Stop() {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	t.stopped = true
	for i, o := range t.clock.tickers {
		if o == t {
			t.clock.tickers = append(t.clock.tickers[:i], t.clock.tickers[i+1:]...)
			break
		}
	}
}
