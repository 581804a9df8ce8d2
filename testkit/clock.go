package testkit

import (
	"sync"
	"time"
)

// Clock is a test's clock: it moves only when told (Advance). Its Now is
// what a component under test takes as its clock (quota.WithClock,
// claims.WithClock, the tenants admin's now). Safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock reading t0.
func NewClock(t0 time.Time) *Clock { return &Clock{t: t0} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock d forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
