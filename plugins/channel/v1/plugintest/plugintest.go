// Package plugintest is the contract test kit of channel plugins, version 1.
// It runs the same checks on a channel three ways: in-process (the Go value
// itself), over gRPC in one process (go-plugin's TestPluginGRPCConn), and as a
// real plugin subprocess started the way central starts it, with mutual TLS.
// A channel that passes the kit behaves the same in all three.
//
// Every answer is checked: its outcome against the case's, an error text on
// every failure, none holding a target or a secret setting. A channel may
// answer one outcome for the whole delivery or one per target
// (channel.PerTarget); per-target answers must be one per target, agree
// with the result's outcome, and match the case's WantTargets when it has
// them. A wrong count is caught in every mode: in-process by the kit, over
// gRPC and as a subprocess because central takes such an answer as a
// Transient failure of the whole delivery.
//
// A test gives the kit a Target: how to build the channel, how to start it as
// a process, and delivery cases against servers the test runs. The usual
// shape, in the channel's own package:
//
//	func TestMain(m *testing.M) {
//		plugintest.Main(m, map[string]func() channel.Channel{"mychannel": newChannel})
//	}
//
//	func TestKit(t *testing.T) {
//		plugintest.Run(t, plugintest.Target{
//			Name:    "mychannel",
//			New:     func(*testing.T) channel.Channel { return newChannel() },
//			Command: plugintest.Reexec("mychannel"),
//			Cases:   myCases, // a Success case at least, and failures
//		})
//	}
package plugintest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"

	channel "github.com/siteline/outbox/plugins/channel/v1"
)

// Target is a channel under test.
type Target struct {
	// Name is the channel's type; a channel that describes itself must give
	// this name.
	Name string
	// New builds the channel for the in-process and gRPC modes. If the
	// channel has a Close method, the kit calls it at the end.
	New func(t *testing.T) channel.Channel
	// Command returns the command that serves the channel as a plugin
	// process, for the subprocess mode (see Reexec).
	Command func(t *testing.T) *exec.Cmd
	// Cases returns the delivery cases of one mode, against servers it
	// starts for that mode (stopped by t.Cleanup). It must hold at least one
	// case that wants Success: the kit derives its own checks from the first.
	Cases func(t *testing.T) []Case
}

// Case is one delivery and what it must give.
type Case struct {
	// Name names the case in test output.
	Name string
	// Request is what is delivered. The kit gives each delivery a fresh
	// notification id.
	Request channel.Request
	// Want is the expected outcome: the one outcome of a channel that
	// answers one for the whole delivery, or, of one that answers per
	// target, what channel.PerTarget makes of its answers.
	Want channel.Outcome
	// WantTargets, when set, is the expected answer for each target of
	// Request.Targets, in order: the result must answer per target, one
	// per target. Left nil, a result may answer either way.
	WantTargets []channel.Outcome
	// Timeout bounds the delivery (default 10 s). A case testing a server
	// that hangs sets a short one.
	Timeout time.Duration
	// Check, when set, runs after the delivery answered as wanted. For a
	// Success case it should confirm, at the receiving server, that the
	// notification with req's id arrived with req's subject and body: the
	// kit uses it for its own variants of the case (a large body, Unicode,
	// concurrent deliveries). It may run on several goroutines at once, off
	// the test's goroutine: report with t.Errorf, not t.Fatalf.
	Check func(t *testing.T, req channel.Request, res channel.Result)
}

// Run runs the kit's checks on target in each mode, as subtests InProcess,
// GRPC and Subprocess.
func Run(t *testing.T, target Target) {
	t.Helper()
	if target.New == nil || target.Command == nil || target.Cases == nil || target.Name == "" {
		t.Fatal("plugintest: Target needs Name, New, Command and Cases")
	}
	t.Run("InProcess", func(t *testing.T) {
		ch := target.New(t)
		t.Cleanup(func() { closeChannel(t, ch) })
		exercise(t, target, ch)
	})
	t.Run("GRPC", func(t *testing.T) {
		impl := target.New(t)
		t.Cleanup(func() { closeChannel(t, impl) })
		client, server := plugin.TestPluginGRPCConn(t, false, channel.PluginMap(impl))
		t.Cleanup(func() {
			// Server first: a client Close makes the server stop itself
			// in the background, racing a Stop that came after.
			server.Stop()
			_ = client.Close()
		})
		exercise(t, target, dispense(t, client))
	})
	t.Run("Subprocess", func(t *testing.T) {
		exercise(t, target, Start(t, target.Command(t)))
	})
}

