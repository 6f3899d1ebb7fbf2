package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/siteline/outbox/adapters/httpapi/api"
)

// freeLoopback returns a loopback address with a port free right now.
func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestCentralRefusesToStartWithoutAdmin: with the page on and no admin
// anywhere, central stops at start and says how to make one.
func TestCentralRefusesToStartWithoutAdmin(t *testing.T) {
	dir := t.TempDir()
	code, out := runToEnd(t, dir, childEnv("OUTBOX_LOG_FORMAT=json", "OUTBOX_HTTP_LISTEN="+freeLoopback(t)), "central")
	if code != exitFailure || !strings.Contains(out, "no admin account or token exists: set http.admin.name") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if strings.Contains(out, "operator page and API listening") {
		t.Fatal("the page was served without an admin")
	}
}

// TestCentralOperatorSurface runs the built binary with the page on: the
// configured admin logs in, makes a token, and the operator CLI uses it;
// /metrics, /healthz and /readyz answer without a login; the admin
// password never reaches the log.
func TestCentralOperatorSurface(t *testing.T) {
	dir := t.TempDir()
	const pw = "the admin's password"
	if err := os.WriteFile(filepath.Join(dir, "admin.pw"), []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeLoopback(t)
	file := filepath.Join(dir, "central.yaml")
	data := fmt.Sprintf(`
data_dir: %[1]s
log: {format: json}
lists:
  - {name: ops, type: email, targets: [ops@example.com]}
http:
  listen: "%[2]s"
  admin: {name: root, password: "file:%[1]s/admin.pw"}
`, dir, addr)
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, dir, childEnv(), "central", "-config", file)
	p.waitFor(t, `"msg":"operator page and API listening"`, startTimeout)
	base := "http://" + addr

	for path, want := range map[string]string{"/healthz": "ok", "/readyz": `"ready":true`, "/metrics": "outbox_queue_depth 0"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d %.300s", path, resp.StatusCode, b)
		}
	}

	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	post := func(path string, v any) []byte {
		b, _ := json.Marshal(v)
		resp, err := c.Post(base+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, out)
		}
		return out
	}
	post("/api/v1/login", api.Login{Name: "root", Password: pw})
	var tok api.CreatedToken
	if err := json.Unmarshal(post("/api/v1/tokens", api.NewToken{Name: "cli", Role: "operator"}), &tok); err != nil {
		t.Fatal(err)
	}

	env := childEnv("OUTBOX_SERVER="+base, "OUTBOX_TOKEN="+tok.Secret)
	code, out := runToEnd(t, dir, env, "lists", "list")
	if code != 0 || !strings.Contains(out, "ops") || !strings.Contains(out, "email") {
		t.Fatalf("outbox lists list: %d\n%s", code, out)
	}
	code, out = runToEnd(t, dir, env, "kpi", "--json")
	if code != 0 || !strings.Contains(out, `"queue_depth": 0`) {
		t.Fatalf("outbox kpi: %d\n%s", code, out)
	}
	// An operator token may not manage users.
	code, out = runToEnd(t, dir, env, "users", "list")
	if code != exitFailure || !strings.Contains(out, "forbidden") {
		t.Fatalf("outbox users list as operator: %d\n%s", code, out)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exitCode(t, stopTimeout); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.Output())
	}
	if strings.Contains(p.Output(), pw) || strings.Contains(p.Output(), tok.Secret) {
		t.Fatal("a password or token reached the log")
	}
}

// TestStoreReadinessHidesTheDriverError: /readyz is public, so a failed
// ping answers a fixed text and the driver's words go to the log.
func TestStoreReadinessHidesTheDriverError(t *testing.T) {
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	driverErr := errors.New("failed to connect to `user=outbox database=outbox`: 10.0.0.5:5432: dial error")
	check := storeReadiness(func(context.Context) error { return driverErr }, logger)
	err := check(t.Context())
	if err == nil || strings.Contains(err.Error(), "user=") || strings.Contains(err.Error(), "10.0.0.5") {
		t.Fatalf("readiness error %v", err)
	}
	if !strings.Contains(log.String(), "10.0.0.5") {
		t.Fatalf("the log lacks the driver's error:\n%s", log.String())
	}
	if err := storeReadiness(func(context.Context) error { return nil }, logger)(t.Context()); err != nil {
		t.Fatal(err)
	}
}
