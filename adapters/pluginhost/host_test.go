package pluginhost_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/pluginhost"
	"github.com/siteline/outbox/adapters/support/secretref"
	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/channel/v1/plugintest"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

func TestMain(m *testing.M) {
	helperModes()
	plugintest.Main(m, map[string]func() channel.Channel{
		"test":  func() channel.Channel { return testChannel{} },
		"bare":  func() channel.Channel { return bareChannel{} },
		"liar":  func() channel.Channel { return liarChannel{} },
		"noisy": func() channel.Channel { return noisyChannel{} },
		"per":   func() channel.Channel { return perTargetChannel{} },
	})
}

// testChannel is the plugin the host runs in these tests (the test binary
// itself, re-executed). With a url setting it GETs it and answers by its
// status, so a test server sees and gates each delivery from outside the
// plugin process. With a report setting it answers Permanent with what it
// received as its error text (see report), so a test sees the settings and
// targets the host resolved for it. With a freeze setting it stops its own
// process (SIGSTOP).
type testChannel struct{}

func (testChannel) Describe(context.Context) (channel.Description, error) {
	return channel.Description{Name: "test", Version: "1.2.3", Settings: []channel.Setting{
		{Name: "url"},
		{Name: "token", Secret: true},
		{Name: "log"},
		{Name: "mode", Allowed: []string{"a", "b"}},
		{Name: "required_one", Required: true},
		{Name: "getenv"},
		{Name: "report"},
		{Name: "freeze"},
	}}, nil
}

func (testChannel) Deliver(ctx context.Context, req channel.Request) channel.Result {
	if _, ok := req.Settings["report"]; ok {
		return report(req)
	}
	if _, ok := req.Settings["freeze"]; ok {
		// The whole process stops (SIGSTOP) and answers nothing more: a
		// hung plugin. Only SIGKILL ends it. Another thread may take the
		// signal, and this one run on for a moment: it must not answer.
		_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		<-ctx.Done()
		return channel.Retry(ctx.Err())
	}
	if name, ok := req.Settings["getenv"]; ok {
		return channel.Fail(errors.New(os.Getenv(name)))
	}
	if req.Settings["log"] != "" {
		channel.Logger().Warn("test plugin delivering", "list", req.Notification.List, "attempt", req.Notification.Attempt)
	}
	if u := req.Settings["url"]; u != "" {
		hreq, _ := http.NewRequestWithContext(ctx, http.MethodGet, u+"?id="+req.Notification.ID, nil)
		resp, err := http.DefaultClient.Do(hreq)
		if err != nil {
			return channel.Retry(errors.New("gate unreachable"))
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return channel.Fail(fmt.Errorf("gate answered %d", resp.StatusCode))
		}
	}
	return channel.Delivered(req.Targets...)
}

// received is what a plugin reports it received.
type received struct {
	Settings map[string]string
	Targets  []string
	UID      int // the plugin process's user
}

// report answers Permanent with the request's settings and targets as JSON
// in the error text.
func report(req channel.Request) channel.Result {
	b, _ := json.Marshal(received{Settings: req.Settings, Targets: req.Targets, UID: os.Getuid()})
	return channel.Result{Outcome: channel.Permanent, Error: string(b)}
}

// reported decodes what report put in a result's error.
func reported(t *testing.T, res ports.Result) received {
	t.Helper()
	var r received
	if err := json.Unmarshal([]byte(res.Error), &r); err != nil {
		t.Fatalf("no report in %+v: %v", res, err)
	}
	return r
}

// bareChannel is a plugin without a schema (no Describer): it reports what
// it received.
type bareChannel struct{}

func (bareChannel) Deliver(_ context.Context, req channel.Request) channel.Result { return report(req) }

// liarChannel answers Success with "resolved targets" it was never given:
// what a plugin that read a file of central's, or made a value up, would
// return for central to record and show.
type liarChannel struct{}

const liarValue = "root:x:0:0:made-up-by-the-plugin"

func (liarChannel) Deliver(context.Context, channel.Request) channel.Result {
	return channel.Delivered(liarValue)
}

func testPlugin(t *testing.T) pluginhost.Plugin { return selfPlugin(t, "test") }

