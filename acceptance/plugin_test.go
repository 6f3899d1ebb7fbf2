package acceptance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/devkit/smtpcapture"
	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/pluginhost"
	"github.com/siteline/outbox/core"
	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/channel/v1/plugintest"
	"github.com/siteline/outbox/plugins/email"
	"github.com/siteline/outbox/plugins/webhook"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// TestMain lets this test binary serve as the channel plugins of these
// tests: the real built-in email and webhook channels, and a no-op channel
// for the benchmark, each in its own process as central runs them. When it
// runs the tests, it removes the outbox binaries the site tests built.
func TestMain(m *testing.M) {
	channels := map[string]func() channel.Channel{
		"noop":    func() channel.Channel { return noopPlugin{} },
		"email":   func() channel.Channel { return email.New(channel.Logger()) },
		"webhook": func() channel.Channel { return webhook.New(channel.Logger()) },
	}
	if servingPlugin() {
		plugintest.Main(m, channels) // serves one channel and exits
	}
	code := m.Run()
	removeOutboxBinaries()
	os.Exit(code)
}

// servingPlugin reports that this process was started as a plugin by
// plugintest.Self (its serve variable set) rather than to run the tests.
// When that cannot be told, it says so, and plugintest.Main decides.
func servingPlugin() bool {
	_, _, kv, err := plugintest.Self("")
	name, _, ok := strings.Cut(kv, "=")
	if err != nil || !ok || name == "" {
		return true
	}
	return os.Getenv(name) != ""
}

// noopPlugin answers Success at once.
type noopPlugin struct{}

func (noopPlugin) Deliver(_ context.Context, req channel.Request) channel.Result {
	return channel.Delivered(req.Targets...)
}

// startPlugins runs a plugin host with one plugin per type, each served by
// this test binary, under a delivery network policy that allows loopback,
// where these tests' receivers listen.
func startPlugins(t testing.TB, types ...string) *pluginhost.Host {
	t.Helper()
	return startPluginsWithPolicy(t, plugintest.LoopbackPolicy, types...)
}

// startPluginsWithPolicy is startPlugins under the given delivery network
// policy.
func startPluginsWithPolicy(t testing.TB, policy *channel.NetworkPolicy, types ...string) *pluginhost.Host {
	t.Helper()
	var ps []pluginhost.Plugin
	for _, typ := range types {
		path, args, env, err := plugintest.Self(typ)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, pluginhost.Plugin{Type: typ, Command: path, Args: args, Env: []string{env}})
	}
	h, err := pluginhost.New(pluginhost.Config{Plugins: ps, Logger: testLogger(), MinRestartDelay: 10 * time.Millisecond,
		NetworkPolicy: policy})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// liveOutbox is an outbox on the real clock delivering through plugins.
type liveOutbox struct {
	t     *testing.T
	svc   *core.Service
	store interface {
		Count(context.Context, ports.Filter) (int64, error)
	}
}

