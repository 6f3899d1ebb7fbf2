package acceptance

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/devkit/smtpcapture"
	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/channel/v1/plugintest"
	"github.com/siteline/outbox/ports"
)

// internalSecret is what an internal service on central's machine answers:
// it must never reach a notification's error, which viewers read.
const internalSecret = "root-password=hunter2"

// internalService is an HTTP server on host that stands for something only
// central's machine should reach (an admin endpoint on loopback); it counts
// the requests it gets and answers each with internalSecret.
type internalService struct {
	*httptest.Server
	requests atomic.Int64
}

func newInternalService(t *testing.T, host string, h http.HandlerFunc) *internalService {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Skipf("cannot listen on %s here: %v", host, err)
	}
	s := &internalService{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		if h != nil {
			h(w, r)
			return
		}
		w.WriteHeader(http.StatusBadRequest) // an error answer, whose body a channel may quote
		_, _ = io.WriteString(w, internalSecret)
	}))
	_ = s.Listener.Close()
	s.Listener = ln
	s.Start()
	t.Cleanup(s.Close)
	return s
}

func mustNetworkPolicy(t *testing.T, allow ...string) *channel.NetworkPolicy {
	t.Helper()
	p, err := channel.NewNetworkPolicy(allow, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func deliverOnce(t *testing.T, ch ports.Channel, typ string, settings map[string]string, targets ...string) ports.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return ch.Deliver(ctx, ports.Delivery{
		Notification: ports.Notification{ID: "0194f0d2-0000-7000-8000-0000000000aa", Type: typ, List: "internal",
			Subject: "s", Body: "b", CreatedAt: time.Now().UTC()},
		Targets: targets, Settings: settings,
	})
}

// wantDenied checks a result is the policy's Permanent refusal of addr, and
// holds nothing of the URL nor of the internal service's answer.
func wantDenied(t *testing.T, res ports.Result, addr string, leaks ...string) {
	t.Helper()
	if res.Outcome != ports.OutcomePermanent {
		t.Errorf("outcome %v (%q), want Permanent", res.Outcome, res.Error)
	}
	if want := "address " + addr + " is denied by the delivery network policy"; !strings.Contains(res.Error, want) {
		t.Errorf("error %q, want it to say %q", res.Error, want)
	}
	for _, leak := range append(leaks, internalSecret, "internal-admin") {
		if strings.Contains(res.Error, leak) {
			t.Errorf("error %q holds %q", res.Error, leak)
		}
	}
}

// TestWebhookPolicyInPluginProcess plays the attacker of the review: an
// admin list points the webhook channel at an HTTP service on central's
// own loopback. Through the real webhook plugin process started by the real
// plugin host, under the default policy, the delivery is refused at connect
// time (Permanent, the service gets no request), by address and by a name
// that resolves to loopback; a redirect from an allowed receiver to a
// denied address is not followed; with loopback allowed the same list is
// delivered.
func TestWebhookPolicyInPluginProcess(t *testing.T) {
	internal := newInternalService(t, "127.0.0.1", nil)
	_, port, _ := net.SplitHostPort(internal.Listener.Addr().String())

	host := startPluginsWithPolicy(t, channel.DefaultNetworkPolicy(), "webhook")
	ch, _ := host.Channel("webhook")
	res := deliverOnce(t, ch, "webhook", nil, internal.URL+"/internal-admin?token=s3cr3t")
	wantDenied(t, res, "127.0.0.1", "s3cr3t", port)
	res = deliverOnce(t, ch, "webhook", nil, "http://localhost:"+port+"/internal-admin")
	if res.Outcome != ports.OutcomePermanent || !strings.Contains(res.Error, "is denied by the delivery network policy") {
		t.Errorf("localhost: %v (%q), want the policy's Permanent refusal", res.Outcome, res.Error)
	}
	if n := internal.requests.Load(); n != 0 {
		t.Fatalf("the internal service got %d requests under the default policy", n)
	}

	t.Run("RedirectToADeniedAddress", func(t *testing.T) {
		denied := newInternalService(t, "127.0.0.2", nil)
		receiver := newInternalService(t, "127.0.0.1", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, denied.URL+"/internal-admin", http.StatusTemporaryRedirect)
		})
		host := startPluginsWithPolicy(t, mustNetworkPolicy(t, "127.0.0.1"), "webhook")
		ch, _ := host.Channel("webhook")
		res := deliverOnce(t, ch, "webhook", nil, receiver.URL+"/hook")
		if res.Outcome != ports.OutcomePermanent || receiver.requests.Load() != 1 || denied.requests.Load() != 0 {
			t.Errorf("redirect: %v (%q); receiver %d requests, denied %d; want Permanent, 1, 0",
				res.Outcome, res.Error, receiver.requests.Load(), denied.requests.Load())
		}
		res = deliverOnce(t, ch, "webhook", nil, denied.URL+"/internal-admin")
		wantDenied(t, res, "127.0.0.2")
		if n := denied.requests.Load(); n != 0 {
			t.Errorf("the denied address got %d requests", n)
		}
	})

	t.Run("LoopbackAllowed", func(t *testing.T) {
		ok := newInternalService(t, "127.0.0.1", func(http.ResponseWriter, *http.Request) {})
		host := startPluginsWithPolicy(t, plugintest.LoopbackPolicy, "webhook")
		ch, _ := host.Channel("webhook")
		if res := deliverOnce(t, ch, "webhook", nil, ok.URL+"/hook"); res.Outcome != ports.OutcomeSuccess {
			t.Fatalf("loopback allowed: %v (%q), want Success", res.Outcome, res.Error)
		}
		if n := ok.requests.Load(); n != 1 {
			t.Errorf("the receiver got %d requests, want 1", n)
		}
	})
}

