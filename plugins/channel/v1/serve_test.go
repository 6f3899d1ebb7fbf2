package channel

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/pluginhost/proctest"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/siteline/outbox/plugins/channel/v1/internal/pb"
	"github.com/siteline/outbox/ports/waittest"
)

// roleEnv gives the test binary a role other than running the tests, for the
// tests of Serve's parent check:
//
//   - "plugin" serves echoChannel with Serve, as a plugin process.
//   - "parent" plays central for the parent check alone: it starts a plugin
//     whose standard error is a file (so that only its parent tells it
//     central is gone), waits for its handshake line, prints "ready PID" and
//     waits to be killed.
//   - "central" plays central behind a wrapper that stays the plugin's
//     parent (as sudo does): it starts a "wrapper" with pipes as standard
//     output and error, prints "ready PID" (the plugin's) once the plugin
//     answered its handshake, and waits to be killed.
//   - "wrapper" starts a plugin with its own standard output and error, prints
//     "pid PID" (the plugin's), and waits for it, then for ever: it outlives
//     the plugin, so that the plugin's parent never changes.
//
// None of these processes asks for a parent-death signal.
const roleEnv = "OUTBOX_CHANNEL_TEST_ROLE"

// stderrFileEnv names the file the "parent" role gives the plugin as its
// standard error.
const stderrFileEnv = "OUTBOX_CHANNEL_TEST_STDERR"

func TestMain(m *testing.M) {
	switch role := os.Getenv(roleEnv); role {
	case "":
		os.Exit(m.Run())
	case "plugin":
		Serve(echoChannel{})
		os.Exit(0)
	case "parent", "central", "wrapper":
		if err := playRole(role); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
			os.Exit(2)
		}
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
		os.Exit(2)
	}
}

// echoChannel delivers nothing and succeeds.
type echoChannel struct{}

func (echoChannel) Deliver(context.Context, Request) Result { return Delivered() }

// self is a command that runs this test binary in role.
func self(role string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), roleEnv+"="+role)
	return cmd, nil
}

// pluginCmd runs this test binary as a plugin, with the environment
// go-plugin's client would give it (without mutual TLS: nobody connects).
func pluginCmd() (*exec.Cmd, error) {
	cmd, err := self("plugin")
	if err != nil {
		return nil, err
	}
	cmd.Env = append(cmd.Env, Handshake.MagicCookieKey+"="+Handshake.MagicCookieValue, "PLUGIN_PROTOCOL_VERSIONS=1")
	return cmd, nil
}

// handshake reads lines from r until go-plugin's handshake line, noting the
// "pid N" line on the way, if any.
func handshake(r *bufio.Reader) (pid int, err error) {
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return pid, fmt.Errorf("no handshake line: %w", err)
		}
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "pid "); ok {
			pid, _ = strconv.Atoi(p)
		}
		if strings.Contains(line, "|grpc|") {
			return pid, nil
		}
	}
}

func playRole(role string) error {
	switch role {
	case "wrapper":
		cmd, err := pluginCmd()
		if err != nil {
			return err
		}
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		fmt.Printf("pid %d\n", cmd.Process.Pid)
		_ = cmd.Wait()
		time.Sleep(time.Hour) // outlive the plugin; the test kills this process
		return nil
	case "parent":
		cmd, err := pluginCmd()
		if err != nil {
			return err
		}
		f, err := os.Create(os.Getenv(stderrFileEnv))
		if err != nil {
			return err
		}
		cmd.Stderr = f
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		if _, err := handshake(bufio.NewReader(out)); err != nil {
			return err
		}
		fmt.Printf("ready %d\n", cmd.Process.Pid)
		go func() { _, _ = io.Copy(io.Discard, out) }()
		return cmd.Wait()
	default: // central
		cmd, err := self("wrapper")
		if err != nil {
			return err
		}
		cmd.Stderr = io.Discard // a pipe central reads, as go-plugin's
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		r := bufio.NewReader(out)
		pid, err := handshake(r)
		if err != nil || pid == 0 {
			return fmt.Errorf("plugin pid %d: %v", pid, err)
		}
		fmt.Printf("ready %d\n", pid)
		_, _ = io.Copy(io.Discard, r)
		return cmd.Wait()
	}
}

// startRole starts this test binary in role and returns it and the pid it
// printed on its "ready PID" line.
func startRole(t *testing.T, role string, env ...string) (*exec.Cmd, int) {
	t.Helper()
	cmd, err := self(role)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, proctest.ReadPID(t, out, "ready ")
}

// TestServeExitsWhenItsParentDies kills the process that started a plugin
// (with SIGKILL, and no parent-death signal asked for): the plugin, whose
// standard error is a file, can tell only by its parent changing, and must
// exit within seconds.
func TestServeExitsWhenItsParentDies(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	parent, pid := startRole(t, "parent", stderrFileEnv+"="+filepath.Join(t.TempDir(), "stderr"))
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	took := proctest.WaitGone(t, 15*time.Second, "central died", pid)
	t.Logf("the plugin (pid %d) exited %s after its parent was killed", pid, took)
}