// selfPlugin is the plugin of channel typ served by this test binary.
func selfPlugin(t *testing.T, typ string) pluginhost.Plugin {
	t.Helper()
	path, args, env, err := plugintest.Self(typ)
	if err != nil {
		t.Fatal(err)
	}
	return pluginhost.Plugin{Type: typ, Command: path, Args: args, Env: []string{env}}
}

// logBuffer is a slog handler target safe for concurrent writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startHost(t *testing.T, cfg pluginhost.Config) *pluginhost.Host {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg.MinRestartDelay = 10 * time.Millisecond
	h, err := pluginhost.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func mustChannel(t *testing.T, h *pluginhost.Host, typ string) ports.Channel {
	t.Helper()
	ch, ok := h.Channel(typ)
	if !ok {
		t.Fatalf("no channel %q", typ)
	}
	return ch
}

func delivery(settings map[string]string, targets ...string) ports.Delivery {
	if settings == nil {
		settings = map[string]string{}
	}
	return ports.Delivery{
		Notification: ports.Notification{ID: "0194f0d2-0000-7000-8000-000000000001", List: "ops", Subject: "s", Body: "b"},
		Targets:      targets, Settings: settings,
	}
}

func deliver(t *testing.T, ch ports.Channel, d ports.Delivery) ports.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return ch.Deliver(ctx, d)
}

func TestDeliverThroughPluginProcess(t *testing.T) {
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{testPlugin(t)}})
	res := deliver(t, mustChannel(t, h, "test"), delivery(nil, "a@example.com"))
	if res.Outcome != ports.OutcomeSuccess {
		t.Fatalf("got %+v", res)
	}
	st := h.Status()
	if len(st) != 1 || !st[0].Running || st[0].PID <= 0 || st[0].PID == os.Getpid() || st[0].Version != "1.2.3" {
		t.Fatalf("status %+v", st)
	}
	if _, ok := h.Channel("nope"); ok {
		t.Error("Channel of an unknown type answered ok")
	}
}

// secretsFixture is an allowed secrets directory with a token file, the
// policy that allows it and OUTBOX_SECRET_*, and a file outside it.
type secretsFixture struct {
	dir, outside string
	policy       secretref.Policy
}

func newSecretsFixture(t *testing.T) secretsFixture {
	t.Helper()
	root := t.TempDir()
	f := secretsFixture{dir: filepath.Join(root, "secrets"), outside: filepath.Join(root, "central.key")}
	if err := os.Mkdir(f.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for path, v := range map[string]string{filepath.Join(f.dir, "token"): "from-file\n", f.outside: "central-private-key"} {
		if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.policy = secretref.Policy{Dirs: []string{f.dir}, EnvPrefix: secretref.DefaultEnvPrefix}
	return f
}

func TestSecretReferencesResolvedAtDelivery(t *testing.T) {
	f := newSecretsFixture(t)
	t.Setenv("OUTBOX_SECRET_TEST_TOKEN", "from-env")
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{testPlugin(t)}, Secrets: f.policy})
	ch := mustChannel(t, h, "test")
	file := filepath.Join(f.dir, "token")

	got := reported(t, deliver(t, ch, delivery(map[string]string{"report": "", "token": "env:OUTBOX_SECRET_TEST_TOKEN"}, "file:"+file, "a@example.com")))
	if got.Settings["token"] != "from-env" || !slices.Equal(got.Targets, []string{"from-file", "a@example.com"}) {
		t.Fatalf("references not resolved: %+v", got)
	}
	// Resolved at delivery time: a changed file is read again.
	if err := os.WriteFile(file, []byte("rotated"), 0o600); err != nil {
		t.Fatal(err)
	}
	got = reported(t, deliver(t, ch, delivery(map[string]string{"report": "", "token": "file:" + file})))
	if got.Settings["token"] != "rotated" {
		t.Fatalf("file not read again: %+v", got)
	}

	res := deliver(t, ch, delivery(map[string]string{"token": "env:OUTBOX_SECRET_TEST_UNSET"}))
	if res.Outcome != ports.OutcomePermanent || !strings.Contains(res.Error, "OUTBOX_SECRET_TEST_UNSET") {
		t.Fatalf("unset variable: %+v, want Permanent naming the variable", res)
	}

	// Only settings the schema marks secret are resolved.
	got = reported(t, deliver(t, ch, delivery(map[string]string{"report": "env:OUTBOX_SECRET_TEST_TOKEN", "url": "file:" + file})))
	if got.Settings["report"] != "env:OUTBOX_SECRET_TEST_TOKEN" || got.Settings["url"] != "file:"+file {
		t.Fatalf("a setting that is not secret was resolved: %+v", got)
	}
}

