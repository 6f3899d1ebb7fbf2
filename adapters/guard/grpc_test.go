package guard

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/siteline/outbox/adapters/devkit/tlstest"
	"github.com/siteline/outbox/adapters/guard/guardtest"
	"github.com/siteline/outbox/ports/waittest"
)

// wait bounds every wait on a condition: generous, for loaded machines.
const wait = 30 * time.Second

// startGRPC serves the health service with l's options and creds on
// loopback, and returns its address and refusals.
func startGRPC(t *testing.T, l GRPCLimits, creds credentials.TransportCredentials) (string, *Refusals) {
	t.Helper()
	r := NewRefusals("test", nil, 0)
	s := grpc.NewServer(l.ServerOptions(creds, r)...)
	healthpb.RegisterHealthServer(s, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-done
	})
	return lis.Addr().String(), r
}

// waitCount waits until r counted n refusals for reason.
func waitCount(t *testing.T, r *Refusals, reason string, n int) {
	t.Helper()
	waittest.For(t, wait, fmt.Sprintf("%d refusals %q counted", n, reason), func() (bool, string) {
		got := r.Count(reason)
		return got >= n, fmt.Sprintf("%d counted", got)
	})
}

// check calls the health service with one header of size bytes.
func check(addr string, size int) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-pad", strings.Repeat("p", size))
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// TestHeaderBlockOverTheBoundClosesTheConnection plays the client that sends
// a header block of 12 MB (HEADERS and CONTINUATION frames, never ending
// it), which gRPC's default would decode up to 16 MiB before any tap handle
// runs: the connection is closed after the first 16 KiB and the refusal is
// counted. A call whose headers fit is served; one whose headers do not is
// not.
func TestHeaderBlockOverTheBoundClosesTheConnection(t *testing.T) {
	addr, r := startGRPC(t, GRPCLimits{}, nil)
	if err := check(addr, 8<<10); err != nil {
		t.Fatalf("a call with 8 KiB of headers: %v", err)
	}

	conn, err := guardtest.Dial(addr, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	block := guardtest.HeaderBlock("/grpc.health.v1.Health/Check", 12<<20)
	sent := make(chan error, 1)
	go func() { sent <- guardtest.SendHeaderBlock(conn, block, false) }()
	if err := guardtest.WaitClosed(conn, wait); err != nil {
		t.Fatalf("a 12 MB header block: %v", err)
	}
	if err := <-sent; err == nil {
		t.Fatal("the whole 12 MB header block was taken")
	}
	// Refused here on its size on the wire, or by gRPC on its decoded size
	// when gRPC decoded the first frame before this parser saw the second.
	waittest.For(t, wait, "one refusal counted", func() (bool, string) {
		large, refused := r.Count(reasonHeaderTooLarge), r.Count(reasonHeaderRefused)
		return large+refused == 1, fmt.Sprintf("%d too large, %d refused", large, refused)
	})

	// gRPC's own clients read the bound from the server's SETTINGS and do
	// not send such a call.
	if err := check(addr, 20<<10); err == nil {
		t.Fatal("a call with 20 KiB of headers was served")
	}
}

// TestHeaderBlockThatNeverEndsIsClosed plays the client that begins a small
// header block and never ends it: gRPC would wait for the rest until its
// ping timeout (the client cannot answer a ping in the middle of a block).
// The connection is closed after HeaderTimeout and counted. A block that
// ends in time is served, however slowly its frames came.
func TestHeaderBlockThatNeverEndsIsClosed(t *testing.T) {
	addr, r := startGRPC(t, GRPCLimits{HeaderTimeout: 300 * time.Millisecond}, nil)
	conn, err := guardtest.Dial(addr, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := guardtest.SendHeaderBlock(conn, guardtest.HeaderBlock("/grpc.health.v1.Health/Check", 100), false); err != nil {
		t.Fatal(err)
	}
	if err := guardtest.WaitClosed(conn, wait); err != nil {
		t.Fatalf("an unfinished header block: %v", err)
	}
	waitCount(t, r, reasonHeaderTooSlow, 1)
	if n := r.Count(reasonHeaderTooLarge) + r.Count(reasonHeaderRefused); n != 0 {
		t.Fatalf("%d refusals as too large", n)
	}
	if err := check(addr, 100); err != nil {
		t.Fatalf("a call after the refusal: %v", err)
	}
	if n := r.Count(reasonHeaderTooSlow) + r.Count(reasonHeaderRefused); n != 1 {
		t.Fatalf("%d refusals after a good call, want 1", n)
	}
}

// TestFailedTLSHandshakesAreCounted: garbage instead of a ClientHello is
// counted, a port probe that says nothing is not.
func TestFailedTLSHandshakesAreCounted(t *testing.T) {
	ca := tlstest.NewCA(t, "CA")
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "server")}})
	addr, r := startGRPC(t, GRPCLimits{}, creds)
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "\x16\x03\x01\x00\x05hello-garbage\r\n")
		_ = c.SetReadDeadline(time.Now().Add(wait))
		if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("the garbage handshake was not ended")
		}
		c.Close()
	}
	waitCount(t, r, reasonHandshake, 3)

	tc := &tls.Config{RootCAs: ca.Pool, ServerName: "localhost"}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a call over TLS: %v", err)
	}
	if n := r.Count(reasonHandshake); n != 3 {
		t.Fatalf("%d failed handshakes counted, want 3", n)
	}
}