// TestServeExitsWhenCentralDiesBehindAWrapper kills central while a wrapper
// that stays the plugin's parent (as sudo does) lives on: the plugin's
// parent never changes, but the standard error it writes to, a pipe only
// central read, has lost its reader, and the plugin must exit within seconds.
func TestServeExitsWhenCentralDiesBehindAWrapper(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	central, pid := startRole(t, "central")
	wrapper := proctest.Parent(t, pid)
	t.Cleanup(func() { _ = syscall.Kill(wrapper, syscall.SIGKILL) })
	if err := central.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	took := proctest.WaitGone(t, 15*time.Second, "central died", pid)
	if !proctest.Alive(wrapper) {
		t.Fatalf("the wrapper %d died too: the test shows nothing", wrapper)
	}
	t.Logf("the plugin (pid %d) exited %s after central was killed; its parent, the wrapper %d, still runs", pid, took, wrapper)
}

// TestStoppingPluginRefusesNewDeliveries: once the process is stopping (the
// gate closed, as on SIGTERM), a new call is refused whole and the client
// reports its delivery as never sent, telling ErrStopping; the delivery in
// flight completes, and the drain waits for it.
func TestStoppingPluginRefusesNewDeliveries(t *testing.T) {
	impl := newGated()
	g := &gate{}
	ln := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	pb.RegisterChannelServer(srv, &grpcServer{impl: impl, gate: g})
	go func() { _ = srv.Serve(ln) }()
	conn, err := grpc.NewClient("passthrough:///plugin",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	callErrs := make(chan error, 10)
	c := NewClient(conn, func(err error) { callErrs <- err })
	t.Cleanup(func() {
		srv.Stop()
		_ = conn.Close()
		_ = c.Close()
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	type sendResult struct {
		res  Result
		sent bool
	}
	first := make(chan sendResult, 1)
	go func() {
		res, sent := c.Send(ctx, Request{Notification: Notification{ID: "first"}})
		first <- sendResult{res, sent}
	}()
	waittest.For(t, 30*time.Second, "the plugin to see the first delivery", waittest.Holds(func() bool { return impl.saw("first") }))
	drained := make(chan bool, 1)
	go func() { drained <- g.drain(30 * time.Second) }()
	waittest.For(t, 30*time.Second, "the drain to close the gate", waittest.Holds(func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.closed
	}))

	res, sent := c.Send(ctx, Request{Notification: Notification{ID: "second"}})
	if sent || res.Outcome != Transient {
		t.Fatalf("a delivery to a stopping plugin: %+v, sent %v; want Transient and never sent", res, sent)
	}
	if err := <-callErrs; !errors.Is(err, ErrStopping) {
		t.Fatalf("onCallError told %v, want ErrStopping", err)
	}
	if impl.saw("second") {
		t.Fatal("the stopping plugin delivered the refused call")
	}
	select {
	case <-drained:
		t.Fatal("the drain ended with a delivery in flight")
	default:
	}
	close(impl.gate)
	if r := <-first; !r.sent || r.res.Outcome != Success {
		t.Fatalf("the delivery in flight at the stop: %+v", r)
	}
	if !<-drained {
		t.Fatal("the drain timed out")
	}
}

// saw reports whether g was asked to deliver notification id.
func (g gated) saw(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seen[id]
}

// TestDrainWaitsForTheDeliveriesDeadlines: a plugin told to stop waits for
// its deliveries in flight as long as their own timeouts (central's
// delivery_timeout) allow, also when that is longer than drainTimeout, so
// that a stop never cuts a delivery central still waits for.
func TestDrainWaitsForTheDeliveriesDeadlines(t *testing.T) {
	now := time.Now()
	long := &pb.DeliverRequest{Deliveries: []*pb.Delivery{{TimeoutMicros: 10e6}, {TimeoutMicros: 90e6}}}
	short := &pb.DeliverRequest{Deliveries: []*pb.Delivery{{TimeoutMicros: 5e6}}}
	var g gate
	if !g.enter(deliveriesEnd(short, now)) {
		t.Fatal("a new gate refused a call")
	}
	if got := g.drainFor(now, drainTimeout); got != drainTimeout {
		t.Errorf("drain with a 5 s delivery in flight waits %s, want the floor %s", got, drainTimeout)
	}
	if !g.enter(deliveriesEnd(long, now)) {
		t.Fatal("a new gate refused a call")
	}
	if got, want := g.drainFor(now, drainTimeout), 90*time.Second+drainMargin; got != want {
		t.Errorf("drain with a 90 s delivery in flight waits %s, want %s", got, want)
	}
	if !g.enter(deliveriesEnd(&pb.DeliverRequest{Deliveries: []*pb.Delivery{{}}}, now)) {
		t.Fatal("a new gate refused a call")
	}
	if got, want := g.drainFor(now, drainTimeout), 90*time.Second+drainMargin; got != want {
		t.Errorf("drain with a delivery without a timeout beside a 90 s one waits %s, want %s", got, want)
	}
	var other gate
	other.enter(deliveriesEnd(&pb.DeliverRequest{Deliveries: []*pb.Delivery{{}}}, now))
	if got := other.drainFor(now, drainTimeout); got != drainTimeout {
		t.Errorf("drain with only a delivery without a timeout waits %s, want %s", got, drainTimeout)
	}
}
