package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/siteline/outbox/ports"
)

func TestDeliveryNetworkPolicyFromTheConfiguration(t *testing.T) {
	l, err := load(t, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Cfg.Delivery.NetworkPolicy()
	if err != nil || len(p.Allowed())+len(p.Denied()) != 0 {
		t.Fatalf("default policy: %v, %v; want the built-in rules alone", p, err)
	}
	l, err = load(t, "delivery:\n  network:\n    allow: [127.0.0.1, 169.254.0.0/16]\n    deny: [10.9.0.0/16]\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = l.Cfg.Delivery.NetworkPolicy(); err != nil {
		t.Fatal(err)
	}
	for addr, allowed := range map[string]bool{
		"127.0.0.1": true, "127.0.0.2": false, "169.254.10.1": true, "169.254.169.254": false,
		"10.9.1.1": false, "10.8.1.1": true, "192.168.1.1": true,
	} {
		if err := p.Check(netip.MustParseAddr(addr)); (err == nil) != allowed {
			t.Errorf("%s: %v, want allowed %v", addr, err, allowed)
		}
	}
}

// TestDevReachesLoopbackOnly: outbox dev's demo lists go to receivers on
// loopback (its captures), so its policy allows loopback; nothing else is
// reached, so that a channel of an overlay set to a real SMTP server or
// webhook never sends out, as the banner says, unless -allow-external
// lifts it (and the banner says that instead).
func TestDevReachesLoopbackOnly(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{devPasswordFile(dir), devTokenFile(dir)} {
		if err := os.WriteFile(p, []byte("a secret of outbox dev"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, external := range []bool{false, true} {
		f := devFlags{freePorts: true, log: LogConfig{Level: "info", Format: "json"}, allowExternal: external}
		cfg, err := devCentralConfig(f, dir, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		p, err := cfg.Delivery.NetworkPolicy()
		if err != nil {
			t.Fatal(err)
		}
		for _, addr := range []string{"127.0.0.1", "::1"} {
			if err := p.Check(netip.MustParseAddr(addr)); err != nil {
				t.Errorf("-allow-external %v: %v", external, err)
			}
		}
		if err := p.Check(netip.MustParseAddr("169.254.169.254")); err == nil {
			t.Errorf("-allow-external %v: outbox dev allows the metadata address", external)
		}
		for _, addr := range []string{"142.250.74.46", "10.1.2.3", "192.168.1.10", "2a00:1450:4001:82b::200e"} {
			if err := p.Check(netip.MustParseAddr(addr)); (err == nil) != external {
				t.Errorf("-allow-external %v: %s: %v", external, addr, err)
			}
		}
		banner := devBanner(devRun{hooks: "http://127.0.0.1:8090", allowExternal: external})
		if got := strings.Contains(banner, "never out"); got == external {
			t.Errorf("-allow-external %v: banner %q", external, banner)
		}
		if got := strings.Contains(banner, "-allow-external"); got != external {
			t.Errorf("-allow-external %v: banner %q", external, banner)
		}
	}
}

// TestCentralRefusesAWebhookToLoopback runs the built binary as the review
// did: a list of the configuration file aims the webhook channel at an
// internal service on loopback. Under the default policy, passed by central
// to its webhook plugin process, the notification parks at its first
// attempt, its last error names the policy and nothing of the service's
// answer, and the service gets no request.
func TestCentralRefusesAWebhookToLoopback(t *testing.T) {
	var requests atomic.Int64
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, "root-password=hunter2")
	}))
	defer internal.Close()

	dir := t.TempDir()
	file := filepath.Join(dir, "central.yaml")
	data := fmt.Sprintf(`
data_dir: %[1]s
outbox: {dispatch_interval: 50ms}
log: {format: json}
lists:
  - {name: internal, type: webhook, targets: ["%[2]s/internal-admin"]}
channels:
  - {type: webhook, retry: {max_retries: 5, interval: 50ms}}
`, dir, internal.URL)
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, dir, childEnv(), "central", "-config", file)
	p.waitFor(t, `"msg":"central started"`, startTimeout)
	if out := p.Output(); !strings.Contains(out, `"msg":"delivery network policy`) {
		t.Errorf("central did not log its delivery network policy:\n%s", out)
	}

	n := insertAndWait(t, p, dir, ports.Notification{ID: "0194f0d2-7a3b-7c4d-8e5f-0000000000a1", Type: "webhook", List: "internal",
		Subject: "s", Body: "b"}, ports.StatusParked)
	if want := "address 127.0.0.1 is denied by the delivery network policy"; !strings.Contains(n.LastError, want) ||
		strings.Contains(n.LastError, "hunter2") || strings.Contains(n.LastError, "internal-admin") || n.RetryCount != 0 {
		t.Errorf("last error %q after %d retries; want the policy's refusal at the first attempt", n.LastError, n.RetryCount)
	}
	if got := requests.Load(); got != 0 {
		t.Errorf("the internal service got %d requests", got)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exitCode(t, stopTimeout); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.Output())
	}
}
