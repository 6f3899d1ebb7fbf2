package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, to create a throwaway database

	"github.com/siteline/outbox/adapters/devkit/smtpcapture"
	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/plugins/builtin"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// Bounds of the end-to-end tests. They are deadlines, not waits: each test
// goes on as soon as what it waits for happens.
const (
	startTimeout = 2 * time.Minute
	stopTimeout  = 30 * time.Second
	runTimeout   = 2 * time.Minute
)

var (
	// binDir holds the binary built for the end-to-end tests; TestMain
	// makes it and removes it.
	binDir    string
	buildOnce sync.Once
	buildErr  error
)

// e2eVersion is stamped into the binary the tests build.
const e2eVersion = "v0.0.0-e2e"

func TestMain(m *testing.M) {
	if arg := os.Getenv(procScanEnv); arg != "" {
		os.Exit(procScan(arg, os.Stdout))
	}
	dir, err := os.MkdirTemp("", "outbox-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// outboxBinary builds cmd/outbox once (with the race detector when the
// tests have it) and returns its path.
func outboxBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(binDir, "outbox")
	buildOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("find the go tool: %w", err)
			return
		}
		args := []string{"build", "-o", bin, "-ldflags", "-X main.version=" + e2eVersion}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.Command(goTool, append(args, ".")...).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bin
}

// childEnv returns this process's environment without OUTBOX_* variables,
// plus extra.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTBOX_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// proc is a running outbox process whose output (stdout and stderr) is read
// line by line.
type proc struct {
	cmd *exec.Cmd

	mu     sync.Mutex
	output []string

	changed  chan struct{} // a line was added (capacity 1)
	readDone chan struct{} // the output reached EOF
	exited   chan struct{} // Wait returned
	waitErr  error
}

// start runs the binary with args in dir. The process is killed at the end
// of the test if it still runs.
func start(t *testing.T, dir string, env []string, args ...string) *proc {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(outboxBinary(t), args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout = w
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		t.Fatalf("start outbox: %v", err)
	}
	w.Close() // the child holds the write end now; EOF comes when it exits
	p := &proc{
		cmd:      cmd,
		changed:  make(chan struct{}, 1),
		readDone: make(chan struct{}),
		exited:   make(chan struct{}),
	}
	// Both goroutines end when the process does; the cleanup makes sure it
	// does and waits for them.
	go func() {
		defer close(p.readDone)
		defer r.Close()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.output = append(p.output, sc.Text())
			p.mu.Unlock()
			select {
			case p.changed <- struct{}{}:
			default:
			}
		}
	}()
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Kill()
			<-p.exited
		}
		<-p.readDone
	})
	return p
}

// Output returns everything the process printed so far.
func (p *proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.output, "\n")
}

// waitFor returns the first output line holding substr, reading the lines as
// they come. It fails the test when the process ends or the timeout passes
// first.
func (p *proc) waitFor(t *testing.T, substr string, timeout time.Duration) string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	seen, eof := 0, false
	for {
		p.mu.Lock()
		lines := p.output[seen:]
		seen = len(p.output)
		p.mu.Unlock()
		for _, l := range lines {
			if strings.Contains(l, substr) {
				return l
			}
		}
		if eof {
			t.Fatalf("outbox ended (%v) without printing %q:\n%s", p.waitErr, substr, p.Output())
		}
		select {
		case <-p.changed:
		case <-p.readDone:
			eof = true
			<-p.exited
		case <-deadline.C:
			t.Fatalf("outbox did not print %q within %s:\n%s", substr, timeout, p.Output())
		}
	}
}

// exitCode waits for the process to end and returns its exit code, failing
// the test when it runs past the timeout.
func (p *proc) exitCode(t *testing.T, timeout time.Duration) int {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	select {
	case <-p.exited:
	case <-deadline.C:
		// Ask the Go runtime for every goroutine's stack, so that the
		// failure says where it hangs.
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.exited:
			<-p.readDone
		case <-time.After(10 * time.Second):
		}
		t.Fatalf("outbox still runs %s later (its goroutines follow, dumped by SIGQUIT):\n%s", timeout, p.Output())
	}
	<-p.readDone
	var ee *exec.ExitError
	switch {
	case p.waitErr == nil:
		return 0
	case errors.As(p.waitErr, &ee):
		return ee.ExitCode()
	default:
		t.Fatalf("wait: %v", p.waitErr)
		return -1
	}
}

