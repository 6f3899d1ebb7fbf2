package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/siteline/outbox/ports/waittest"
)

// These tests play the attacker against the site link of the real `outbox
// central` process, and watch that process's memory and descriptors in
// /proc.

// linkCentral is a running central serving the site link on loopback,
// plaintext, to the token site plant-1, and its page and /metrics.
type linkCentral struct {
	*proc
	addr, http string
	pid        int
}

// startLinkCentral starts central with no plugins, the site link on a free
// loopback port (with extra YAML lines appended to the link section), and
// the page and /metrics on another.
func startLinkCentral(t *testing.T, linkExtra string) *linkCentral {
	t.Helper()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc")
	}
	dir := t.TempDir()
	for name, content := range map[string]string{"plant-1.token": "tok-plant-1-a8e3f0c2d9b1", "admin.pw": "the admin's password"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr, httpAddr := freeLoopback(t), freeLoopback(t)
	config := fmt.Sprintf(`data_dir: %q
plugins: {builtin: [none]}
log: {level: info, format: json}
http:
  listen: %q
  admin: {name: root, password: %q}
link:
  listen: %q
  sites: [{id: plant-1, token: %q}]
%s`, filepath.Join(dir, "data"), httpAddr, "file:"+filepath.Join(dir, "admin.pw"), addr,
		"file:"+filepath.Join(dir, "plant-1.token"), linkExtra)
	file := filepath.Join(dir, "central.yaml")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, dir, childEnv(), "central", "-config", file)
	p.waitFor(t, `"msg":"central started"`, startTimeout)
	p.waitFor(t, `"msg":"site link listening"`, startTimeout)
	p.waitFor(t, `"msg":"operator page and API listening"`, startTimeout)
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.exitCode(t, stopTimeout); code != 0 {
			t.Errorf("central exited %d after SIGTERM:\n%s", code, p.Output())
		}
	})
	return &linkCentral{proc: p, addr: addr, http: httpAddr, pid: p.cmd.Process.Pid}
}

// statusKB reads a "Vm..." line of /proc/<pid>/status, in kB.
func statusKB(t *testing.T, pid int, field string) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatalf("%s: %v", field, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// openFDs counts the descriptors the process holds.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// refusalLines counts central's refusal lines on the link so far.
func (c *linkCentral) refusalLines() int {
	return strings.Count(c.Output(), `"msg":"site_link: refused"`)
}

// metric returns the line of /metrics that starts with series.
func (c *linkCentral) metric(t *testing.T, series string) string {
	t.Helper()
	resp, err := http.Get("http://" + c.http + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, series+" ") {
			return l
		}
	}
	return ""
}

// rawBytes is a gRPC codec that puts the bytes it is given on the wire as
// they are.
type rawBytes struct{}

func (rawBytes) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawBytes) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawBytes) Name() string { return "proto" }

// bigSubmit is a valid outbox.link.v1 SubmitRequest of about size bytes:
// one notification whose body is that large.
func bigSubmit(size int) []byte {
	var sub []byte
	sub = protowire.AppendTag(sub, 1, protowire.BytesType) // id
	sub = protowire.AppendBytes(sub, []byte("0195f0d2-7a3b-7c4d-8e5f-000000000042"))
	sub = protowire.AppendTag(sub, 2, protowire.BytesType) // list
	sub = protowire.AppendBytes(sub, []byte("ops"))
	sub = protowire.AppendTag(sub, 4, protowire.BytesType) // body
	sub = protowire.AppendBytes(sub, []byte(strings.Repeat("B", size)))
	sub = protowire.AppendTag(sub, 9, protowire.BytesType) // source site
	sub = protowire.AppendBytes(sub, []byte("plant-1"))
	var req []byte
	req = protowire.AppendTag(req, 1, protowire.BytesType) // notifications
	return protowire.AppendBytes(req, sub)
}

