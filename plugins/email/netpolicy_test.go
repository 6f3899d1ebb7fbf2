package email

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	channel "github.com/siteline/outbox/plugins/channel/v1"
)

func policy(t testing.TB, allow ...string) *channel.NetworkPolicy {
	t.Helper()
	p, err := channel.NewNetworkPolicy(allow, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func channelWith(t testing.TB, p *channel.NetworkPolicy) *Channel {
	t.Helper()
	ch := New(nil, WithNetworkPolicy(p))
	t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// TestSMTPObeysTheNetworkPolicy plays the attacker who points the SMTP host
// at something on central's own machine (a Redis reads SMTP lines as
// commands): under the default policy the connection to loopback, by
// address or by name, is refused before it is made, Permanent; allowed,
// the same server is reached.
func TestSMTPObeysTheNetworkPolicy(t *testing.T) {
	srv := newTestServer(t, serverConfig{})
	for _, host := range []string{srv.host, "localhost"} {
		res := deliver(t, channelWith(t, channel.DefaultNetworkPolicy()),
			testRequest(srv.settings(t, settingHost, host), testTargets...))
		wantOutcome(t, res, channel.Permanent)
		if !strings.HasPrefix(res.Error, "connecting to the SMTP server: address ") ||
			!strings.HasSuffix(res.Error, " is denied by the delivery network policy") {
			t.Errorf("host %s: error %q, want the policy's refusal", host, res.Error)
		}
		if strings.Contains(res.Error, srv.port) {
			t.Errorf("error %q names the port", res.Error)
		}
	}
	if n := srv.accepted.Load(); n != 0 {
		t.Fatalf("the server accepted %d connections under the default policy", n)
	}
	res := deliver(t, channelWith(t, policy(t, "127.0.0.0/8", "::1")), testRequest(srv.settings(t), testTargets...))
	wantOutcome(t, res, channel.Success)
	if len(srv.messages()) != 1 {
		t.Errorf("the server got %d messages with loopback allowed, want 1", len(srv.messages()))
	}
}

// TestTokenURLObeysTheNetworkPolicy: the OAuth2 token endpoint is a URL an
// admin sets, fetched with the client secret; pointed at a denied address
// (here 127.0.0.2, with only the SMTP server's 127.0.0.1 allowed), it is
// refused at connect time, Permanent, without the URL in the error, and
// the endpoint gets nothing.
func TestTokenURLObeysTheNetworkPolicy(t *testing.T) {
	srv := newTestServer(t, serverConfig{xoauth2: func(string, string) bool { return true }})
	tokens := &tokenEndpoint{clientID: "outbox-client", clientSecret: "s3cr3t-client-Secret", issued: map[string]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2 here: %v", err)
	}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(tokens.serve))
	_ = hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	t.Cleanup(hs.Close)
	tokens.url = hs.URL + "/token/internal-admin"
	settings := srv.settings(t, "auth", "xoauth2", "username", "mailer@example.org", "token_url", tokens.url,
		"client_id", tokens.clientID, "client_secret", tokens.clientSecret)

	res := deliver(t, channelWith(t, policy(t, "127.0.0.1")), testRequest(settings, testTargets...))
	wantOutcome(t, res, channel.Permanent)
	if want := "fetching the XOAUTH2 token: address 127.0.0.2 is denied by the delivery network policy"; res.Error != want {
		t.Errorf("error %q, want %q", res.Error, want)
	}
	if n := tokens.requests.Load(); n != 0 {
		t.Errorf("the denied token endpoint got %d requests", n)
	}
	if n := srv.accepted.Load(); n != 0 {
		t.Errorf("the SMTP server accepted %d connections without a token", n)
	}

	res = deliver(t, channelWith(t, policy(t, "127.0.0.0/8")), testRequest(settings, testTargets...))
	wantOutcome(t, res, channel.Success)
	if n := tokens.fetches.Load(); n != 1 {
		t.Errorf("%d tokens fetched with 127.0.0.0/8 allowed, want 1", n)
	}
}