// FuzzHeaderFrames feeds a header watcher arbitrary client bytes, whole and
// cut in two at every point: it never panics, and where the bytes are cut
// changes nothing of what it decides.
func FuzzHeaderFrames(f *testing.F) {
	pre := []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	block := guardtest.HeaderBlock("/p", 40)
	f.Add(append(append(append([]byte{}, pre...), guardtest.Frame(4, 0, 0, nil)...), guardtest.Frame(1, 4, 1, block)...), 64)
	f.Add(append(append([]byte{}, pre...), guardtest.Frame(1, 0, 1, block[:10])...), 16)
	f.Add(append(append(append([]byte{}, pre...), guardtest.Frame(1, 0, 1, block[:10])...), guardtest.Frame(9, 4, 1, block[10:])...), 64)
	f.Add(append(append([]byte{}, pre...), 0xff, 0xff, 0xff, 1, 0, 0, 0, 0, 1), 100)
	f.Add([]byte("garbage"), 0)
	f.Fuzz(func(t *testing.T, b []byte, max int) {
		max = max&0xffff + 1
		run := func(parts ...[]byte) (ok bool, h *headerConn) {
			h = &headerConn{maxBlock: max, skip: clientPrefaceLen}
			for _, p := range parts {
				if !h.follow(p) {
					return false, h
				}
			}
			return true, h
		}
		wantOK, want := run(b)
		for i := range len(b) + 1 {
			ok, got := run(b[:i], b[i:])
			if ok != wantOK || (ok && (got.inBlock != want.inBlock || got.block != want.block || got.left != want.left || got.headN != want.headN)) {
				t.Fatalf("cut at %d: ok %v inBlock %v block %d; whole: ok %v inBlock %v block %d",
					i, ok, got.inBlock, got.block, wantOK, want.inBlock, want.block)
			}
		}
		if want.block > max && wantOK {
			t.Fatalf("a block of %d bytes passed a bound of %d", want.block, max)
		}
	})
}

// TestLimitsValidate: the defaults hold; a zero or negative field as given
// is reported on its field, and WithDefaults keeps a negative one for
// Validate to see; connection bounds keep Total not below PerAddress.
func TestLimitsValidate(t *testing.T) {
	if err := (GRPCLimits{}).WithDefaults().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	l := GRPCLimits{IdleTimeout: -time.Second}.WithDefaults()
	l.MaxConcurrentStreams = 0
	err := l.Validate()
	if got := fmt.Sprint(err); got != "MaxConcurrentStreams: must be positive, got 0 (leave it out for the default)\n"+
		"IdleTimeout: must be positive, got -1s (leave it out for the default)" {
		t.Fatalf("errors %q", got)
	}
	if err := (ConnLimits{}).Validate(); err != nil {
		t.Fatalf("no bounds: %v", err)
	}
	if got := fmt.Sprint(ConnLimits{PerAddress: 8, Total: 2}.Validate()); got != "Total: 2 is below PerAddress (8)" {
		t.Fatalf("conns: %q", got)
	}
}