// Start runs cmd as a channel plugin process the way central does (go-plugin
// over gRPC with AutoMTLS) and returns its client. The process is killed when
// the test ends; its log lines go to t.Log.
func Start(t testing.TB, cmd *exec.Cmd) *channel.Client {
	t.Helper()
	c := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  channel.Handshake,
		Plugins:          channel.PluginMap(nil),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger: hclog.New(&hclog.LoggerOptions{
			Name: "plugin", Output: testWriter{t}, Level: hclog.Info,
		}),
	})
	t.Cleanup(c.Kill)
	rpc, err := c.Client()
	if err != nil {
		t.Fatalf("plugintest: start plugin %s: %v", cmd.Path, err)
	}
	return dispense(t, rpc)
}

func dispense(t testing.TB, rpc plugin.ClientProtocol) *channel.Client {
	t.Helper()
	raw, err := rpc.Dispense(channel.PluginName)
	if err != nil {
		t.Fatalf("plugintest: dispense %s: %v", channel.PluginName, err)
	}
	cl, ok := raw.(*channel.Client)
	if !ok {
		t.Fatalf("plugintest: dispensed %T, want *channel.Client", raw)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// serveEnv names the channel a re-executed test binary serves.
const serveEnv = "OUTBOX_PLUGINTEST_SERVE"

// LoopbackPolicy is the delivery network policy Main gives the tests: the
// built-in rules with loopback allowed, since the servers of a test listen
// there.
var LoopbackPolicy = func() *channel.NetworkPolicy {
	p, err := channel.NewNetworkPolicy([]string{"127.0.0.0/8", "::1"}, nil)
	if err != nil {
		panic(err)
	}
	return p
}()

// Main is a TestMain that lets the test binary serve as the plugin of the
// subprocess mode: started by Reexec(name), it serves channels[name] and
// never runs the tests; otherwise it runs them.
//
// Before it runs the tests, unless the environment already sets one, Main
// sets the delivery network policy (channel.NetworkPolicyEnv) to
// LoopbackPolicy, so that a channel built with
// channel.NetworkPolicyFromEnv reaches the test's servers on loopback,
// in-process and in the subprocesses Reexec starts. A test of the policy
// itself builds its channel with an explicit policy instead.
func Main(m *testing.M, channels map[string]func() channel.Channel) {
	if name := os.Getenv(serveEnv); name != "" {
		newChannel, ok := channels[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "plugintest: no channel %q to serve\n", name)
			os.Exit(2)
		}
		channel.Serve(newChannel())
		os.Exit(0)
	}
	if _, set := os.LookupEnv(channel.NetworkPolicyEnv); !set {
		if err := os.Setenv(channel.NetworkPolicyEnv, LoopbackPolicy.Encode()); err != nil {
			fmt.Fprintf(os.Stderr, "plugintest: %v\n", err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}

// Reexec returns a Target.Command that runs the test binary itself as the
// plugin serving the channel registered under name with Main.
func Reexec(name string) func(t *testing.T) *exec.Cmd {
	return func(t *testing.T) *exec.Cmd {
		path, args, env, err := Self(name)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(path, args...)
		cmd.Env = append(os.Environ(), env)
		return cmd
	}
}

// Self returns the command line that runs the test binary as the plugin
// serving the channel registered under name with Main: the binary's path, its
// arguments, and the environment variable (NAME=value) to add to the
// process's environment.
func Self(name string) (path string, args []string, env string, err error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, "", fmt.Errorf("plugintest: find the test binary: %w", err)
	}
	return exe, []string{"-test.run=^$"}, serveEnv + "=" + name, nil
}

// exercise runs every check on ch.
func exercise(t *testing.T, target Target, ch channel.Channel) {
	desc := describe(t, target, ch)
	cases := target.Cases(t)
	base, ok := firstSuccess(cases)
	if !ok {
		t.Fatal("plugintest: Cases holds no case that wants Success")
	}

	t.Run("Cases", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.Name, func(t *testing.T) { deliverCase(t, ch, desc, c) })
		}
	})
	t.Run("SettingsOfSuccessAreValid", func(t *testing.T) {
		if err := desc.Validate(base.Request.Settings); err != nil {
			t.Errorf("the settings of case %q do not pass the channel's own schema: %v", base.Name, err)
		}
	})
	t.Run("UnicodeAndLargeBody", func(t *testing.T) {
		c := base
		c.Request.Notification.Subject = "Grüße ✓ 日本語 — " + c.Request.Notification.Subject
		c.Request.Notification.Body = strings.Repeat("Zeile ä ✓ 0123456789 abcdefghij\n", 2000)
		deliverCase(t, ch, desc, c)
	})
	t.Run("EmptyTargetsArePermanent", func(t *testing.T) {
		c := base
		c.Request.Targets, c.Want, c.WantTargets, c.Check = nil, channel.Permanent, nil, nil
		deliverCase(t, ch, desc, c)
	})
	t.Run("MissingRequiredSettingIsPermanent", func(t *testing.T) {
		for _, s := range desc.Settings {
			if !s.Required {
				continue
			}
			t.Run(s.Name, func(t *testing.T) {
				c := base
				c.Request.Settings = maps.Clone(base.Request.Settings)
				delete(c.Request.Settings, s.Name)
				c.Want, c.WantTargets, c.Check = channel.Permanent, nil, nil
				deliverCase(t, ch, desc, c)
			})
		}
	})
	t.Run("CancelledContextIsTransient", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		req := withID(base.Request)
		res := deliver(t, ctx, ch, req)
		if res.Outcome != channel.Transient {
			t.Errorf("Deliver with a cancelled context: %s, want Transient", res.Outcome)
		}
	})
	t.Run("Concurrent", func(t *testing.T) {
		const n = 32
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { deliverCase(t, ch, desc, base) })
		}
		wg.Wait()
	})
}