// runToEnd runs the binary to its end and returns its exit code and output.
func runToEnd(t *testing.T, dir string, env []string, args ...string) (int, string) {
	t.Helper()
	p := start(t, dir, env, args...)
	return p.exitCode(t, runTimeout), p.Output()
}

// jsonLine decodes one JSON log line.
func jsonLine(t *testing.T, line string) map[string]any {
	t.Helper()
	var rec map[string]any
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("log line is not JSON: %v: %s", err, line)
	}
	return rec
}

// centralUntilSIGTERM starts central, waits for "central started", checks that line,
// sends SIGTERM and checks the graceful exit.
func centralUntilSIGTERM(t *testing.T, dir string, env []string, args ...string) (started map[string]any, output string) {
	t.Helper()
	p := start(t, dir, env, append([]string{"central"}, args...)...)
	line := p.waitFor(t, `"msg":"central started"`, startTimeout)
	started = jsonLine(t, line)

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	if code := p.exitCode(t, stopTimeout); code != 0 {
		t.Fatalf("outbox central exited %d after SIGTERM, want 0:\n%s", code, p.Output())
	}
	out := p.Output()
	if !strings.Contains(out, `"msg":"central stopped"`) {
		t.Errorf("no \"central stopped\" line:\n%s", out)
	}
	return started, out
}

func TestVersionOfBuiltBinary(t *testing.T) {
	code, out := runToEnd(t, t.TempDir(), childEnv(), "version")
	if code != 0 || !strings.HasPrefix(out, "outbox "+e2eVersion+" (") {
		t.Fatalf("outbox version: exit %d: %q", code, out)
	}
}

// TestCentralDefaultSQLite runs central with no configuration at all, in an
// empty directory: it must use ./outbox.db, start, and stop on SIGTERM.
func TestCentralDefaultSQLite(t *testing.T) {
	dir := t.TempDir()
	started, out := centralUntilSIGTERM(t, dir,
		childEnv("OUTBOX_DISPATCH_INTERVAL=50ms", "OUTBOX_LOG_FORMAT=json", "OUTBOX_NODE_ID=e2e-1"))

	for k, want := range map[string]any{
		"level":             "INFO",
		"node_id":           "e2e-1",
		"store_driver":      "sqlite",
		"sqlite_path":       "outbox.db",
		"dispatch_interval": "50ms",
		"claim_lease":       "5m0s",
		"purge_interval":    "24h0m0s",
		"version":           e2eVersion,
	} {
		if started[k] != want {
			t.Errorf("central started: %s = %v, want %v (line %v)", k, started[k], want, started)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "outbox.db")); err != nil {
		t.Errorf("no ./outbox.db: %v", err)
	}
	// Every built-in channel ran as its own process, started from this
	// binary, and none outlives central.
	for _, typ := range builtin.Types() {
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, `"msg":"channel plugin started"`) && strings.Contains(l, `"channel":"`+typ+`"`) {
				line = l
			}
		}
		if line == "" {
			t.Errorf("no \"channel plugin started\" line for %s:\n%s", typ, out)
			continue
		}
		rec := jsonLine(t, line)
		pid, _ := rec["pid"].(float64)
		if rec["version"] == "" || pid <= 0 {
			t.Errorf("plugin %s: started line %v", typ, rec)
		}
		if err := syscall.Kill(int(pid), 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("plugin %s (pid %v) still exists after central stopped: %v", typ, pid, err)
		}
	}
}

// TestCentralRefusesInvalidChannelSettings: settings from the file that the
// channel's own schema refuses stop central at start, with the reason.
func TestCentralRefusesInvalidChannelSettings(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "central.yaml")
	data := "data_dir: " + dir + "\nchannels:\n  - type: email\n    settings: {host: localhost, tls: sometimes, colour: red}\n"
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := runToEnd(t, dir, childEnv("OUTBOX_LOG_FORMAT=json"), "central", "-config", file)
	if code != exitFailure {
		t.Errorf("exit code %d, want %d", code, exitFailure)
	}
	for _, want := range []string{`setting \"from\" is required`, `setting \"tls\" must be one of none, starttls, implicit`, `unknown setting \"colour\"`} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, `"msg":"central started"`) {
		t.Errorf("central started with invalid channel settings")
	}
}