// TestLinkUnauthenticatedBigSubmitsStayUnread: 30 concurrent Submits of
// 15 MB each, without credentials, are refused Unauthenticated on their
// headers: central's peak resident memory stays where it was (the messages
// are never read), and the refusals write one log line.
func TestLinkUnauthenticatedBigSubmitsStayUnread(t *testing.T) {
	const (
		calls = 30
		size  = 15 << 20
		// Bound of central's growth: 30 messages read would be 450 MB
		// before decoding.
		maxGrowthKB = 100 << 10
	)
	c := startLinkCentral(t, "")
	payload := bigSubmit(size)
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(nil), grpc.ForceCodec(rawBytes{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	rssBefore, hwmBefore := statusKB(t, c.pid, "VmRSS"), statusKB(t, c.pid, "VmHWM")
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	var wg sync.WaitGroup
	codesSeen := make([]codes.Code, calls)
	for i := range calls {
		wg.Go(func() {
			var reply []byte
			err := conn.Invoke(ctx, "/outbox.link.v1.Central/Submit", &payload, &reply)
			codesSeen[i] = status.Code(err)
		})
	}
	wg.Wait()
	hwmAfter, rssAfter := statusKB(t, c.pid, "VmHWM"), statusKB(t, c.pid, "VmRSS")
	t.Logf("central: VmRSS %d kB before, %d kB after; VmHWM %d kB before, %d kB after", rssBefore, rssAfter, hwmBefore, hwmAfter)
	for i, code := range codesSeen {
		if code != codes.Unauthenticated {
			t.Errorf("call %d: %v, want Unauthenticated", i, code)
		}
	}
	if grew := hwmAfter - hwmBefore; grew > maxGrowthKB {
		t.Errorf("central's peak memory grew by %d kB under %d unauthenticated %d MB Submits, want at most %d kB",
			grew, calls, size>>20, maxGrowthKB)
	}
	if n := c.refusalLines(); n < 1 || n > 2 {
		t.Errorf("%d refusal lines for %d refused calls from one address, want 1 (or 2 across a minute)", n, calls)
	}
	series := `outbox_refusals_total{entrance="site_link",reason="no credentials"}`
	if got, want := c.metric(t, series), fmt.Sprintf("%s %d", series, calls); got != want {
		t.Errorf("/metrics: %q, want %q", got, want)
	}
}

// TestLinkPrefaceOnlySocketsBounded: 3,000 connections from 30 loopback
// addresses that send the HTTP/2 preface and nothing more. Central holds at
// most link.connections.total of them at any time (the rest are closed at
// once), closes the held ones when the handshake timeout passes, and a
// connection that completed its preface and then sits idle is closed after
// the idle timeout. Its descriptors come back to where they were; the
// refusals write at most one line per address.
func TestLinkPrefaceOnlySocketsBounded(t *testing.T) {
	const (
		sockets   = 3000
		addresses = 30
		total     = 256
		slack     = 32 // descriptors central may open meanwhile (its store, logs, timers)
	)
	c := startLinkCentral(t, fmt.Sprintf(`  handshake_timeout: 1s
  idle_timeout: 2s
  connections: {per_address: 64, total: %d}
`, total))
	base := openFDs(t, c.pid)

	// A few connections that complete the preface and settings, then idle.
	const idlers = 5
	var idle []net.Conn
	for range idlers {
		conn, err := net.Dial("tcp", c.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
			t.Fatal(err)
		}
		idle = append(idle, conn)
	}

	var (
		mu      sync.Mutex
		conns   []net.Conn
		dialErr atomic.Int64
		wg      sync.WaitGroup
	)
	for a := range addresses {
		wg.Go(func() {
			d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+a))}}
			for range sockets / addresses {
				conn, err := d.Dial("tcp", c.addr)
				if err != nil {
					dialErr.Add(1)
					continue
				}
				_, _ = io.WriteString(conn, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
				mu.Lock()
				conns = append(conns, conn)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	held := openFDs(t, c.pid)
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
	}()
	t.Logf("central: %d descriptors before, %d with %d sockets dialed (%d dials failed)", base, held, len(conns), dialErr.Load())
	if len(conns) < sockets*9/10 {
		t.Fatalf("only %d of %d sockets connected", len(conns), sockets)
	}
	if held > base+total+slack {
		t.Errorf("central holds %d descriptors with %d preface-only sockets, want at most %d (%d before + %d connections + %d)",
			held, len(conns), base+total+slack, base, total, slack)
	}

	// The held ones close after the handshake timeout, the idle ones after
	// the idle timeout (and gRPC's 5 s goodbye).
	var n int
	waittest.For(t, 60*time.Second, "central to close the attack's descriptors", func() (bool, string) {
		n = openFDs(t, c.pid)
		return n <= base+slack/4, fmt.Sprintf("central holds %d descriptors (%d before the attack)", n, base)
	})
	t.Logf("central: %d descriptors once the timeouts passed", n)
	for i, conn := range idle {
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.Copy(io.Discard, conn); err != nil {
			t.Errorf("idle connection %d: %v, want it closed by central", i, err)
		}
	}
	if n := c.refusalLines(); n > addresses+1 {
		t.Errorf("%d refusal lines for connections from %d addresses, want at most one per address", n, addresses)
	}
}