// TestWebhookToThisMachinesLANAddressRefused plays the attacker of the
// second review: central's own services (its page, a database, an agent)
// listen on all interfaces, so a webhook list aimed at the machine's own
// LAN address reaches them as loopback would. Through the real webhook
// plugin process under the default policy, a receiver bound to all
// interfaces and reached through one of this machine's non-loopback
// addresses gets no request and the delivery is refused Permanent, naming
// the address; with that address allowed, the same list is delivered.
func TestWebhookToThisMachinesLANAddressRefused(t *testing.T) {
	for _, addr := range thisMachinesAddresses(t) {
		t.Run(addr.String(), func(t *testing.T) {
			internal := newInternalService(t, "", nil) // all interfaces, as a service on 0.0.0.0 or ::
			_, port, _ := net.SplitHostPort(internal.Listener.Addr().String())
			target := "http://" + net.JoinHostPort(addr.String(), port) + "/internal-admin?token=s3cr3t"

			host := startPluginsWithPolicy(t, channel.DefaultNetworkPolicy(), "webhook")
			ch, _ := host.Channel("webhook")
			res := deliverOnce(t, ch, "webhook", nil, target)
			wantDenied(t, res, addr.String(), "s3cr3t")
			if n := internal.requests.Load(); n != 0 {
				t.Fatalf("the service on this machine's address %s got %d requests under the default policy", addr, n)
			}

			ok := newInternalService(t, "", func(http.ResponseWriter, *http.Request) {})
			_, port, _ = net.SplitHostPort(ok.Listener.Addr().String())
			host = startPluginsWithPolicy(t, mustNetworkPolicy(t, addr.String()), "webhook")
			ch, _ = host.Channel("webhook")
			if res := deliverOnce(t, ch, "webhook", nil, "http://"+net.JoinHostPort(addr.String(), port)+"/hook"); res.Outcome != ports.OutcomeSuccess {
				t.Fatalf("%s allowed: %v (%q), want Success", addr, res.Outcome, res.Error)
			}
			if n := ok.requests.Load(); n != 1 {
				t.Errorf("the receiver got %d requests, want 1", n)
			}
		})
	}
}