// describe checks the channel's description, if it gives one.
func describe(t *testing.T, target Target, ch channel.Channel) channel.Description {
	t.Helper()
	d, ok := ch.(channel.Describer)
	if !ok {
		return channel.Description{Name: target.Name}
	}
	desc, err := d.Describe(t.Context())
	if errors.Is(err, channel.ErrNotDescribed) {
		return channel.Description{Name: target.Name}
	}
	if err != nil {
		t.Fatalf("Describe: %v", err)
	}
	if desc.Name != target.Name {
		t.Errorf("Describe: name %q, want %q", desc.Name, target.Name)
	}
	seen := map[string]bool{}
	for _, s := range desc.Settings {
		if strings.TrimSpace(s.Name) == "" || seen[s.Name] {
			t.Errorf("Describe: setting name %q is blank or repeated", s.Name)
		}
		seen[s.Name] = true
		if s.Default != "" && len(s.Allowed) > 0 && !slices.Contains(s.Allowed, s.Default) {
			t.Errorf("Describe: setting %q defaults to a value it does not allow", s.Name)
		}
	}
	return desc
}

// deliverCase delivers c with a fresh id and checks the result.
func deliverCase(t *testing.T, ch channel.Channel, desc channel.Description, c Case) {
	t.Helper()
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	req := withID(c.Request)
	res := deliver(t, ctx, ch, req)
	if checkResult(t, c, req, res, desc) && c.Check != nil {
		c.Check(t, req, res)
	}
}