// TestDisallowedReferenceFailsPermanent plays an admin who put references
// to central's files and settings into the directory (or a directory from
// before the policy): at delivery each fails Permanent, naming the
// reference, and the plugin receives nothing.
func TestDisallowedReferenceFailsPermanent(t *testing.T) {
	f := newSecretsFixture(t)
	t.Setenv("OUTBOX_STORE_DSN", "postgres://outbox:hunter2@db/outbox")
	if err := os.Symlink(f.outside, filepath.Join(f.dir, "link")); err != nil {
		t.Fatal(err)
	}
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{testPlugin(t)}, Secrets: f.policy})
	ch := mustChannel(t, h, "test")
	for _, ref := range []string{"file:" + f.outside, "file:/etc/passwd", "file:" + f.dir + "/../central.key",
		"file:" + filepath.Join(f.dir, "link"), "env:OUTBOX_STORE_DSN"} {
		for name, d := range map[string]ports.Delivery{
			"secret setting": delivery(map[string]string{"report": "", "token": ref}, "a@example.com"),
			"target":         delivery(map[string]string{"report": ""}, ref),
		} {
			res := deliver(t, ch, d)
			if res.Outcome != ports.OutcomePermanent || !strings.Contains(res.Error, ref) || !strings.Contains(res.Error, "not allowed") {
				t.Errorf("%s %s: %s %.120q, want Permanent naming the reference", name, ref, res.Outcome, res.Error)
			}
			if strings.Contains(res.Error, "central-private-key") || strings.Contains(res.Error, "hunter2") || strings.Contains(res.Error, "root:") {
				t.Errorf("%s %s: a value reached the result", name, ref)
			}
		}
	}
}

// TestPluginWithoutSchemaGetsNoSettingResolved: a plugin that describes no
// settings gets every setting as written; before, every setting of such a
// plugin was resolved, so that any setting could read central's files.
func TestPluginWithoutSchemaGetsNoSettingResolved(t *testing.T) {
	f := newSecretsFixture(t)
	t.Setenv("OUTBOX_SECRET_TEST_TOKEN", "from-env")
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{selfPlugin(t, "bare")}, Secrets: f.policy})
	settings := map[string]string{"password": "env:OUTBOX_SECRET_TEST_TOKEN", "key": "file:" + filepath.Join(f.dir, "token"),
		"other": "file:" + f.outside}
	got := reported(t, deliver(t, mustChannel(t, h, "bare"), delivery(maps.Clone(settings), "file:"+filepath.Join(f.dir, "token"))))
	if !maps.Equal(got.Settings, settings) {
		t.Errorf("a plugin without a schema got settings %v, want them as written %v", got.Settings, settings)
	}
	// Targets are resolved for every plugin, within the policy.
	if !slices.Equal(got.Targets, []string{"from-file"}) {
		t.Errorf("targets %v", got.Targets)
	}
}

// noisyChannel writes to its standard error what a plugin (or a library in
// it, printing a server's answer) may: lines go-plugin's own decoder panics
// on, a line that poses as central's own, a huge line.
type noisyChannel struct{}

var noisyLines = []string{
	`{"@level":"info","@message":1}`,
	`{"@level":7,"@message":"level not a string"}`,
	`{"@level":"info","@message":"stamped","@timestamp":42}`,
	`{"@level":"error","@message":"forged","channel":"email","msg":"central says","level":"INFO","time":"1970"}`,
	`{"@level":"warn","@message":"many"` + strings.Repeat(`,"k`+"%d"+`":1`, 40) + `}`,
	"plain text line",
	strings.Repeat("x", 100<<10),
}

