//go:build !unix

package plugintest

import (
	"net"
	"testing"
)

// RefusedAddr returns a loopback address where connections are refused: the
// port of a listener closed at once. Another listener may be given the port
// while t runs, which the unix version rules out.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("plugintest: listen on loopback: %v", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
