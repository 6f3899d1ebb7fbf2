package email

import (
	"context"
	"net"
	"sync"
	"time"
)

// deadlineConn is a network connection whose deadlines never run past the
// deadline of the delivery using it, and which is interrupted when that
// delivery's context ends. go-mail sets deadlines from its own timeout
// before every exchange; the limit keeps them within the caller's context.
type deadlineConn struct {
	net.Conn

	mu          sync.Mutex
	limit       time.Time // zero: no limit
	interrupted bool      // the bound context ended: every deadline has passed
}

// pastDeadline is a deadline that has passed: it interrupts blocked I/O.
var pastDeadline = time.Unix(1, 0)

// clamp returns t, or the limit when the limit comes first. A zero t (no
// deadline) becomes the limit.
func (c *deadlineConn) clamp(t time.Time) time.Time {
	if c.interrupted {
		return pastDeadline
	}
	if c.limit.IsZero() {
		return t
	}
	if t.IsZero() || c.limit.Before(t) {
		return c.limit
	}
	return t
}

// SetDeadline sets the read and write deadlines, clamped to the limit.
func (c *deadlineConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.SetDeadline(c.clamp(t))
}

// SetReadDeadline sets the read deadline, clamped to the limit.
func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.SetReadDeadline(c.clamp(t))
}

// SetWriteDeadline sets the write deadline, clamped to the limit.
func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.SetWriteDeadline(c.clamp(t))
}

// bind limits the connection to ctx until the returned function is called:
// deadlines are clamped to ctx's deadline, and when ctx ends, pending and
// future I/O fail at once, for good: the connection must then be closed.
// The connection's deadline is set to at most timeout from now.
func (c *deadlineConn) bind(ctx context.Context, timeout time.Duration) (unbind func()) {
	c.mu.Lock()
	c.limit = time.Time{}
	if d, ok := ctx.Deadline(); ok {
		c.limit = d
	}
	_ = c.Conn.SetDeadline(c.clamp(time.Now().Add(timeout)))
	c.mu.Unlock()

	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.interrupted = true
		_ = c.Conn.SetDeadline(pastDeadline)
	})
	return func() {
		stop()
		c.mu.Lock()
		defer c.mu.Unlock()
		c.limit = time.Time{}
	}
}