// TestPluginDeliverEmail runs the built-in email channel the way central does
// (outbox plugin serve email, a separate process over gRPC with mutual TLS)
// through `outbox plugin deliver`, to a real SMTP server.
func TestPluginDeliverEmail(t *testing.T) {
	srv, err := smtpcapture.Start(smtpcapture.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	host, port, _ := strings.Cut(srv.Addr(), ":")
	code, out := runToEnd(t, t.TempDir(), childEnv(), "plugin", "deliver", "-allow", host,
		"-setting", "host="+host, "-setting", "port="+port, "-setting", "tls=none", "-setting", "from=outbox@example.com",
		"-target", "ops@example.com", "-subject", "Pump 3 stopped", "-body", "Pressure low.", "email")
	if code != exitOK || !strings.Contains(out, "outcome: Success") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	msgs := srv.Messages()
	if len(msgs) != 1 || msgs[0].To[0] != "ops@example.com" || !strings.Contains(string(msgs[0].Data), "Pump 3 stopped") {
		t.Fatalf("server got %+v", msgs)
	}

	// One recipient the server refuses: the others get it, and each
	// target's own outcome is printed.
	bounce, err := smtpcapture.Start(smtpcapture.Config{Reject: []string{"typo@exmaple.com"}})
	if err != nil {
		t.Fatal(err)
	}
	defer bounce.Close()
	bhost, bport, _ := strings.Cut(bounce.Addr(), ":")
	code, out = runToEnd(t, t.TempDir(), childEnv(), "plugin", "deliver", "-allow", bhost,
		"-setting", "host="+bhost, "-setting", "port="+bport, "-setting", "tls=none", "-setting", "from=outbox@example.com",
		"-target", "ops@example.com", "-target", "typo@exmaple.com", "-subject", "Pump 3 stopped", "email")
	if code != exitFailure || !strings.Contains(out, "outcome: Permanent") ||
		!regexp.MustCompile(`ops@example\.com +Success`).MatchString(out) ||
		!regexp.MustCompile(`typo@exmaple\.com +Permanent +.*550`).MatchString(out) {
		t.Fatalf("one refused recipient of two: exit %d:\n%s", code, out)
	}
	if msgs := bounce.Messages(); len(msgs) != 1 || len(msgs[0].To) != 1 || msgs[0].To[0] != "ops@example.com" {
		t.Fatalf("the bouncing server got %+v", msgs)
	}

	code, out = runToEnd(t, t.TempDir(), childEnv(), "plugin", "deliver", "-setting", "host="+host, "email")
	if code != exitFailure || !strings.Contains(out, "outcome: Permanent") {
		t.Fatalf("a delivery without from nor targets: exit %d:\n%s", code, out)
	}
}

// TestCentralWithConfigFile runs central from a configuration file, with a
// flag overriding it.
func TestCentralWithConfigFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "central.yaml")
	data := fmt.Sprintf(`
data_dir: %s
outbox:
  node_id: from-file
  dispatch_interval: 100ms
log:
  level: debug
  format: json
lists:
  - name: ops
    type: email
    targets: [alice@example.com]
channels:
  - type: email
    settings: {host: localhost, from: outbox@example.com, password: "env:OUTBOX_SECRET_SMTP_PASSWORD"}
`, filepath.Join(dir, "data"))
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	started, out := centralUntilSIGTERM(t, t.TempDir(), childEnv(), "-config", file, "-node-id", "from-flag")
	if started["node_id"] != "from-flag" || started["dispatch_interval"] != "100ms" || started["config_file"] != file {
		t.Errorf("central started = %v", started)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "outbox.db")); err != nil {
		t.Errorf("no outbox.db in data_dir: %v", err)
	}
	if strings.Contains(out, "alice@example.com") {
		t.Errorf("an e-mail address in the logs:\n%s", out)
	}
}

func TestCentralRefusesBrokenConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "central.yaml")
	if err := os.WriteFile(file, []byte("store:\n  drvier: sqlite\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  []string
		args []string
		want []string
	}{
		{
			name: "bad driver from env",
			env:  []string{"OUTBOX_STORE_DRIVER=orcale"},
			want: []string{
				"outbox central: invalid configuration, 1 problem:",
				`  store.driver: unknown driver "orcale" (want sqlite, postgres or mssql) [env OUTBOX_STORE_DRIVER]`,
			},
		},
		{
			name: "several problems",
			env:  []string{"OUTBOX_STORE_DRIVER=postgres", "OUTBOX_CLAIM_LEASE=10s"},
			args: []string{"-log-level", "loud"},
			want: []string{
				"outbox central: invalid configuration, 3 problems:",
				"  store.dsn: required when store.driver is postgres (it may hold a password: set it in the environment (OUTBOX_STORE_DSN), not in a file) [env OUTBOX_STORE_DRIVER]",
				"  outbox.claim_lease: 10s must exceed outbox.delivery_timeout (30s), or a slow delivery could be claimed twice [env OUTBOX_CLAIM_LEASE]",
				`  log.level: unknown level "loud" (want debug, info, warn or error) [flag -log-level]`,
			},
		},
		{
			name: "unknown key in the file",
			args: []string{"-config", file},
			want: []string{
				"outbox central: invalid configuration, 1 problem:",
				`  store.drvier: unknown setting "drvier" in store (known: driver, dsn, max_open_conns) [` + file + `:2]`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := runToEnd(t, dir, childEnv(tt.env...), append([]string{"central"}, tt.args...)...)
			if code != exitUsage {
				t.Errorf("exit code %d, want %d", code, exitUsage)
			}
			if want := strings.Join(tt.want, "\n"); out != want {
				t.Errorf("output:\n%s\nwant:\n%s", out, want)
			}
			if _, err := os.Stat(filepath.Join(dir, "outbox.db")); err == nil {
				t.Errorf("a refused configuration created outbox.db")
			}
		})
	}
}

func TestMigrateTwiceSQLite(t *testing.T) {
	dir := t.TempDir()
	for i := range 2 {
		code, out := runToEnd(t, dir, childEnv("OUTBOX_LOG_FORMAT=json"), "migrate", "-data-dir", filepath.Join(dir, "data"))
		if code != 0 || !strings.Contains(out, `"msg":"migrations applied"`) {
			t.Fatalf("migrate run %d: exit %d:\n%s", i+1, code, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "outbox.db")); err != nil {
		t.Fatalf("no outbox.db: %v", err)
	}
}

// TestPostgres migrates twice and runs central on a throwaway database of
// the PostgreSQL server named by OUTBOX_TEST_POSTGRES_DSN.
func TestPostgres(t *testing.T) {
	dsn := os.Getenv("OUTBOX_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("OUTBOX_TEST_POSTGRES_DSN is not set (.ci/test.sh sets it)")
	}
	dbDSN := throwawayPostgresDB(t, dsn)
	env := childEnv("OUTBOX_STORE_DRIVER=postgres", "OUTBOX_STORE_DSN="+dbDSN, "OUTBOX_LOG_FORMAT=json")
	dir := t.TempDir()
	for i := range 2 {
		if code, out := runToEnd(t, dir, env, "migrate"); code != 0 {
			t.Fatalf("migrate run %d: exit %d:\n%s", i+1, code, out)
		}
	}
	started, out := centralUntilSIGTERM(t, dir, env, "-dispatch-interval", "50ms")
	if started["store_driver"] != "postgres" {
		t.Errorf("central started = %v", started)
	}
	if u, err := url.Parse(dbDSN); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && strings.Contains(out, pw) {
			t.Errorf("the database password is in the logs:\n%s", out)
		}
	}
}