// newLiveOutbox builds an outbox on backend b with the given lists and
// channel settings, delivering through channels, and runs it until the test
// ends.
func newLiveOutbox(t *testing.T, b backend, channels ports.ChannelRegistry, lists []ports.List, settings []ports.ChannelSettings) *liveOutbox {
	t.Helper()
	store := open(t, b.config(t))
	dir, err := memdir.New(lists, settings)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := core.New(core.Config{DispatchInterval: 100 * time.Millisecond, DeliveryTimeout: 10 * time.Second},
		core.Deps{Store: store.Notifications(), Audit: store.Notifications(), Directory: dir, Channels: channels, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t}
	e.run(svc)
	return &liveOutbox{t: t, svc: svc, store: store.Notifications()}
}

// submitN submits n notifications to list in batches of 100 and returns
// their ids.
func (o *liveOutbox) submitN(list string, n int) []string {
	o.t.Helper()
	var ids []string
	for len(ids) < n {
		batch := make([]ports.Submission, min(100, n-len(ids)))
		for i := range batch {
			batch[i] = submission(list)
		}
		res, err := o.svc.Submit(context.Background(), ports.SubmitRequest{Notifications: batch})
		if err != nil || len(res.Accepted) != len(batch) {
			o.t.Fatalf("submit: %v, %+v", err, res.Rejected)
		}
		ids = append(ids, res.Accepted...)
	}
	return ids
}

func (o *liveOutbox) count(s ports.Status) int64 {
	o.t.Helper()
	n, err := o.store.Count(context.Background(), ports.Filter{Statuses: []ports.Status{s}})
	if err != nil {
		o.t.Fatal(err)
	}
	return n
}

// hookReceiver is an HTTP server counting the webhook deliveries per
// notification id. Once holdAfter requests have arrived, it holds every
// further request until release is closed, so that deliveries are certainly
// in flight then.
type hookReceiver struct {
	*httptest.Server
	mu      sync.Mutex
	seen    map[string]int
	total   atomic.Int64
	holding atomic.Int64 // requests being held
	release chan struct{}
}

func newHookReceiver(t *testing.T, holdAfter int64) *hookReceiver {
	r := &hookReceiver{seen: map[string]int{}, release: make(chan struct{})}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var p struct {
			ID string `json:"id"`
		}
		if err := json.NewDecoder(req.Body).Decode(&p); err != nil || p.ID == "" {
			http.Error(w, "no id", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.seen[p.ID]++
		r.mu.Unlock()
		if r.total.Add(1) > holdAfter {
			r.holding.Add(1)
			select {
			case <-r.release:
			case <-req.Context().Done():
			}
			r.holding.Add(-1)
		}
	}))
	t.Cleanup(func() {
		r.open()
		r.Close()
	})
	return r
}

// open stops holding requests.
func (r *hookReceiver) open() {
	select {
	case <-r.release:
	default:
		close(r.release)
	}
}

// TestPluginKilledMidBurst: the webhook plugin process is killed with
// SIGKILL while a burst is being delivered through the real dispatcher, with
// deliveries certainly in flight (the receiver holds them). The host
// restarts it, and every notification ends Delivered and reached the
// receiver; repeats are bounded by the deliveries in flight at the kill.
func TestPluginKilledMidBurst(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		const n = 2000
		rcv := newHookReceiver(t, n/5)
		host := startPlugins(t, "webhook")
		o := newLiveOutbox(t, b, host,
			[]ports.List{{Name: "hooks", Type: "webhook", Targets: []string{rcv.URL + "/hook"}}},
			[]ports.ChannelSettings{{Type: "webhook",
				Retry: ports.RetrySettings{Backoff: ports.BackoffFixed, MaxRetries: 1000, Interval: 20 * time.Millisecond}}})
		ids := o.submitN("hooks", n)

		waittest.For(t, 2*time.Minute, "a fifth of the burst delivered and more in flight", waittest.Holds(func() bool { return rcv.holding.Load() > 0 }))
		inFlight := rcv.holding.Load()
		pid := host.Status()[0].PID
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		rcv.open()
		waittest.For(t, 2*time.Minute, "every notification Delivered", waittest.Holds(func() bool { return o.count(ports.StatusDelivered) == n }))

		st := host.Status()[0]
		if st.Restarts < 1 || st.PID == pid {
			t.Fatalf("plugin not restarted: %+v (killed pid %d)", st, pid)
		}
		// The deliveries running at the kill ended Transient (a retry was
		// counted), never Delivered by guess.
		retried := 0
		for _, id := range ids {
			d, err := o.svc.Notification(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if d.RetryCount > 0 {
				retried++
			}
		}
		if retried == 0 {
			t.Errorf("no notification was retried, though %d deliveries were in flight at the kill", inFlight)
		}
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		extra := 0
		for _, id := range ids {
			switch c := rcv.seen[id]; {
			case c == 0:
				t.Errorf("notification %s is Delivered but never reached the receiver", id)
			case c > 1:
				extra += c - 1
			}
		}
		if len(rcv.seen) != n {
			t.Errorf("receiver saw %d ids, want %d", len(rcv.seen), n)
		}
		// At most one repeat per delivery in flight at the kill.
		if limit := core.DefaultDispatchConcurrency; extra > limit {
			t.Errorf("%d repeated deliveries, more than the %d in flight at most", extra, limit)
		}
		t.Logf("killed pid %d with %d deliveries held at the receiver; %d retried, %d repeats; plugin restarted %d time(s)",
			pid, inFlight, retried, extra, st.Restarts)
	})
}