// reporter is what checkResult reports to: a *testing.T, or a recorder in
// the kit's own tests.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// checkResult checks res, the answer to req of case c, and reports whether
// it answered as wanted (its outcome, and its per-target answers, are as c
// wants), so that c.Check may run:
//   - the outcome is c.Want, and a failure has an error text;
//   - per-target answers, if any, are one per target, agree with the
//     result's outcome (the one a central of an earlier release reads),
//     are each as c.WantTargets says, and each failure has an error text;
//   - no error text holds a target or a secret setting.
func checkResult(t reporter, c Case, req channel.Request, res channel.Result, desc channel.Description) bool {
	t.Helper()
	if n := len(res.Targets); n > 0 && n != len(req.Targets) {
		t.Errorf("%s: %d per-target answers for %d targets: answer one per target (or one outcome for all)",
			c.Name, n, len(req.Targets))
		return false
	}
	if res.Outcome != c.Want {
		t.Errorf("%s: outcome %s (error %q), want %s", c.Name, res.Outcome, res.Error, c.Want)
		return false
	}
	if c.WantTargets != nil {
		got := make([]channel.Outcome, len(res.Targets))
		for i, r := range res.Targets {
			got[i] = r.Outcome
		}
		if !slices.Equal(got, c.WantTargets) {
			t.Errorf("%s: per-target outcomes %v, want %v", c.Name, got, c.WantTargets)
			return false
		}
	}
	if len(res.Targets) > 0 {
		if o := channel.PerTarget(res.Targets).Outcome; o != res.Outcome {
			t.Errorf("%s: outcome %s, but its per-target answers make %s: build the result with channel.PerTarget",
				c.Name, res.Outcome, o)
		}
	}
	if res.Outcome != channel.Success && strings.TrimSpace(res.Error) == "" {
		t.Errorf("%s: %s without an error text", c.Name, res.Outcome)
	}
	leaks(t, c.Name, res.Error, req, desc)
	for i, r := range res.Targets {
		if r.Outcome != channel.Success && strings.TrimSpace(r.Error) == "" {
			t.Errorf("%s: target %d: %s without an error text", c.Name, i+1, r.Outcome)
		}
		leaks(t, fmt.Sprintf("%s: target %d", c.Name, i+1), r.Error, req, desc)
	}
	return true
}

// deliver calls Deliver and fails the test if it does not return within a
// minute after ctx ends: a channel must honour its context.
func deliver(t *testing.T, ctx context.Context, ch channel.Channel, req channel.Request) channel.Result {
	t.Helper()
	done := make(chan channel.Result, 1)
	go func() { done <- ch.Deliver(ctx, req) }()
	select {
	case res := <-done:
		return res
	case <-ctx.Done():
	}
	select {
	case res := <-done:
		return res
	case <-time.After(time.Minute):
		// Errorf, not Fatal: this may run off the test's goroutine.
		t.Errorf("Deliver still running a minute after its context ended")
		return channel.Result{Outcome: -1, Error: "hung"}
	}
}

// leaks reports a secret setting or a target address in the error text
// text.
func leaks(t reporter, name, text string, req channel.Request, desc channel.Description) {
	t.Helper()
	if text == "" {
		return
	}
	for _, target := range req.Targets {
		if target != "" && strings.Contains(text, target) {
			t.Errorf("%s: the error text holds a target: %q", name, text)
		}
		// A URL's query values and password are tokens, shown or not
		// with the rest of the URL.
		u, err := url.Parse(target)
		if err != nil {
			continue
		}
		secrets := []string{}
		if pw, ok := u.User.Password(); ok {
			secrets = append(secrets, pw)
		}
		for _, vs := range u.Query() {
			secrets = append(secrets, vs...)
		}
		for _, v := range secrets {
			if len(v) >= 4 && strings.Contains(text, v) {
				t.Errorf("%s: the error text holds a token of a target URL: %q", name, text)
			}
		}
	}
	for _, s := range desc.Settings {
		if v := req.Settings[s.Name]; s.Secret && len(v) >= 4 && strings.Contains(text, v) {
			t.Errorf("%s: the error text holds the value of secret setting %q", name, s.Name)
		}
	}
}

func firstSuccess(cases []Case) (Case, bool) {
	for _, c := range cases {
		if c.Want == channel.Success {
			return c, true
		}
	}
	return Case{}, false
}

func withID(r channel.Request) channel.Request {
	r.Notification.ID = uuid.NewString()
	return r
}

// closeChannel closes ch if it has a Close method, with or without an
// error result.
func closeChannel(t *testing.T, ch channel.Channel) {
	switch c := ch.(type) {
	case io.Closer:
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	case interface{ Close() }:
		c.Close()
	}
}

// testWriter sends a plugin's log lines to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