// throwawayPostgresDB creates a database for one test on the server of dsn
// and drops it at the end; it returns the DSN of the new database.
func throwawayPostgresDB(t *testing.T, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("OUTBOX_TEST_POSTGRES_DSN: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "outbox_cmd_" + hex.EncodeToString(b)
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

// TestCentralDeliversToSMTPCapture runs the built binary end to end: central
// with the embedded SMTP capture and the built-in email channel in its plugin
// process. A notification stored in its SQLite database (as ingest would) is
// delivered through the plugin to the capture server, which writes it as a
// .eml file, and the row ends Delivered.
func TestCentralDeliversToSMTPCapture(t *testing.T) {
	dir := t.TempDir()
	addr := freeLoopback(t)
	host, port, _ := strings.Cut(addr, ":")
	file := filepath.Join(dir, "central.yaml")
	data := fmt.Sprintf(`
data_dir: %[1]s
outbox: {dispatch_interval: 50ms}
log: {format: json}
smtp_capture: {addr: "%[2]s", dir: %[1]s/mail}
delivery: {network: {allow: ["%[3]s"]}}   # the capture is on loopback, which the default policy denies
lists:
  - {name: ops, type: email, targets: [ops@example.com]}
channels:
  - {type: email, settings: {host: "%[3]s", port: "%[4]s", tls: none, from: outbox@example.com}}
`, dir, addr, host, port)
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, dir, childEnv(), "central", "-config", file)
	p.waitFor(t, `"msg":"central started"`, startTimeout)

	n := insertAndWait(t, p, dir, ports.Notification{ID: "0194f0d2-7a3b-7c4d-8e5f-000000000042", Type: "email", List: "ops",
		Subject: "Pump 3 stopped", Body: "Pressure low."}, ports.StatusDelivered)
	if len(n.ResolvedTargets) != 1 || n.ResolvedTargets[0] != "ops@example.com" {
		t.Errorf("ResolvedTargets %v", n.ResolvedTargets)
	}
	eml, err := os.ReadFile(filepath.Join(dir, "mail", "000001.eml"))
	if err != nil || !strings.Contains(string(eml), "Pump 3 stopped") || strings.Contains(string(eml), "ops@example.com") {
		t.Errorf("captured message (%v):\n%s", err, eml)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exitCode(t, stopTimeout); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.Output())
	}
}

// insertAndWait inserts n, Pending from site-a, into the SQLite database of
// the central p runs in dir, as ingest would, and waits until it reaches
// status; it returns the row then.
func insertAndWait(t *testing.T, p *proc, dir string, n ports.Notification, status ports.Status) ports.Notification {
	t.Helper()
	ctx := t.Context()
	store, err := sqlstore.Open(ctx, sqlstore.Config{Driver: sqlstore.DriverSQLite, DSN: filepath.Join(dir, "outbox.db")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	now := time.Now().UTC()
	n.Status, n.SourceSite, n.CreatedAt, n.UpdatedAt = ports.StatusPending, "site-a", now, now
	if _, err := store.Notifications().Insert(ctx, []ports.Notification{n}); err != nil {
		t.Fatal(err)
	}
	var got ports.Notification
	waittest.For(t, runTimeout, fmt.Sprintf("the notification %s", status), func() (bool, string) {
		got, err = store.Notifications().Get(ctx, n.ID)
		return err == nil && got.Status == status, fmt.Sprintf("%+v, %v\n%s", got, err, p.Output())
	})
	return got
}

// TestPluginDescribeShowsKinds: outbox plugin describe runs the built-in
// email channel as a plugin process and prints each setting with its kind
// (the kind the page's channel form follows), its default and its values,
// wrapped to 80 columns when not on a terminal.
func TestPluginDescribeShowsKinds(t *testing.T) {
	code, out := runToEnd(t, t.TempDir(), childEnv(), "plugin", "describe", "email")
	if code != 0 {
		t.Fatalf("outbox plugin describe email: exit %d\n%s", code, out)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^  port .*default 587 for starttls, 465 for implicit, 25 for none; a number$`),
		regexp.MustCompile(`(?m)^  connect_timeout .*default 10s; a duration$`),
		regexp.MustCompile(`(?m)^  scopes .*a list$`),
		regexp.MustCompile(`(?m)^  tls .*one of none, starttls, implicit$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("the description lacks %s:\n%s", want, out)
		}
	}
	// Not a terminal: wrapped at 80 columns, each description below its
	// setting.
	for _, l := range strings.Split(out, "\n") {
		if len(l) > 80 {
			t.Errorf("a line of %d columns: %q", len(l), l)
		}
	}
	if !regexp.MustCompile(`(?m)^  host  required\n      Host name or IP address of the SMTP server\.$`).MatchString(out) {
		t.Errorf("host's description is not below it:\n%s", out)
	}
}
