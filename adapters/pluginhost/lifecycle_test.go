package pluginhost_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/pluginhost/proctest"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/siteline/outbox/adapters/pluginhost"
	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// Helper modes of the test binary, chosen by environment variables (see
// helperModes).
const (
	// rawServeEnv makes the test binary a plugin built without the SDK's
	// Serve: go-plugin's Serve alone, so that it does not watch its parent.
	// Only the host's parent-death signal can end it when the host dies.
	rawServeEnv = "OUTBOX_PLUGINHOST_TEST_RAW_SERVE"
	// hostHelperEnv makes the test binary a host (a stand-in for central)
	// that runs the raw plugin, prints "plugin pid N" and runs until its
	// standard input ends, or it is killed.
	hostHelperEnv = "OUTBOX_PLUGINHOST_TEST_HOST"
)

// helperModes runs the helper mode the environment asks for, and exits; it
// returns when none is asked for.
func helperModes() {
	switch {
	case os.Getenv(rawServeEnv) != "":
		goplugin.Serve(&goplugin.ServeConfig{
			HandshakeConfig: channel.Handshake,
			Plugins:         channel.PluginMap(testChannel{}),
			GRPCServer:      goplugin.DefaultGRPCServer,
		})
		os.Exit(0)
	case os.Getenv(hostHelperEnv) != "":
		os.Exit(hostHelper())
	}
}

func hostHelper() int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The test channel served without the SDK's Serve.
	raw := pluginhost.Plugin{Type: "test", Command: exe, Args: []string{"-test.run=^$"}, Env: []string{rawServeEnv + "=1"}}
	h, err := pluginhost.New(pluginhost.Config{Plugins: []pluginhost.Plugin{raw}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := h.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("plugin pid %d\n", h.Status()[0].PID)
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = h.Close()
	return 0
}

// TestPluginDiesWithItsHost kills a host process with SIGKILL: its plugin,
// one built without the SDK's Serve (no parent check of its own), must die
// with it, by the parent-death signal the host asks the kernel for.
func TestPluginDiesWithItsHost(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux only")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), hostHelperEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	pid := proctest.ReadPID(t, stdout, "plugin pid ")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	took := proctest.WaitGone(t, 15*time.Second, "its host died", pid)
	t.Logf("the plugin (pid %d) was gone %s after its host was killed", pid, took)
}

// TestPluginOutlivesTheThreadThatStartedTheHost: the parent-death signal
// fires when the OS thread that started a process ends. The host is started
// from a goroutine locked to its thread that then exits, which ends the
// thread; the plugin must live on (the host starts it from a thread of its
// own).
func TestPluginOutlivesTheThreadThatStartedTheHost(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux only")
	}
	var (
		h   *pluginhost.Host
		err error
		tid int
	)
	// Go never ends the main thread: a goroutine that lands there stays
	// on it, locked, until the test ends, and the next try runs elsewhere.
	release := make(chan struct{})
	defer close(release)
	for range 2 {
		done := make(chan struct{})
		go func() {
			runtime.LockOSThread() // never unlocked: Go ends the thread when this goroutine exits
			if tid = syscall.Gettid(); tid == os.Getpid() {
				close(done)
				<-release
				runtime.UnlockOSThread()
				return
			}
			defer close(done)
			h, err = pluginhost.New(pluginhost.Config{Plugins: []pluginhost.Plugin{testPlugin(t)}})
			if err == nil {
				err = h.Start(context.Background())
			}
		}()
		<-done
		if h != nil || err != nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if h == nil {
		t.Fatal("no goroutine ran off the main thread")
	}
	t.Cleanup(func() { _ = h.Close() })
	pid := h.Status()[0].PID
	waittest.For(t, 30*time.Second, "the starting thread to end", waittest.Holds(func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid))
		return os.IsNotExist(err)
	}))
	// The thread is gone; a parent-death signal tied to it would have been
	// sent as it ended. The plugin still runs, and answers.
	if res := deliver(t, mustChannel(t, h, "test"), delivery(nil, "t")); res.Outcome != ports.OutcomeSuccess {
		t.Fatalf("delivery after the starting thread ended: %+v", res)
	}
	if st := h.Status()[0]; !proctest.Alive(pid) || st.PID != pid || st.Restarts != 0 {
		t.Fatalf("the plugin died with the thread that started the host: status %+v, first pid %d alive %v", st, pid, proctest.Alive(pid))
	}
}

// pingConfig pings often, so that a hung plugin is found in a few seconds.
func pingConfig(t *testing.T, logs *logBuffer) pluginhost.Config {
	return pluginhost.Config{
		Plugins:      []pluginhost.Plugin{testPlugin(t)},
		Logger:       slog.New(slog.NewTextHandler(logs, nil)),
		PingInterval: 100 * time.Millisecond,
		PingTimeout:  time.Second,
		PingFailures: 2,
	}
}