// thisMachinesAddresses returns one IPv4 and one IPv6 address of this
// machine's interfaces, those it has, neither loopback nor link-local; it
// skips the test when there is none.
func thisMachinesAddresses(t *testing.T) []netip.Addr {
	t.Helper()
	ifaddrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skipf("cannot list this machine's addresses: %v", err)
	}
	var v4, v6 []netip.Addr
	for _, ia := range ifaddrs {
		ipnet, ok := ia.(*net.IPNet)
		if !ok {
			continue
		}
		a, ok := netip.AddrFromSlice(ipnet.IP)
		switch a = a.Unmap(); {
		case !ok || a.IsLoopback() || a.IsLinkLocalUnicast():
		case a.Is4():
			v4 = append(v4, a)
		default:
			v6 = append(v6, a)
		}
	}
	found := slices.Concat(v4[:min(len(v4), 1)], v6[:min(len(v6), 1)])
	if len(found) == 0 {
		t.Skipf("this machine has no non-loopback interface address to test with (%v)", ifaddrs)
	}
	return found
}

// TestAdminListToLoopbackParks runs the review's finding end to end through
// the real dispatcher: a list aimed at central's loopback parks at its
// first attempt, its last error (which viewers read) says why and holds
// nothing the internal service would have answered, and the service gets no
// request.
func TestAdminListToLoopbackParks(t *testing.T) {
	internal := newInternalService(t, "127.0.0.1", nil)
	host := startPluginsWithPolicy(t, channel.DefaultNetworkPolicy(), "webhook")
	o := newLiveOutbox(t, sqliteBackend, host,
		[]ports.List{{Name: "internal", Type: "webhook", Targets: []string{internal.URL + "/internal-admin"}}},
		[]ports.ChannelSettings{{Type: "webhook",
			Retry: ports.RetrySettings{Backoff: ports.BackoffFixed, MaxRetries: 5, Interval: 20 * time.Millisecond}}})
	ids := o.submitN("internal", 1)
	eventually(t, "the notification Parked", func() bool { return o.count(ports.StatusParked) == 1 })
	d, err := o.svc.Notification(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if d.RetryCount != 0 {
		t.Errorf("retried %d times: a refusal by the policy is Permanent", d.RetryCount)
	}
	wantDenied(t, ports.Result{Outcome: ports.OutcomePermanent, Error: d.LastError}, "127.0.0.1")
	if n := internal.requests.Load(); n != 0 {
		t.Errorf("the internal service got %d requests", n)
	}
}

// TestEmailPolicyInPluginProcess: the SMTP host is as much an admin's
// choice as a webhook URL, and SMTP lines reach whatever listens there. The
// real email plugin process refuses an SMTP server on loopback under the
// default policy, and delivers to it with loopback allowed.
func TestEmailPolicyInPluginProcess(t *testing.T) {
	srv, err := smtpcapture.Start(smtpcapture.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	h, port, _ := net.SplitHostPort(srv.Addr())
	settings := map[string]string{"host": h, "port": port, "tls": "none", "from": "outbox@example.com"}

	host := startPluginsWithPolicy(t, channel.DefaultNetworkPolicy(), "email")
	ch, _ := host.Channel("email")
	res := deliverOnce(t, ch, "email", settings, "ops@example.com")
	wantDenied(t, res, "127.0.0.1")
	if n := srv.Count(); n != 0 {
		t.Fatalf("the SMTP server got %d messages under the default policy", n)
	}

	host = startPluginsWithPolicy(t, mustNetworkPolicy(t, "127.0.0.1"), "email")
	ch, _ = host.Channel("email")
	if res := deliverOnce(t, ch, "email", settings, "ops@example.com"); res.Outcome != ports.OutcomeSuccess {
		t.Fatalf("127.0.0.1 allowed: %v (%q), want Success", res.Outcome, res.Error)
	}
	if n := srv.Count(); n != 1 {
		t.Errorf("the SMTP server got %d messages, want 1", n)
	}
}
