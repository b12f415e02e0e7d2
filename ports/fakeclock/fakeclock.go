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
	timers  []*timer
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
// in order, every tick and timer that falls due, each at its own instant.
// The clock is at target when Advance returns, so a goroutine a timer woke
// reads target, not the timer's instant: a test that checks when a sleeper
// acts advances to the instant exactly. A ticker delivers at most
// one pending tick, as time.Ticker does; a timer fires once.
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
		tm := c.dueTimer(target)
		if tm >= 0 && (next == nil || !next.next.Before(c.timers[tm].at)) {
			c.fireTimer(tm)
			continue
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

// dueTimer returns the index of the earliest timer due by target (the
// first created among equals), or -1.
func (c *Clock) dueTimer(target time.Time) int {
	i := -1
	for j, t := range c.timers {
		if !t.at.After(target) && (i < 0 || t.at.Before(c.timers[i].at)) {
			i = j
		}
	}
	return i
}

// fireTimer delivers timer i at its instant and forgets it.
func (c *Clock) fireTimer(i int) {
	t := c.timers[i]
	c.timers = append(c.timers[:i], c.timers[i+1:]...)
	if t.at.After(c.now) {
		c.now = t.at
	}
	t.ch <- t.at
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

// NewTimer returns a timer that fires once, d of this clock's time from
// now: at the Advance that reaches that instant, or at once when d <= 0.
func (c *Clock) NewTimer(d time.Duration) ports.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{clock: c, at: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	return t
}

// Timers returns how many timers are waiting to fire: a test reads it to
// know that a goroutine is asleep on the clock before it advances it.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
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

type timer struct {
	clock *Clock
	at    time.Time
	ch    chan time.Time
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	for i, o := range t.clock.timers {
		if o == t {
			t.clock.timers = append(t.clock.timers[:i], t.clock.timers[i+1:]...)
			return true
		}
	}
	return false
}