// TestHungPluginIsRestarted freezes the plugin process (it sends itself
// SIGSTOP during a delivery): it is alive but answers nothing. The host must
// find it hung by its pings, kill it (the delivery it held ends Transient:
// its outcome is unknown) and restart it, and the next delivery succeeds.
func TestHungPluginIsRestarted(t *testing.T) {
	var logs logBuffer
	h := startHost(t, pingConfig(t, &logs))
	ch := mustChannel(t, h, "test")
	pid := h.Status()[0].PID

	start := time.Now()
	res := deliver(t, ch, delivery(map[string]string{"freeze": ""}, "t"))
	held := time.Since(start)
	if res.Outcome != ports.OutcomeTransient || res.NotAttempted {
		t.Fatalf("the delivery held by the hung plugin ended %+v, want Transient (outcome unknown)\n%s", res, logs.String())
	}
	waittest.For(t, 30*time.Second, "the plugin running again in a new process", waittest.Holds(func() bool { st := h.Status()[0]; return st.Running && st.PID != pid }))
	restarted := time.Since(start)
	if res := deliver(t, ch, delivery(nil, "t")); res.Outcome != ports.OutcomeSuccess {
		t.Fatalf("delivery after the restart: %+v", res)
	}
	st := h.Status()[0]
	if st.Restarts != 1 || st.StoppedAnswering != 1 {
		t.Errorf("status %+v, want one restart, for not answering", st)
	}
	if proctest.Alive(pid) {
		t.Errorf("the hung process %d still exists", pid)
	}
	for _, want := range []string{"channel plugin did not answer a ping", "channel plugin stopped answering: killing it",
		"channel plugin stopped answering; restarting it", "reason=\"stopped answering\""} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs.String())
		}
	}
	t.Logf("hung plugin: its delivery ended after %s, a new process answered %s after the freeze", held.Round(time.Millisecond),
		restarted.Round(time.Millisecond))
}

// TestSlowPluginIsNotRestarted holds a delivery far longer than the pings
// may go unanswered: the process answers its pings meanwhile, so it is not
// restarted, and the delivery succeeds.
func TestSlowPluginIsNotRestarted(t *testing.T) {
	var logs logBuffer
	cfg := pingConfig(t, &logs)
	h := startHost(t, cfg)
	ch := mustChannel(t, h, "test")
	g, url := newGate(t)
	pid := h.Status()[0].PID

	result := make(chan ports.Result, 1)
	go func() { result <- deliver(t, ch, delivery(map[string]string{"url": url}, "t")) }()
	<-g.arrived
	// Not a wait for an outcome: the window in which a host that took a
	// slow delivery for a hung process would kill it (twice the time its
	// pings may go unanswered).
	window := 2 * time.Duration(cfg.PingFailures) * (cfg.PingInterval + cfg.PingTimeout)
	time.Sleep(window)
	close(g.release)
	if res := <-result; res.Outcome != ports.OutcomeSuccess {
		t.Fatalf("the slow delivery ended %+v", res)
	}
	if st := h.Status()[0]; st.PID != pid || st.Restarts != 0 || st.StoppedAnswering != 0 {
		t.Fatalf("a slow plugin that answers its pings was restarted: %+v (pid was %d)", st, pid)
	}
	if strings.Contains(logs.String(), "did not answer a ping") {
		t.Errorf("a ping went unanswered:\n%s", logs.String())
	}
	t.Logf("a delivery held %s (pings every %s) did not get the plugin restarted", window, cfg.PingInterval)
}

// TestCloseEndsAFrozenPlugin: a process that answers nothing, not even
// go-plugin's shutdown call, must not hold Close forever.
func TestCloseEndsAFrozenPlugin(t *testing.T) {
	cfg := pluginhost.Config{Plugins: []pluginhost.Plugin{testPlugin(t)}, PingInterval: time.Hour}
	h, err := pluginhost.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	pid := h.Status()[0].PID
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	start := time.Now()
	go func() {
		_ = h.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-closed
		t.Fatal("Close still waited for a frozen plugin 30 s later")
	}
	if proctest.Alive(pid) {
		t.Fatalf("the frozen plugin %d outlived Close", pid)
	}
	t.Logf("Close ended a frozen plugin in %s", time.Since(start).Round(time.Millisecond))
}

// TestSIGTERMDrainsThePlugin sends the plugin process SIGTERM while it holds
// a delivery: that delivery completes (Success, made once), a delivery made
// after the signal is refused by the stopping process and made by the next
// one (never twice), and the host restarts the process once it has exited.
func TestSIGTERMDrainsThePlugin(t *testing.T) {
	var logs logBuffer
	h := startHost(t, pluginhost.Config{Plugins: []pluginhost.Plugin{testPlugin(t)}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ch := mustChannel(t, h, "test")
	g, url := newGate(t)
	pid := h.Status()[0].PID

	first := make(chan ports.Result, 1)
	go func() { first <- deliver(t, ch, delivery(map[string]string{"url": url}, "t")) }()
	<-g.arrived
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waittest.For(t, 30*time.Second, "the plugin's line about SIGTERM", waittest.Holds(func() bool { return strings.Contains(logs.String(), "SIGTERM: refusing new deliveries") }))
	second := make(chan ports.Result, 1)
	go func() { second <- deliver(t, ch, delivery(map[string]string{"url": url}, "t")) }()
	close(g.release)
	if res := <-first; res.Outcome != ports.OutcomeSuccess {
		t.Fatalf("the delivery in flight at SIGTERM ended %+v, want Success\n%s", res, logs.String())
	}
	if res := <-second; res.Outcome != ports.OutcomeSuccess {
		t.Fatalf("the delivery made while the plugin drained ended %+v, want Success through the next process", res)
	}
	if n := len(g.arrived); n != 1 {
		t.Fatalf("the gate saw %d more requests after the first, want 1 (the second delivery, once)", n)
	}
	st := h.Status()[0]
	if st.PID == pid || st.Restarts != 1 || st.StoppedAnswering != 0 {
		t.Fatalf("status %+v, want a restart after the drained process exited (old pid %d)", st, pid)
	}
	if proctest.Alive(pid) {
		t.Fatalf("the drained process %d still runs", pid)
	}
}
