//go:build unix

package plugintest

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestRefusedAddrStaysRefused: a dial to the address is refused, and no
// listener can take its port while the test runs (the port of a closed
// listener could be taken, and a "server down" case would reach that
// server).
func TestRefusedAddrStaysRefused(t *testing.T) {
	addr := RefusedAddr(t)
	if l, err := net.Listen("tcp", addr); err == nil {
		_ = l.Close()
		t.Fatalf("a listener took the refused address %s", addr)
	}
	_, err := net.DialTimeout("tcp", addr, time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
}