// TestSMTPServerDownThenBack: with the SMTP server down, notifications
// go Retrying; once it is back, they are all delivered, each to its
// recipients.
func TestSMTPServerDownThenBack(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		const n = 50
		// Take a free port, then stop listening on it: the server is down.
		probe, err := smtpcapture.Start(smtpcapture.Config{})
		if err != nil {
			t.Fatal(err)
		}
		addr := probe.Addr()
		_ = probe.Close()
		host, port, _ := strings.Cut(addr, ":")

		plugins := startPlugins(t, "email")
		o := newLiveOutbox(t, b, plugins,
			[]ports.List{{Name: "ops", Type: "email", Targets: []string{"ops@example.com", "oncall@example.com"}}},
			[]ports.ChannelSettings{{Type: "email",
				Settings: map[string]string{"host": host, "port": port, "tls": "none", "from": "outbox@example.com"},
				Retry:    ports.RetrySettings{Backoff: ports.BackoffFixed, MaxRetries: 1000, Interval: 50 * time.Millisecond}}})
		o.submitN("ops", n)

		waittest.For(t, 2*time.Minute, "every notification Retrying", waittest.Holds(func() bool { return o.count(ports.StatusRetrying) == n }))
		if d := o.count(ports.StatusDelivered); d != 0 {
			t.Fatalf("%d delivered with the server down", d)
		}

		srv, err := smtpcapture.Start(smtpcapture.Config{Addr: addr})
		if err != nil {
			t.Fatalf("restart the SMTP server on %s: %v", addr, err)
		}
		t.Cleanup(func() { _ = srv.Close() })
		waittest.For(t, 2*time.Minute, "every notification Delivered", waittest.Holds(func() bool { return o.count(ports.StatusDelivered) == n }))
		msgs := srv.Messages()
		if len(msgs) != n {
			t.Fatalf("server got %d messages, want %d", len(msgs), n)
		}
		for _, m := range msgs {
			if len(m.To) != 2 || m.From != "outbox@example.com" {
				t.Fatalf("message from %q to %v", m.From, m.To)
			}
			if strings.Contains(string(m.Data), "ops@example.com") {
				t.Fatalf("a BCC recipient shows in the message:\n%s", m.Data)
			}
		}
	})
}

// BenchmarkEmail measures e-mails through the built-in email channel in
// its plugin process (the host, gRPC with mutual TLS, go-mail with pooled
// connections) to a real SMTP server on loopback, 64 deliveries in flight,
// each to 1 or to 10 recipients.
func BenchmarkEmail(b *testing.B) {
	srv, err := smtpcapture.Start(smtpcapture.Config{Keep: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	host, port, _ := strings.Cut(srv.Addr(), ":")
	plugins := startPlugins(b, "email")
	ch, _ := plugins.Channel("email")
	for _, targets := range []int{1, 10} {
		b.Run(fmt.Sprintf("targets=%d", targets), func(b *testing.B) {
			d := ports.Delivery{
				Notification: ports.Notification{List: "ops", Subject: "Tank 3 level high", Body: "Level 93% at 08:00."},
				Settings: map[string]string{"host": host, "port": port, "tls": "none", "from": "outbox@example.com",
					"pool_size": "8"},
			}
			for i := range targets {
				d.Targets = append(d.Targets, fmt.Sprintf("person%d@example.com", i))
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for range 64 {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						d := d
						d.Notification.ID = uuid.Must(uuid.NewV7()).String()
						res := ch.Deliver(ctx, d)
						cancel()
						if res.Outcome != ports.OutcomeSuccess {
							b.Errorf("delivery: %+v", res)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "emails/s")
		})
	}
}