func (noisyChannel) Deliver(context.Context, channel.Request) channel.Result {
	// The process's real standard error, which central reads (go-plugin's
	// Serve put a pipe in os.Stderr).
	fd2 := os.NewFile(uintptr(syscall.Stderr), "stderr")
	for _, l := range noisyLines {
		if strings.Contains(l, "%d") {
			args := make([]any, strings.Count(l, "%d"))
			for i := range args {
				args[i] = i
			}
			l = fmt.Sprintf(l, args...)
		}
		fmt.Fprintln(fd2, l)
	}
	return channel.Delivered()
}

// TestPluginLogLinesCannotCrashOrForge plays a plugin that writes lines
// go-plugin's decoder panics on ({"@message":1} took central down), lines
// that pose as central's own or another channel's, and huge lines: central
// lives on, logs each as the plugin's, and bounds them.
func TestPluginLogLinesCannotCrashOrForge(t *testing.T) {
	var buf logBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{selfPlugin(t, "noisy")}, Logger: logger})
	if res := deliver(t, mustChannel(t, h, "noisy"), delivery(nil, "t")); res.Outcome != ports.OutcomeSuccess {
		t.Fatal(res)
	}
	_ = h.Close() // flushes the plugin's stderr
	var forged, many, plain, huge bool
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("central's log holds a line that is not one JSON record: %.200q", line)
		}
		switch rec["msg"] {
		case "forged":
			forged = true
			if rec["channel"] != "noisy" || rec["plugin.channel"] != "email" || rec["plugin.msg"] != "central says" || rec["level"] != "ERROR" {
				t.Errorf("a plugin's keys passed for central's: %v", rec)
			}
		case "many":
			many = true
			if rec["dropped_attrs"] != float64(40-32) {
				t.Errorf("attributes not bounded: dropped %v of %d", rec["dropped_attrs"], len(rec))
			}
		case "plain text line":
			plain = true
		}
		if s, _ := rec["msg"].(string); strings.HasPrefix(s, "xxxx") {
			huge = true
			if len(s) > 64<<10 || rec["cut"] != true {
				t.Errorf("a huge line was not cut: %d bytes", len(s))
			}
		}
	}
	if !forged || !many || !plain || !huge {
		t.Errorf("lines missing (forged %v, many %v, plain %v, huge %v):\n%.3000s", forged, many, plain, huge, buf.String())
	}
}

// A plugin process gets what a program needs from central's environment,
// and nothing of central's settings or secrets.
func TestPluginEnvironment(t *testing.T) {
	t.Setenv("OUTBOX_STORE_DSN", "postgres://outbox:hunter2@db/outbox")
	t.Setenv("SMTP_PASSWORD", "hunter2")
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{testPlugin(t)}})
	ch := mustChannel(t, h, "test")
	for name, wantSet := range map[string]bool{"OUTBOX_STORE_DSN": false, "SMTP_PASSWORD": false, "PATH": true} {
		res := deliver(t, ch, delivery(map[string]string{"getenv": name}))
		if (res.Error != "") != wantSet {
			t.Errorf("plugin sees %s=%q", name, res.Error)
		}
	}
}

// When the rate limit has no room before the deadline, the delivery is not
// made, and says so (NotAttempted), with the wait as RetryAfter.
func TestRateLimitWithoutRoomIsNotAttempted(t *testing.T) {
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{testPlugin(t)}})
	ch := mustChannel(t, h, "test")
	d := delivery(nil, "t")
	d.RateLimit = 0.5 // one delivery every two seconds
	if res := deliver(t, ch, d); res.Outcome != ports.OutcomeSuccess {
		t.Fatalf("first delivery: %+v", res)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	res := ch.Deliver(ctx, d)
	if res.Outcome != ports.OutcomeTransient || !res.NotAttempted || res.RetryAfter < time.Second {
		t.Fatalf("second delivery within a second: %+v, want NotAttempted with RetryAfter about 2 s", res)
	}
}

