package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/guard/guardtest"
	"github.com/siteline/outbox/ports/waittest"
)

// These tests play the outsider that sends gRPC header blocks too large to
// accept, and never ends them, to the site link of the real `outbox
// central` and to the site API of the real `outbox site`: gRPC decodes a
// call's headers before any tap handle can authenticate it. They watch the
// process's memory in /proc.

const (
	// headerConns and headerBlock are the attack: 8 connections, each with a
	// 12 MB header block. Decoded as gRPC's default allowed (16 MiB), they
	// cost the process about 60 MB each.
	headerConns = 8
	headerBlock = 12 << 20
	// maxHeaderGrowthKB bounds the process's peak memory growth under the
	// attack: a few connections' buffers, well under one block.
	maxHeaderGrowthKB = 48 << 10
	// headerClosed bounds the wait for the server to close an attacking
	// connection: well under the 80 s (ping interval and ping timeout) after
	// which gRPC alone would close it, far over the milliseconds it takes.
	headerClosed = 30 * time.Second
)

// floodHeaders opens headerConns connections to addr, sends on each a header
// block of headerBlock bytes for method without ending it, and waits until
// the server has closed every connection. It marks the test failed when a
// connection is still open after headerClosed.
func floodHeaders(t *testing.T, addr, method string) {
	t.Helper()
	block := guardtest.HeaderBlock(method, headerBlock)
	var wg sync.WaitGroup
	errs := make(chan error, headerConns)
	start := time.Now()
	for range headerConns {
		wg.Go(func() {
			conn, err := guardtest.Dial(addr, nil, nil)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			go func() { _ = guardtest.SendHeaderBlock(conn, block, false) }()
			errs <- guardtest.WaitClosed(conn, headerClosed)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a connection with an unfinished %d MB header block: %v", headerBlock>>20, err)
			return
		}
	}
	t.Logf("every connection closed %s after the attack began", time.Since(start).Round(time.Millisecond))
}

// TestLinkHugeHeaderBlocksBounded: central's site link closes each
// connection after its first 16 KiB of headers, its peak memory stays where
// it was, and the refusals are counted.
func TestLinkHugeHeaderBlocksBounded(t *testing.T) {
	c := startLinkCentral(t, "")
	hwmBefore := statusKB(t, c.pid, "VmHWM")
	floodHeaders(t, c.addr, "/outbox.link.v1.Central/Submit")
	hwmAfter := statusKB(t, c.pid, "VmHWM")
	t.Logf("central: VmHWM %d kB before, %d kB after", hwmBefore, hwmAfter)
	if grew := hwmAfter - hwmBefore; grew > maxHeaderGrowthKB {
		t.Errorf("central's peak memory grew by %d kB under %d header blocks of %d MB, want at most %d kB",
			grew, headerConns, headerBlock>>20, maxHeaderGrowthKB)
	}
	waitRefused(t, func() int {
		return metricValue(c.metric(t, `outbox_refusals_total{entrance="site_link",reason="header block too large"}`)) +
			metricValue(c.metric(t, `outbox_refusals_total{entrance="site_link",reason="header block refused"}`))
	}, headerConns)
}

// TestSiteAPIHugeHeaderBlocksBounded: the same attack on a site node's API
// (a token required): the node closes each connection, its peak memory
// stays where it was, and the refusals are counted.
func TestSiteAPIHugeHeaderBlocksBounded(t *testing.T) {
	s := startSiteNode(t)
	hwmBefore := statusKB(t, s.pid, "VmHWM")
	floodHeaders(t, s.api, "/outbox.site.v1.Site/Send")
	hwmAfter := statusKB(t, s.pid, "VmHWM")
	t.Logf("site node: VmHWM %d kB before, %d kB after", hwmBefore, hwmAfter)
	if grew := hwmAfter - hwmBefore; grew > maxHeaderGrowthKB {
		t.Errorf("the site node's peak memory grew by %d kB under %d header blocks of %d MB, want at most %d kB",
			grew, headerConns, headerBlock>>20, maxHeaderGrowthKB)
	}
	waitRefused(t, func() int {
		return metricValue(s.metric(t, `outbox_refusals_total{entrance="site_api",reason="header block too large"}`)) +
			metricValue(s.metric(t, `outbox_refusals_total{entrance="site_api",reason="header block refused"}`))
	}, headerConns)
}

// TestPageRefusesHugeHeaders: the operator page reads at most 32 KiB of a
// request's headers; a request with 64 KiB of them is answered 431 without
// being served.
func TestPageRefusesHugeHeaders(t *testing.T) {
	c := startLinkCentral(t, "")
	conn, err := net.Dial("tcp", c.http)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(runTimeout))
	req := "GET /healthz HTTP/1.1\r\nHost: outbox\r\nX-Big: " + strings.Repeat("A", 64<<10) + "\r\n\r\n"
	go func() { _, _ = io.WriteString(conn, req) }()
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer to 64 KiB of headers (%v)", err)
	}
	if !strings.Contains(status, " 431 ") {
		t.Fatalf("64 KiB of headers answered %q, want 431", strings.TrimSpace(status))
	}
}

// waitRefused waits until count() reaches n.
func waitRefused(t *testing.T, count func() int, n int) {
	t.Helper()
	waittest.For(t, runTimeout, fmt.Sprintf("%d header block refusals in /metrics", n), func() (bool, string) {
		got := count()
		return got >= n, fmt.Sprintf("%d counted", got)
	})
}

// metricValue is the value of a metric line, 0 for none.
func metricValue(line string) int {
	var v float64
	if i := strings.LastIndexByte(line, ' '); i >= 0 {
		_, _ = fmt.Sscan(line[i+1:], &v)
	}
	return int(v)
}

// siteNode is a running `outbox site`: one member on loopback, its API
// requiring a token, its central unreachable (the forwarder waits).
type siteNode struct {
	*proc
	api, metrics string
	pid          int
}

// startSiteNode starts a one-member site node with /metrics.
func startSiteNode(t *testing.T) *siteNode {
	t.Helper()
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc")
	}
	dir := t.TempDir()
	for name, content := range map[string]string{"api.token": "tok-api-5f1c", "central.token": "tok-central-9a2e"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	api, metricsAddr := freeLoopback(t), freeLoopback(t)
	config := fmt.Sprintf(`site: plant-1
node: a
data_dir: %q
members:
  - {id: a, raft: %q, api: %q}
api: {token: %q}
central: {addr: %q, token: %q}
metrics: {listen: %q}
log: {level: info, format: json}
`, filepath.Join(dir, "data"), freeLoopback(t), api, "file:"+filepath.Join(dir, "api.token"),
		freeLoopback(t), "file:"+filepath.Join(dir, "central.token"), metricsAddr)
	file := filepath.Join(dir, "site.yaml")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, dir, childEnv(), "site", "-config", file)
	p.waitFor(t, `"msg":"site node started"`, startTimeout)
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.exitCode(t, stopTimeout); code != 0 {
			t.Errorf("site node exited %d after SIGTERM:\n%s", code, p.Output())
		}
	})
	return &siteNode{proc: p, api: api, metrics: metricsAddr, pid: p.cmd.Process.Pid}
}

// metric returns the line of the node's /metrics that starts with series.
func (s *siteNode) metric(t *testing.T, series string) string {
	t.Helper()
	return (&linkCentral{http: s.metrics}).metric(t, series)
}
