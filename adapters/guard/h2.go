package guard

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
)

// The reasons of the refusals the gRPC connections of ServerOptions count.
const (
	reasonHandshake      = "tls handshake failed"
	reasonHeaderTooLarge = "header block too large"
	reasonHeaderTooSlow  = "header block too slow"
	reasonHeaderRefused  = "header block refused"
)

// guardedCreds wraps a server's transport credentials: it counts failed TLS
// handshakes, and puts a headerConn around each connection.
type guardedCreds struct {
	credentials.TransportCredentials
	limits   GRPCLimits
	refusals *Refusals
}

// ServerHandshake implements credentials.TransportCredentials.
func (g *guardedCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := g.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		// A connection closed before it said anything (a port probe) is
		// no attempt.
		if g.Info().SecurityProtocol == "tls" && !errors.Is(err, io.EOF) {
			g.refusals.Refuse(CallerKey(raw.RemoteAddr()), reasonHandshake)
		}
		return nil, nil, err
	}
	return newHeaderConn(conn, g.limits.MaxHeaderListBytes, g.limits.HeaderTimeout, g.refusals), info, nil
}

// Clone implements credentials.TransportCredentials.
func (g *guardedCreds) Clone() credentials.TransportCredentials {
	return &guardedCreds{TransportCredentials: g.TransportCredentials.Clone(), limits: g.limits, refusals: g.refusals}
}

// HTTP/2 framing (RFC 9113): the client's connection preface, the frame
// header, and what headerConn needs of the frame types and flags.
const (
	clientPrefaceLen  = len("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	frameHeaderLen    = 9
	frameHeaders      = 0x1
	frameContinuation = 0x9
	flagEndHeaders    = 0x4
)

// errHeaderBlock is what Read returns on a connection closed for its header
// block.
var errHeaderBlock = errors.New("guard: connection closed: header block over its bound")

// headerConn is a server connection (after TLS) that follows the HTTP/2
// frames its client sends, without decoding them, to bound each header
// block: gRPC decodes a whole block before it hands the headers to the
// server's tap handle, and while a block is incomplete nothing of gRPC's
// own bounds it in time. A block whose frames announce more than maxBlock
// bytes closes the connection at once ("header block too large"); so does
// a block still incomplete timeout after its first frame arrived ("header
// block too slow"). gRPC itself closes the connection on a block whose
// decoded size is over its bound (grpc.MaxHeaderListSize) or that does not
// decode, often before this parser has seen the next frame; gRPC offers no
// hook for it, so a close by the server, not after a read error, while the
// last frame read belongs to a header block is counted too ("header block
// refused").
//
// Only the goroutine that reads (gRPC's reader) touches the parser's
// state; the timer's function and Close read only the atomic flags.
type headerConn struct {
	net.Conn
	maxBlock int
	timeout  time.Duration
	refusals *Refusals
	key      string

	skip      int                  // bytes of the client preface still to pass
	head      [frameHeaderLen]byte // the frame header being read
	headN     int                  // its bytes read so far
	left      int                  // payload bytes of the current frame still to pass
	endsBlock bool                 // the current frame ends a header block
	inBlock   bool                 // a header block has begun and not ended
	block     int                  // the bytes its frames announced so far
	failed    bool                 // the connection was refused
	inHeader  bool                 // the last frame begun is part of a header block

	// What Close, on any goroutine, needs to know.
	refused   atomic.Bool // this parser or its timer refused the connection
	readErr   atomic.Bool // a read failed: the client closed, or the deadline passed
	atHeaders atomic.Bool // the last frame read is part of a header block

	mu     sync.Mutex
	timer  *time.Timer // closes the connection when a block is too slow
	armed  bool
	closed bool
}

func newHeaderConn(c net.Conn, maxBlock int, timeout time.Duration, refusals *Refusals) *headerConn {
	return &headerConn{Conn: c, maxBlock: maxBlock, timeout: timeout, refusals: refusals,
		key: CallerKey(c.RemoteAddr()), skip: clientPrefaceLen}
}

// Read implements net.Conn: it passes what it read through the frame
// parser, and closes the connection when a header block is too large.
func (c *headerConn) Read(p []byte) (int, error) {
	if c.failed {
		return 0, errHeaderBlock
	}
	n, err := c.Conn.Read(p)
	if n > 0 && !c.follow(p[:n]) {
		c.failed = true
		c.refused.Store(true)
		c.refusals.Refuse(c.key, reasonHeaderTooLarge, "max_bytes", c.maxBlock)
		_ = c.Close()
		return 0, errHeaderBlock
	}
	if err != nil {
		c.readErr.Store(true)
	}
	c.atHeaders.Store(c.inHeader)
	c.watch()
	return n, err
}

// follow advances the parser over b, the next bytes from the client. It
// returns false when a header block grew past maxBlock.
func (c *headerConn) follow(b []byte) bool {
	for len(b) > 0 {
		switch {
		case c.skip > 0:
			k := min(c.skip, len(b))
			c.skip -= k
			b = b[k:]
		case c.left > 0:
			k := min(c.left, len(b))
			c.left -= k
			b = b[k:]
			if c.left == 0 && c.endsBlock {
				c.inBlock, c.endsBlock = false, false
			}
		default:
			k := copy(c.head[c.headN:], b)
			c.headN += k
			b = b[k:]
			if c.headN < frameHeaderLen {
				continue
			}
			c.headN = 0
			length := int(c.head[0])<<16 | int(c.head[1])<<8 | int(c.head[2])
			typ, flags := c.head[3], c.head[4]
			c.left = length
			switch {
			case typ == frameHeaders:
				c.inBlock, c.block = true, 0
			case typ == frameContinuation && c.inBlock:
			default:
				// Any other frame; a CONTINUATION out of place is gRPC's to
				// refuse.
				c.inHeader = false
				continue
			}
			c.inHeader = true
			c.block += length
			if c.block > c.maxBlock {
				return false
			}
			c.endsBlock = flags&flagEndHeaders != 0
			if length == 0 && c.endsBlock {
				c.inBlock, c.endsBlock = false, false
			}
		}
	}
	return true
}

// watch arms the timer when a header block is open and stops it when none
// is. A block that begins and ends within one Read costs no timer.
func (c *headerConn) watch() {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed || c.inBlock == c.armed:
	case c.inBlock:
		if c.timer == nil {
			c.timer = time.AfterFunc(c.timeout, c.tooSlow)
		} else {
			c.timer.Reset(c.timeout)
		}
		c.armed = true
	default:
		c.timer.Stop()
		c.armed = false
	}
}

// tooSlow closes a connection whose header block did not end in time.
func (c *headerConn) tooSlow() {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return
	}
	c.refused.Store(true)
	c.refusals.Refuse(c.key, reasonHeaderTooSlow, "timeout", c.timeout.String())
	_ = c.Close()
}

// Close implements net.Conn; it stops the timer, and counts a close by the
// server in the middle of a header block (see headerConn).
func (c *headerConn) Close() error {
	c.mu.Lock()
	first := !c.closed
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	if first && c.atHeaders.Load() && !c.refused.Load() && !c.readErr.Load() {
		c.refusals.Refuse(c.key, reasonHeaderRefused)
	}
	return c.Conn.Close()
}