func TestValidateSettingsAgainstSchema(t *testing.T) {
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{testPlugin(t)}})
	if err := h.ValidateSettings("test", map[string]string{"required_one": "x", "token": "env:T", "mode": "a"}); err != nil {
		t.Fatalf("valid settings refused: %v", err)
	}
	err := h.ValidateSettings("test", map[string]string{"token": "hunter2", "mode": "c", "colour": "red"})
	if !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("want ErrInvalid, got %v", err)
	}
	for _, want := range []string{`"required_one" is required`, `"mode" must be one of a, b`, `unknown setting "colour"`, `"token" must be a reference`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error repeats a secret value: %v", err)
	}
	if err := h.ValidateSettings("nope", nil); !errors.Is(err, pluginhost.ErrUnknownChannel) {
		t.Errorf("unknown type: %v", err)
	}
}

func TestChecksumPin(t *testing.T) {
	p := testPlugin(t)
	b, err := os.ReadFile(p.Command)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)

	p.SHA256 = hex.EncodeToString(sum[:])
	startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{p}})

	sum[0] ^= 0xff
	p.SHA256 = hex.EncodeToString(sum[:])
	h, err := pluginhost.New(pluginhost.Config{Plugins: []pluginhost.Plugin{p}})
	if err != nil {
		t.Fatal(err)
	}
	err = h.Start(t.Context())
	if err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("a binary with another checksum started: %v", err)
	}
	// The error gives the checksum the binary has, so that an operator who
	// upgraded it on purpose can pin the new one.
	sum[0] ^= 0xff
	if actual := hex.EncodeToString(sum[:]); !strings.Contains(err.Error(), "its SHA-256 checksum is "+actual+", not the pinned "+p.SHA256) {
		t.Errorf("the error %q does not give the actual checksum %s", err, actual)
	}
	if st := h.Status(); st[0].Running {
		t.Fatalf("status %+v after a refused start", st)
	}
}

func TestStartFailures(t *testing.T) {
	for name, p := range map[string]pluginhost.Plugin{
		"missing binary": {Type: "x", Command: "/nonexistent/plugin"},
		"not a plugin":   {Type: "x", Command: "/bin/true"},
	} {
		t.Run(name, func(t *testing.T) {
			h, err := pluginhost.New(pluginhost.Config{Plugins: []pluginhost.Plugin{p}, StartTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Start(t.Context()); err == nil {
				_ = h.Close()
				t.Fatal("Start succeeded")
			}
		})
	}
	_, err := pluginhost.New(pluginhost.Config{Plugins: []pluginhost.Plugin{
		{Type: "a", Command: "/x"}, {Type: "a", Command: "/y", SHA256: "abc"}, {Command: "/z"},
	}})
	for _, want := range []string{"second plugin", "64 hex", "no channel type"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config error %v lacks %q", err, want)
		}
	}
}

// gate is an HTTP server that holds each request until released, and
// counts requests in flight.
type gate struct {
	release  chan struct{}
	arrived  chan string
	inFlight atomic.Int64
	maxSeen  atomic.Int64
}

func newGate(t *testing.T) (*gate, string) {
	g := &gate{release: make(chan struct{}), arrived: make(chan string, 1000)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := g.inFlight.Add(1)
		defer g.inFlight.Add(-1)
		for {
			m := g.maxSeen.Load()
			if n <= m || g.maxSeen.CompareAndSwap(m, n) {
				break
			}
		}
		g.arrived <- r.URL.Query().Get("id")
		select {
		case <-g.release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() {
		select {
		case <-g.release:
		default:
			close(g.release)
		}
		srv.Close()
	})
	return g, srv.URL
}

func TestConcurrencyBoundPerChannel(t *testing.T) {
	p := testPlugin(t)
	p.MaxConcurrency = 2
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{p}})
	ch := mustChannel(t, h, "test")
	g, url := newGate(t)

	results := make(chan ports.Result, 6)
	for range 6 {
		go func() { results <- deliver(t, ch, delivery(map[string]string{"url": url}, "t")) }()
	}
	<-g.arrived
	<-g.arrived
	// Two are held at the gate; the other four must wait for a slot. Let
	// one through and the next arrives; the maximum seen stays two.
	close(g.release)
	for range 6 {
		if res := <-results; res.Outcome != ports.OutcomeSuccess {
			t.Fatalf("delivery: %+v", res)
		}
	}
	if m := g.maxSeen.Load(); m != 2 {
		t.Fatalf("at most %d deliveries were in flight at once, want exactly 2", m)
	}
}

