// Package guardtest plays HTTP/2 clients that a gRPC server must bound
// before it knows who calls: header blocks too large to accept, and header
// blocks that never end; and LogBuffer, where those tests count the lines
// the refusals write. The tests of the entrances (the site link, the site
// API, the Raft transport, the login, adapters/guard itself) use it against
// real servers on loopback.
package guardtest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// frameMax is the largest frame payload a client may send before the
// server's SETTINGS say more (RFC 9113, SETTINGS_MAX_FRAME_SIZE).
const frameMax = 16384

// HeaderBlock returns an HPACK header block of a gRPC call of path: the
// usual pseudo-headers and content type, and a field "x-big" of size bytes,
// every field a literal never indexed and without Huffman coding, so that
// the block is about as long on the wire as it is decoded.
func HeaderBlock(path string, size int) []byte {
	var b []byte
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path},
		{":authority", "outbox"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		b = literal(b, f[0], f[1])
	}
	big := make([]byte, size)
	for i := range big {
		big[i] = 'A'
	}
	return literal(b, "x-big", string(big))
}

// literal appends a "literal header field never indexed" with a new name.
func literal(b []byte, name, value string) []byte {
	b = append(b, 0x10)
	b = appendString(b, name)
	return appendString(b, value)
}

// appendString appends an HPACK string literal without Huffman coding.
func appendString(b []byte, s string) []byte {
	b = appendInt(b, 7, uint64(len(s)))
	return append(b, s...)
}

// appendInt appends v as an HPACK integer with an n-bit prefix (the
// prefix's other bits zero).
func appendInt(b []byte, n uint, v uint64) []byte {
	limit := uint64(1)<<n - 1
	if v < limit {
		return append(b, byte(v))
	}
	b = append(b, byte(limit))
	v -= limit
	for v >= 128 {
		b = append(b, byte(v&0x7f|0x80))
		v >>= 7
	}
	return append(b, byte(v))
}

// Frame returns an HTTP/2 frame.
func Frame(typ, flags byte, stream uint32, payload []byte) []byte {
	b := make([]byte, 9, 9+len(payload))
	b[0], b[1], b[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	b[3], b[4] = typ, flags
	b[5], b[6], b[7], b[8] = byte(stream>>24)&0x7f, byte(stream>>16), byte(stream>>8), byte(stream)
	return append(b, payload...)
}

// Dial connects to addr (from local when it is not nil), over TLS with cfg
// when it is not nil (offering only HTTP/2), and sends the client's
// connection preface and an empty SETTINGS frame.
func Dial(addr string, local net.IP, cfg *tls.Config) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	if local != nil {
		d.LocalAddr = &net.TCPAddr{IP: local}
	}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if cfg != nil {
		cfg = cfg.Clone()
		cfg.NextProtos = []string{"h2"}
		tc := tls.Client(conn, cfg)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			conn.Close()
			return nil, fmt.Errorf("guardtest: TLS handshake: %w", err)
		}
		_ = tc.SetDeadline(time.Time{})
		conn = tc
	}
	if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		conn.Close()
		return nil, err
	}
	if _, err := conn.Write(Frame(0x4, 0, 0, nil)); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// SendHeaderBlock sends block on stream 1 as a HEADERS frame followed by
// CONTINUATION frames of at most 16 KiB, the last one ending the block
// (END_HEADERS) only when end is set. It returns the error of the first
// write that failed: the server closed the connection.
func SendHeaderBlock(conn net.Conn, block []byte, end bool) error {
	typ := byte(0x1)
	for first := true; first || len(block) > 0; first = false {
		k := min(frameMax, len(block))
		var flags byte
		if k == len(block) && end {
			flags = 0x4
		}
		if _, err := conn.Write(Frame(typ, flags, 1, block[:k])); err != nil {
			return err
		}
		block, typ = block[k:], 0x9
	}
	return nil
}

// WaitClosed reads and drops what the server sends on conn until it closes
// the connection, and returns nil then; it returns an error when conn is
// still open after timeout.
func WaitClosed(conn net.Conn, timeout time.Duration) error {
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	_, err := io.Copy(io.Discard, conn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("guardtest: the connection was still open after %s", timeout)
	}
	return nil
}
