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
	if code != exitFailure || !strings.Contains(out, "this needs the admin role") {
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

// TestCentralServesMetricsApart runs the built binary with metrics.listen
// set: /metrics and /readyz leave the page's listener (404 there) for the
// metrics listener, /healthz stays on both; a failed login at the page is
// logged with the account masked and counted on /metrics, and a burst of
// them is answered 429 with Retry-After.
func TestCentralServesMetricsApart(t *testing.T) {
	dir := t.TempDir()
	const pw = "the admin's password"
	if err := os.WriteFile(filepath.Join(dir, "admin.pw"), []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	page, metricsAddr := freeLoopback(t), freeLoopback(t)
	file := filepath.Join(dir, "central.yaml")
	data := fmt.Sprintf(`
data_dir: %[1]s
log: {format: json}
http:
  listen: "%[2]s"
  admin: {name: root, password: "file:%[1]s/admin.pw"}
metrics:
  listen: "%[3]s"
`, dir, page, metricsAddr)
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, dir, childEnv(), "central", "-config", file)
	p.waitFor(t, `"msg":"operator page and API listening"`, startTimeout)
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for path, want := range map[string]int{"/metrics": 404, "/readyz": 404, "/healthz": 200} {
		if code, body := get("http://" + page + path); code != want {
			t.Errorf("page listener %s: %d, want %d: %.200s", path, code, want, body)
		}
	}
	for path, want := range map[string]string{"/metrics": "outbox_queue_depth 0", "/readyz": `"ready":true`, "/healthz": "ok"} {
		if code, body := get("http://" + metricsAddr + path); code != 200 || !strings.Contains(body, want) {
			t.Errorf("metrics listener %s: %d %.300s", path, code, body)
		}
	}

	login := func() *http.Response {
		b, _ := json.Marshal(api.Login{Name: "ops@example.com", Password: "a wrong guess"})
		resp, err := http.Post("http://"+page+"/api/v1/login", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := login(); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a wrong password: %d", resp.StatusCode)
	}
	line := p.waitFor(t, `"msg":"http: refused"`, startTimeout)
	if !strings.Contains(line, `"user":"o***@example.com"`) || !strings.Contains(line, `"caller":"127.0.0.1"`) ||
		!strings.Contains(line, `"reason":"login failed"`) {
		t.Fatalf("the failed login's log line: %s", line)
	}
	var last *http.Response
	for range 10 {
		last = login()
	}
	if last.StatusCode != http.StatusTooManyRequests || last.Header.Get("Retry-After") == "" {
		t.Fatalf("the eleventh wrong password: %d, Retry-After %q", last.StatusCode, last.Header.Get("Retry-After"))
	}
	_, body := get("http://" + metricsAddr + "/metrics")
	for _, want := range []string{
		`outbox_refusals_total{entrance="http",reason="login failed"} 6`,
		`outbox_refusals_total{entrance="http",reason="login throttled (address)"} 5`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exitCode(t, stopTimeout); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.Output())
	}
	if out := p.Output(); strings.Contains(out, "a wrong guess") || strings.Contains(out, "ops@example.com") {
		t.Fatal("a password or an unmasked account name reached the log")
	}
}