func TestRateLimit(t *testing.T) {
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{testPlugin(t)}})
	ch := mustChannel(t, h, "test")
	const perSecond, n = 50.0, 100
	start := time.Now()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			d := delivery(nil, "t")
			d.RateLimit = perSecond
			if res := deliver(t, ch, d); res.Outcome != ports.OutcomeSuccess {
				t.Errorf("delivery: %+v", res)
			}
		})
	}
	wg.Wait()
	// A burst of 50 passes at once; the other 50 need at least one second.
	// Only this lower bound is certain; a slow machine takes longer.
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Fatalf("%d deliveries at %g/s took %s: the rate limit was not applied", n, perSecond, took)
	}
}

func TestPluginLogsReachCentralLog(t *testing.T) {
	var buf logBuffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{testPlugin(t)}, Logger: logger})
	d := delivery(map[string]string{"log": "yes"}, "t")
	d.Notification.RetryCount = 2
	if res := deliver(t, mustChannel(t, h, "test"), d); res.Outcome != ports.OutcomeSuccess {
		t.Fatal(res)
	}
	_ = h.Close() // flushes the plugin's stderr
	out := buf.String()
	for _, want := range []string{`"msg":"test plugin delivering"`, `"level":"WARN"`, `"list":"ops"`, `"attempt":3`, `"channel":"test"`} {
		if !strings.Contains(out, want) {
			t.Errorf("central's log lacks %s:\n%s", want, out)
		}
	}
}

// TestCrashedPluginIsRestarted kills the plugin process (SIGKILL) while
// deliveries are running in it: they end Transient, never Success, and the
// host restarts the process, through which the next deliveries succeed.
func TestCrashedPluginIsRestarted(t *testing.T) {
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{testPlugin(t)}})
	ch := mustChannel(t, h, "test")
	g, url := newGate(t)
	pid := h.Status()[0].PID

	results := make(chan ports.Result, 3)
	for range 3 {
		go func() { results <- deliver(t, ch, delivery(map[string]string{"url": url}, "t")) }()
	}
	for range 3 {
		<-g.arrived
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if res := <-results; res.Outcome != ports.OutcomeTransient {
			t.Fatalf("a delivery running in a killed plugin ended %+v, want Transient", res)
		}
	}
	close(g.release)
	// A delivery made between the crash and the moment go-plugin sees the
	// process gone may fail too (Transient, harmless); once the host has
	// restarted it, deliveries succeed.
	waittest.For(t, 30*time.Second, "the plugin restarted once", waittest.Holds(func() bool { return h.Status()[0].Restarts == 1 }))
	if res := deliver(t, ch, delivery(map[string]string{"url": url}, "t")); res.Outcome != ports.OutcomeSuccess {
		t.Fatalf("after restart: %+v", res)
	}
	st := h.Status()[0]
	if !st.Running || st.Restarts != 1 || st.PID == pid {
		t.Fatalf("status after restart %+v (old pid %d)", st, pid)
	}
}

func TestCloseStopsEveryProcess(t *testing.T) {
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{testPlugin(t)}})
	pid := h.Status()[0].PID
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	// Signal 0 tests for existence; Close waited for the exit, and the
	// process was reaped.
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("plugin process %d still exists after Close: %v", pid, err)
	}
}

// TestConfigValidate: New fills in the zeros; a negative ping setting or a
// restart backoff upside down is refused, each on its field.
func TestConfigValidate(t *testing.T) {
	if err := (pluginhost.Config{}).WithDefaults().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	_, err := pluginhost.New(pluginhost.Config{PingTimeout: -time.Second, PingFailures: -1,
		MinRestartDelay: time.Minute, MaxRestartDelay: time.Second, SocketGroup: "no-such-group-for-outbox"})
	for _, want := range []string{"PingTimeout: must be positive, got -1s", "PingFailures: must be positive, got -1",
		"MaxRestartDelay: 1s is below MinRestartDelay (1m0s)", `SocketGroup: no group "no-such-group-for-outbox" on this machine`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to say %q", err, want)
		}
	}
}
