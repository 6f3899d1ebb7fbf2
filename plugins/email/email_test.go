package email

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/quotedprintable"
	"net"
	netmail "net/mail"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/channel/v1/plugintest"
)

const testID = "0190a5c2-7b3e-7d4f-8a1b-2c3d4e5f6a7b"

var testTargets = []string{"alice@example.com", "bob@example.net", "carol@example.org"}

func testRequest(settings map[string]string, targets ...string) channel.Request {
	return channel.Request{
		Notification: channel.Notification{
			ID:      testID,
			List:    "operators",
			Subject: "Pump 3 stopped",
			Body:    "Pump 3 stopped at 10:42.\nPlease check.\n.\nA line with a dot above.",
			Attempt: 1,
		},
		Targets:  targets,
		Settings: settings,
	}
}

// deliver runs one delivery with a generous deadline.
func deliver(t testing.TB, ch *Channel, req channel.Request) channel.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return ch.Deliver(ctx, req)
}

// newChannel returns a channel closed at the end of the test.
func newChannel(t testing.TB, logger *slog.Logger) *Channel {
	t.Helper()
	ch := New(logger)
	t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// wantOutcome reports a wrong outcome; it may run on any goroutine.
func wantOutcome(t testing.TB, res channel.Result, want channel.Outcome) {
	t.Helper()
	if res.Outcome != want {
		t.Errorf("outcome %v (error %q), want %v", res.Outcome, res.Error, want)
	} else if res.Error != "" {
		t.Logf("%v: %s", res.Outcome, res.Error)
	}
}

// checkMessage checks a received message: envelope, headers, body, and
// that no target shows in it.
func checkMessage(t *testing.T, got received, targets []string) {
	t.Helper()
	if got.from != "outbox@example.org" {
		t.Errorf("MAIL FROM %q, want outbox@example.org", got.from)
	}
	if !slices.Equal(got.rcpts, targets) {
		t.Errorf("RCPT TO %q, want %q", got.rcpts, targets)
	}
	for _, target := range targets {
		if strings.Contains(string(got.data), target) {
			t.Errorf("the message shows target %s:\n%s", target, got.data)
		}
	}
	msg, err := netmail.ReadMessage(strings.NewReader(string(got.data)))
	if err != nil {
		t.Fatalf("reading the message: %v", err)
	}
	h := msg.Header
	if to := h.Get("To"); to != "undisclosed-recipients:;" {
		t.Errorf("To: %q", to)
	}
	for _, name := range []string{"Cc", "Bcc"} {
		if v, ok := h[name]; ok {
			t.Errorf("%s header present: %q", name, v)
		}
	}
	if from := h.Get("From"); !strings.Contains(from, "outbox@example.org") {
		t.Errorf("From: %q", from)
	}
	if s := h.Get("Subject"); s != "Pump 3 stopped" {
		t.Errorf("Subject: %q", s)
	}
	if id := h.Get("Message-Id"); id != "<"+testID+"@example.org>" {
		t.Errorf("Message-ID: %q", id)
	}
	if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type: %q", ct)
	}
	var body io.Reader = msg.Body
	if strings.EqualFold(h.Get("Content-Transfer-Encoding"), "quoted-printable") {
		body = quotedprintable.NewReader(body)
	}
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	want := "Pump 3 stopped at 10:42.\nPlease check.\n.\nA line with a dot above."
	if got := strings.TrimRight(strings.ReplaceAll(string(b), "\r\n", "\n"), "\n"); got != want {
		t.Errorf("body %q, want %q", got, want)
	}
}

func TestDescribe(t *testing.T) {
	d, err := New(nil).Describe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "email" || d.Version == "" {
		t.Errorf("name %q version %q", d.Name, d.Version)
	}
	secret := map[string]bool{}
	required := map[string]bool{}
	for _, s := range d.Settings {
		if s.Description == "" {
			t.Errorf("setting %q has no description", s.Name)
		}
		secret[s.Name] = s.Secret
		required[s.Name] = s.Required
	}
	for _, name := range []string{"host", "port", "tls", "auth", "username", "password", "from", "token_url",
		"client_id", "client_secret", "scopes", "tls_ca_file", "tls_server_name", "pool_size", "connect_timeout"} {
		if _, ok := secret[name]; !ok {
			t.Errorf("setting %q missing from the schema", name)
		}
	}
	if !secret["password"] || !secret["client_secret"] || secret["username"] {
		t.Errorf("secret flags wrong: %v", secret)
	}
	if !required["host"] || !required["from"] || required["port"] {
		t.Errorf("required flags wrong: %v", required)
	}
	good := map[string]string{"host": "smtp.example.com", "from": "a@example.com", "tls": "implicit", "auth": "plain",
		"username": "u", "password": "p", "pool_size": "2"}
	if err := d.Validate(good); err != nil {
		t.Errorf("Validate(good settings): %v", err)
	}
	if err := d.Validate(map[string]string{"host": "h", "from": "a@example.com", "tls": "ssl"}); err == nil {
		t.Error("Validate accepted tls=ssl")
	}
}

// TestDeliverTLSAndAuth sends through every tls mode with every auth kind
// to a real SMTP server, and checks what the server got.
func TestDeliverTLSAndAuth(t *testing.T) {
	tokens := newTokenEndpoint(t)
	const user, password = "mailer@example.org", "pa55-word-Secret"
	for _, mode := range []string{tlsNone, tlsStartTLS, tlsImplicit} {
		for _, auth := range []string{authNone, authPlain, authLogin, authXOAUTH2} {
			t.Run(mode+"/"+auth, func(t *testing.T) {
				cfg := serverConfig{tls: mode}
				var extra []string
				switch auth {
				case authPlain, authLogin:
					cfg.users = map[string]string{user: password}
					extra = []string{"auth", auth, "username", user, "password", password}
				case authXOAUTH2:
					cfg.xoauth2 = func(u, token string) bool { return u == user && tokens.valid(token) }
					extra = []string{"auth", auth, "username", user, "token_url", tokens.url,
						"client_id", tokens.clientID, "client_secret", tokens.clientSecret, "scopes", "smtp.send, offline"}
				}
				srv := newTestServer(t, cfg)
				ch := newChannel(t, nil)
				res := deliver(t, ch, testRequest(srv.settings(t, extra...), testTargets...))
				wantOutcome(t, res, channel.Success)
				if !slices.Equal(res.ResolvedTargets, testTargets) {
					t.Errorf("ResolvedTargets %q, want %q", res.ResolvedTargets, testTargets)
				}
				msgs := srv.messages()
				if len(msgs) != 1 {
					t.Fatalf("server got %d messages, want 1", len(msgs))
				}
				checkMessage(t, msgs[0], testTargets)
				wantUser := user
				if auth == authNone {
					wantUser = ""
				}
				if msgs[0].user != wantUser {
					t.Errorf("authenticated as %q, want %q", msgs[0].user, wantUser)
				}
			})
		}
	}
}

func TestDeliverTLSServerName(t *testing.T) {
	srv := newTestServer(t, serverConfig{tls: tlsStartTLS})
	ch := newChannel(t, nil)
	res := deliver(t, ch, testRequest(srv.settings(t, "tls_server_name", "mail.test"), testTargets...))
	wantOutcome(t, res, channel.Success)

	// A name the certificate does not hold is refused, for good.
	ch = newChannel(t, nil)
	res = deliver(t, ch, testRequest(srv.settings(t, "tls_server_name", "other.test"), testTargets...))
	wantOutcome(t, res, channel.Permanent)
}

func TestDeliverUntrustedCertificate(t *testing.T) {
	p, err := pkiOnce()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{tlsStartTLS, tlsImplicit} {
		t.Run(mode, func(t *testing.T) {
			srv := newTestServer(t, serverConfig{tls: mode})
			ch := newChannel(t, nil)
			other := writeFile(t, "other.pem", p.otherCAPEM)
			res := deliver(t, ch, testRequest(srv.settings(t, "tls_ca_file", other), testTargets...))
			wantOutcome(t, res, channel.Permanent)
			if !strings.Contains(res.Error, "certificate") {
				t.Errorf("error %q does not say certificate", res.Error)
			}
		})
	}
}

func TestDeliverTLSMismatch(t *testing.T) {
	plain := newTestServer(t, serverConfig{})
	ch := newChannel(t, nil)
	// The server offers no STARTTLS.
	res := deliver(t, ch, testRequest(plain.settings(t, "tls", "starttls"), testTargets...))
	wantOutcome(t, res, channel.Permanent)
	if !strings.Contains(res.Error, "STARTTLS") {
		t.Errorf("error %q does not say STARTTLS", res.Error)
	}
	// The server does not speak TLS from the first byte.
	res = deliver(t, ch, testRequest(plain.settings(t, "tls", "implicit"), testTargets...))
	wantOutcome(t, res, channel.Permanent)

	// The server offers no AUTH.
	res = deliver(t, ch, testRequest(plain.settings(t, "auth", "plain", "username", "u", "password", "p"), testTargets...))
	wantOutcome(t, res, channel.Permanent)
}

// TestDeliverNoClearTextPassword checks that plain and login refuse to send
// a password without TLS to a host other than localhost.
func TestDeliverNoClearTextPassword(t *testing.T) {
	if l, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Skipf("no 127.0.0.2 here: %v", err)
	} else {
		_ = l.Close()
	}
	srv := newTestServer(t, serverConfig{listen: "127.0.0.2:0", users: map[string]string{"u": "pass-Secret-5"}})
	ch := newChannel(t, nil)
	for _, auth := range []string{authPlain, authLogin} {
		res := deliver(t, ch, testRequest(srv.settings(t, "auth", auth, "username", "u", "password", "pass-Secret-5"), testTargets...))
		wantOutcome(t, res, channel.Permanent)
		if !strings.Contains(res.Error, "unencrypted") {
			t.Errorf("%s: error %q", auth, res.Error)
		}
	}
}

// TestDeliverHeaders checks UTF-8 text and that a subject cannot add
// headers.
func TestDeliverHeaders(t *testing.T) {
	srv := newTestServer(t, serverConfig{})
	ch := newChannel(t, nil)
	req := testRequest(srv.settings(t), "alice@example.com")
	req.Notification.Subject = "Überdruck in Kessel 3 – 5 bar\r\nBcc: mallory@example.com"
	req.Notification.Body = "Température: 42 °C\r\nÉtat: critique"
	req.Notification.ID = "not a <valid> id"
	wantOutcome(t, deliver(t, ch, req), channel.Success)
	msgs := srv.messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages", len(msgs))
	}
	if got := msgs[0].rcpts; !slices.Equal(got, []string{"alice@example.com"}) {
		t.Errorf("RCPT TO %q", got)
	}
	msg, err := netmail.ReadMessage(strings.NewReader(string(msgs[0].data)))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := msg.Header["Bcc"]; ok {
		t.Errorf("a Bcc header was injected: %q", v)
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "Überdruck in Kessel 3 – 5 bar  Bcc: mallory@example.com"; subject != want {
		t.Errorf("Subject %q, want %q", subject, want)
	}
	if id := msg.Header.Get("Message-Id"); id == "" || strings.Contains(id, "valid") {
		t.Errorf("Message-ID %q", id)
	}
	b, err := io.ReadAll(quotedprintable.NewReader(msg.Body))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimRight(string(b), "\r\n"); got != "Température: 42 °C\r\nÉtat: critique" {
		t.Errorf("body %q", got)
	}
}

func TestDeliverInvalidSettings(t *testing.T) {
	srv := newTestServer(t, serverConfig{})
	ch := newChannel(t, nil)
	base := srv.settings(t)
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "<unset>" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	cases := []struct {
		name     string
		settings map[string]string
		setting  string // named in the error
		value    string // never in the error
	}{
		{"missing host", with("host", "<unset>"), "host", ""},
		{"blank host", with("host", "  "), "host", ""},
		{"host with port", with("host", "smtp.example.com:25"), "host", "smtp.example.com"},
		{"missing from", with("from", "<unset>"), "from", ""},
		{"invalid from", with("from", "not-an-address-xyz"), "from", "not-an-address-xyz"},
		{"invalid tls", with("tls", "sslv3-please"), "tls", "sslv3-please"},
		{"invalid auth", with("auth", "kerberos-xyz"), "auth", "kerberos-xyz"},
		{"invalid port", with("port", "70000"), "port", "70000"},
		{"plain without password", with("auth", "plain", "username", "u"), "password", ""},
		{"login without username", with("auth", "login", "password", "hunter2-Secret"), "username", "hunter2-Secret"},
		{"xoauth2 without token_url", with("auth", "xoauth2", "username", "u", "client_id", "c",
			"client_secret", "cs-Secret-1"), "token_url", "cs-Secret-1"},
		{"xoauth2 bad token_url", with("auth", "xoauth2", "username", "u", "token_url", "ftp://x/y", "client_id", "c",
			"client_secret", "cs-Secret-2"), "token_url", "cs-Secret-2"},
		{"xoauth2 without client_secret", with("auth", "xoauth2", "username", "u", "token_url", "https://x/y",
			"client_id", "c"), "client_secret", ""},
		{"invalid pool_size", with("pool_size", "0"), "pool_size", ""},
		{"invalid connect_timeout", with("connect_timeout", "soon-ish"), "connect_timeout", "soon-ish"},
		{"missing tls_ca_file", with("tls", "starttls", "tls_ca_file", "/nonexistent/ca-xyz.pem"), "tls_ca_file", "ca-xyz"},
		{"tls_ca_file without certificates", with("tls", "starttls", "tls_ca_file", writeFile(t, "empty.pem", []byte("nothing"))),
			"tls_ca_file", "empty.pem"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := deliver(t, ch, testRequest(c.settings, testTargets...))
			wantOutcome(t, res, channel.Permanent)
			if !strings.Contains(res.Error, `"`+c.setting+`"`) {
				t.Errorf("error %q does not name setting %q", res.Error, c.setting)
			}
			if c.value != "" && strings.Contains(res.Error, c.value) {
				t.Errorf("error %q repeats the value %q", res.Error, c.value)
			}
		})
	}
	if n := srv.accepted.Load(); n != 0 {
		t.Errorf("invalid settings opened %d connections", n)
	}
}

func TestDeliverInvalidTargets(t *testing.T) {
	srv := newTestServer(t, serverConfig{})
	ch := newChannel(t, nil)
	res := deliver(t, ch, testRequest(srv.settings(t)))
	wantOutcome(t, res, channel.Permanent)

	// Only invalid targets: nothing to send, each Permanent.
	res = deliver(t, ch, testRequest(srv.settings(t), "dave at example dot com", "<>"))
	wantOutcome(t, res, channel.Permanent)
	wantTargets(t, res, channel.Permanent, channel.Permanent)
	if n := srv.accepted.Load(); n != 0 {
		t.Errorf("invalid targets opened %d connections", n)
	}

	// An invalid target fails alone: the others get the message.
	targets := []string{"alice@example.com", "dave at example dot com", "bob@example.net"}
	res = deliver(t, ch, testRequest(srv.settings(t), targets...))
	wantOutcome(t, res, channel.Permanent)
	wantTargets(t, res, channel.Success, channel.Permanent, channel.Success)
	for _, s := range []string{"alice@example.com", "dave at example", "bob@example.net"} {
		if strings.Contains(res.Error, s) {
			t.Errorf("error %q shows target %q", res.Error, s)
		}
	}
	if !strings.Contains(res.Error, "1 of 3 targets failed: not a valid e-mail address") {
		t.Errorf("error %q does not sum the targets up", res.Error)
	}
	if len(res.Targets) == 3 && res.Targets[1].Error != "not a valid e-mail address" {
		t.Errorf("target 2: error %q", res.Targets[1].Error)
	}
	msgs := srv.messages()
	if len(msgs) != 1 {
		t.Fatalf("server got %d messages, want 1", len(msgs))
	}
	checkMessage(t, msgs[0], []string{"alice@example.com", "bob@example.net"})

	// Display names are dropped and duplicates sent once, answered at each
	// place in the list.
	res = deliver(t, ch, testRequest(srv.settings(t), "Alice <alice@example.com>", "alice@example.com", " bob@example.net "))
	wantOutcome(t, res, channel.Success)
	wantTargets(t, res, channel.Success, channel.Success, channel.Success)
	want := []string{"alice@example.com", "bob@example.net"}
	if !slices.Equal(res.ResolvedTargets, want) {
		t.Errorf("ResolvedTargets %q, want %q", res.ResolvedTargets, want)
	}
	if got := srv.messages()[1].rcpts; !slices.Equal(got, want) {
		t.Errorf("RCPT TO %q, want %q", got, want)
	}
}

// wantTargets checks that res answers each target with the outcome want
// gives at its place, with an error on each failure and none on a Success.
// It may run on any goroutine.
func wantTargets(t testing.TB, res channel.Result, want ...channel.Outcome) {
	t.Helper()
	if len(res.Targets) != len(want) {
		t.Errorf("%d target results %+v, want %d", len(res.Targets), res.Targets, len(want))
		return
	}
	for i, r := range res.Targets {
		if r.Outcome != want[i] || (r.Outcome == channel.Success) != (r.Error == "") {
			t.Errorf("target %d: %v (%q), want %v", i+1, r.Outcome, r.Error, want[i])
		}
	}
}

// fiveTargets are the recipients of the per-target tests.
var fiveTargets = []string{"ann@example.com", "ben@example.com", "typo@example.con", "dan@example.org", "eve@example.net"}

// refuse returns the answer to RCPT TO of a server that refuses to with
// code, echoing the address as servers do, and accepts everyone else.
func refuse(to string, code int) func(string) error {
	return func(rcpt string) error {
		if rcpt != to {
			return nil
		}
		return &smtp.SMTPError{Code: code, EnhancedCode: smtp.EnhancedCode{code / 100, 1, 1},
			Message: "<" + rcpt + ">: Recipient address rejected for " + rcpt}
	}
}

// TestDeliverPerTarget plays a real SMTP server refusing one recipient of
// five: the four others get the message, exactly once each, and each target
// is answered by its own fate; no error names an address.
func TestDeliverPerTarget(t *testing.T) {
	cases := []struct {
		name    string
		rcpt    func(string) error
		want    []channel.Outcome
		outcome channel.Outcome
		code    string // in the third target's error
	}{
		{"AllAccepted", nil,
			[]channel.Outcome{channel.Success, channel.Success, channel.Success, channel.Success, channel.Success},
			channel.Success, ""},
		{"One550", refuse("typo@example.con", 550),
			[]channel.Outcome{channel.Success, channel.Success, channel.Permanent, channel.Success, channel.Success},
			channel.Permanent, "550"},
		{"One450", refuse("typo@example.con", 450),
			[]channel.Outcome{channel.Success, channel.Success, channel.Transient, channel.Success, channel.Success},
			channel.Transient, "450"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := newTestServer(t, serverConfig{rcpt: c.rcpt})
			var logs logBuffer
			ch := newChannel(t, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
			res := deliver(t, ch, testRequest(srv.settings(t), fiveTargets...))
			wantOutcome(t, res, c.outcome)
			wantTargets(t, res, c.want...)
			var delivered []string
			for i, o := range c.want {
				if o == channel.Success {
					delivered = append(delivered, fiveTargets[i])
				}
			}
			if !slices.Equal(res.ResolvedTargets, delivered) {
				t.Errorf("ResolvedTargets %q, want %q", res.ResolvedTargets, delivered)
			}
			got := map[string]int{}
			for _, m := range srv.messages() {
				for _, r := range m.rcpts {
					got[r]++
				}
			}
			for _, a := range fiveTargets {
				want := 0
				if slices.Contains(delivered, a) {
					want = 1
				}
				if got[a] != want {
					t.Errorf("%s got %d messages, want %d", a, got[a], want)
				}
			}
			if msgs := srv.messages(); len(msgs) == 1 {
				checkMessage(t, msgs[0], delivered)
			} else {
				t.Errorf("server got %d messages, want 1", len(msgs))
			}
			if c.code != "" && (len(res.Targets) != 5 || !strings.Contains(res.Targets[2].Error, c.code)) {
				t.Errorf("targets %+v: the third's error does not hold %s", res.Targets, c.code)
			}
			texts := []string{res.Error, logs.String()}
			for _, r := range res.Targets {
				texts = append(texts, r.Error)
			}
			for _, text := range texts {
				for _, a := range append(fiveTargets, "outbox@example.org") {
					if strings.Contains(text, a) {
						t.Errorf("address %s shows in %q", a, text)
					}
				}
			}
			// A refusal leaves the connection fit for the next message.
			wantOutcome(t, deliver(t, ch, testRequest(srv.settings(t), "ann@example.com")), channel.Success)
			if n := srv.accepted.Load(); n != 1 {
				t.Errorf("%d connections, want 1", n)
			}
		})
	}
}

// TestDeliverTransactionFailures checks that a refused MAIL FROM or DATA,
// or every recipient refused, is answered per target: MAIL FROM's and
// DATA's answer applies to every recipient the server had not refused; a
// refused recipient keeps its own answer; nothing is sent when no recipient
// was accepted.
func TestDeliverTransactionFailures(t *testing.T) {
	refuseAll := func(string) error {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user"}
	}
	cases := []struct {
		name  string
		cfg   serverConfig
		want  []channel.Outcome
		codes []string // in each target's error
	}{
		{"MAIL 451", serverConfig{mail: func(string) error {
			return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try later"}
		}}, []channel.Outcome{channel.Transient, channel.Transient, channel.Transient}, []string{"451", "451", "451"}},
		{"DATA 554 after one RCPT 451", serverConfig{rcpt: refuse("bob@example.net", 451), data: func() error {
			return &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "rejected as spam"}
		}}, []channel.Outcome{channel.Permanent, channel.Transient, channel.Permanent}, []string{"554", "451", "554"}},
		{"every RCPT 550", serverConfig{rcpt: refuseAll},
			[]channel.Outcome{channel.Permanent, channel.Permanent, channel.Permanent}, []string{"550", "550", "550"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := newTestServer(t, c.cfg)
			ch := newChannel(t, nil)
			res := deliver(t, ch, testRequest(srv.settings(t), testTargets...))
			wantTargets(t, res, c.want...)
			if n := srv.count.Load(); n != 0 {
				t.Errorf("server accepted %d messages, want none", n)
			}
			for i, r := range res.Targets {
				if i < len(c.codes) && !strings.Contains(r.Error, c.codes[i]) {
					t.Errorf("target %d: error %q does not hold %s", i+1, r.Error, c.codes[i])
				}
			}
		})
	}
}

// TestDeliverSMTPReplies checks the classification of SMTP replies, and that
// an address echoed by the server is masked.
func TestDeliverSMTPReplies(t *testing.T) {
	unknown := func(to string) error {
		if to == "bob@example.net" {
			return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1},
				Message: "<bob@example.net>: Recipient address rejected: User unknown"}
		}
		return nil
	}
	busy := func(string) error {
		return &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0},
			Message: "Try again later, alice@example.com"}
	}
	cases := []struct {
		name string
		cfg  serverConfig
		want channel.Outcome
	}{
		{"RCPT 550", serverConfig{rcpt: unknown}, channel.Permanent},
		{"RCPT 451", serverConfig{rcpt: busy}, channel.Transient},
		{"MAIL 421", serverConfig{mail: func(string) error {
			return &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 7, 0}, Message: "Too many connections"}
		}}, channel.Transient},
		{"MAIL 553", serverConfig{mail: func(from string) error {
			return &smtp.SMTPError{Code: 553, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "Sender " + from + " not owned by user"}
		}}, channel.Permanent},
		{"DATA 554", serverConfig{data: func() error {
			return &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "Message rejected as spam"}
		}}, channel.Permanent},
		{"DATA 452", serverConfig{data: func() error {
			return &smtp.SMTPError{Code: 452, EnhancedCode: smtp.EnhancedCode{4, 3, 1}, Message: "Insufficient system storage"}
		}}, channel.Transient},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := newTestServer(t, c.cfg)
			var logs logBuffer
			ch := newChannel(t, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
			res := deliver(t, ch, testRequest(srv.settings(t), testTargets...))
			wantOutcome(t, res, c.want)
			code := strings.Fields(c.name)[1]
			if !strings.Contains(res.Error, code) {
				t.Errorf("error %q does not hold the reply code %s", res.Error, code)
			}
			for _, text := range []string{res.Error, logs.String()} {
				for _, a := range append(testTargets, "outbox@example.org") {
					if strings.Contains(text, a) {
						t.Errorf("address %s shows in %q", a, text)
					}
				}
			}
			if c.name == "RCPT 550" && !strings.Contains(res.Error, "b***@example.net") {
				t.Errorf("error %q does not hold the masked address", res.Error)
			}
			// A connection whose transaction failed is closed, not pooled;
			// one that only had recipients refused is kept.
			if strings.HasPrefix(c.name, "RCPT") {
				deliver(t, ch, testRequest(srv.settings(t), "carol@example.org"))
				if n := srv.accepted.Load(); n != 1 {
					t.Errorf("%d connections, want 1", n)
				}
				return
			}
			srv.waitClosed(t, 1)
		})
	}
}

func TestDeliverServerDown(t *testing.T) {
	host, port, _ := net.SplitHostPort(plugintest.RefusedAddr(t)) // nothing listens there
	ch := newChannel(t, nil)
	for _, mode := range []string{tlsNone, tlsStartTLS, tlsImplicit} {
		res := deliver(t, ch, testRequest(map[string]string{"host": host, "port": port, "tls": mode,
			"from": "outbox@example.org"}, testTargets...))
		wantOutcome(t, res, channel.Transient)
		if !strings.Contains(res.Error, "connect") {
			t.Errorf("%s: error %q", mode, res.Error)
		}
	}
}

// TestDeliverServerHangs checks that a server that accepts and never
// answers, or stops answering in the middle, costs no more than the
// delivery's deadline.
func TestDeliverServerHangs(t *testing.T) {
	const deadline = 300 * time.Millisecond
	check := func(t *testing.T, ch *Channel, settings map[string]string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start := time.Now()
		res := ch.Deliver(ctx, testRequest(settings, testTargets...))
		elapsed := time.Since(start)
		wantOutcome(t, res, channel.Transient)
		if elapsed > deadline+2*time.Second {
			t.Errorf("Deliver took %v with a deadline of %v", elapsed, deadline)
		}
		if !strings.Contains(res.Error, "deadline") {
			t.Errorf("error %q does not mention the deadline", res.Error)
		}
	}
	for _, mode := range []string{tlsNone, tlsStartTLS, tlsImplicit} {
		t.Run("greeting/"+mode, func(t *testing.T) {
			h := newHangingServer(t)
			host, port, _ := net.SplitHostPort(h.addr)
			ch := newChannel(t, nil)
			check(t, ch, map[string]string{"host": host, "port": port, "tls": mode,
				"from": "outbox@example.org", "connect_timeout": "1m"})
			<-h.accepted
		})
	}
	t.Run("data", func(t *testing.T) {
		release := make(chan struct{})
		var once sync.Once
		srv := newTestServer(t, serverConfig{data: func() error {
			<-release
			return nil
		}})
		t.Cleanup(func() { once.Do(func() { close(release) }) })
		ch := newChannel(t, nil)
		check(t, ch, srv.settings(t, "connect_timeout", "1m"))
		once.Do(func() { close(release) })
		// The interrupted connection is not reused.
		res := deliver(t, ch, testRequest(srv.settings(t, "connect_timeout", "1m"), testTargets...))
		wantOutcome(t, res, channel.Success)
		if n := srv.accepted.Load(); n != 2 {
			t.Errorf("%d connections, want 2", n)
		}
	})
	t.Run("pool exhausted", func(t *testing.T) {
		release := make(chan struct{})
		entered := make(chan struct{}, 1)
		var once sync.Once
		srv := newTestServer(t, serverConfig{data: func() error {
			entered <- struct{}{}
			<-release
			return nil
		}})
		t.Cleanup(func() { once.Do(func() { close(release) }) })
		ch := newChannel(t, nil)
		settings := srv.settings(t, "pool_size", "1")
		done := make(chan channel.Result)
		go func() { done <- deliver(t, ch, testRequest(settings, testTargets...)) }()
		<-entered // the only connection is busy
		check(t, ch, settings)
		once.Do(func() { close(release) })
		wantOutcome(t, <-done, channel.Success)
	})
}

func TestDeliverCanceled(t *testing.T) {
	srv := newTestServer(t, serverConfig{})
	ch := newChannel(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := ch.Deliver(ctx, testRequest(srv.settings(t), testTargets...))
	wantOutcome(t, res, channel.Transient)
	if n := srv.accepted.Load(); n != 0 {
		t.Errorf("a canceled delivery opened %d connections", n)
	}
}

// TestConnectionReuse checks that sequential and concurrent deliveries share
// at most pool_size connections.
func TestConnectionReuse(t *testing.T) {
	srv := newTestServer(t, serverConfig{})
	ch := newChannel(t, nil)
	settings := srv.settings(t, "pool_size", "3")
	for i := range 20 {
		res := deliver(t, ch, testRequest(settings, fmt.Sprintf("user%d@example.com", i)))
		wantOutcome(t, res, channel.Success)
	}
	if n := srv.accepted.Load(); n != 1 {
		t.Errorf("20 sequential deliveries used %d connections, want 1", n)
	}

	var wg sync.WaitGroup
	results := make(chan channel.Result, 60)
	for i := range 60 {
		wg.Go(func() {
			results <- deliver(t, ch, testRequest(settings, fmt.Sprintf("user%d@example.com", i), "all@example.com"))
		})
	}
	wg.Wait()
	close(results)
	for res := range results {
		wantOutcome(t, res, channel.Success)
	}
	if n := srv.accepted.Load(); n > 3 {
		t.Errorf("deliveries used %d connections, pool_size is 3", n)
	}
	if n := len(srv.messages()); n != 80 {
		t.Errorf("server got %d messages, want 80", n)
	}
	for _, m := range srv.messages() {
		if len(m.rcpts) == 0 || len(m.data) == 0 {
			t.Errorf("bad message %+v", m)
		}
	}
}

// TestStaleConnection checks that a pooled connection the server closed
// while idle is replaced without failing the delivery.
func TestStaleConnection(t *testing.T) {
	srv := newTestServer(t, serverConfig{})
	ch := newChannel(t, nil)
	settings := srv.settings(t)
	wantOutcome(t, deliver(t, ch, testRequest(settings, testTargets...)), channel.Success)
	srv.dropConnections()
	srv.waitClosed(t, 1)
	wantOutcome(t, deliver(t, ch, testRequest(settings, testTargets...)), channel.Success)
	if n := srv.accepted.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
	if n := len(srv.messages()); n != 2 {
		t.Errorf("%d messages, want 2", n)
	}
}

// TestSettingsChange checks that new connection settings get a new pool and
// the old pool's connections are closed.
func TestSettingsChange(t *testing.T) {
	a := newTestServer(t, serverConfig{})
	b := newTestServer(t, serverConfig{})
	ch := newChannel(t, nil)
	wantOutcome(t, deliver(t, ch, testRequest(a.settings(t), testTargets...)), channel.Success)
	wantOutcome(t, deliver(t, ch, testRequest(b.settings(t), testTargets...)), channel.Success)
	a.waitClosed(t, 1) // the old pool's idle connection
	if len(a.messages()) != 1 || len(b.messages()) != 1 {
		t.Errorf("messages: a %d, b %d", len(a.messages()), len(b.messages()))
	}
	// A change of a setting that is not about the connection keeps the pool.
	wantOutcome(t, deliver(t, ch, testRequest(b.settings(t, "from", "other@example.org"), testTargets...)), channel.Success)
	if n := b.accepted.Load(); n != 1 {
		t.Errorf("b: %d connections, want 1", n)
	}
	// A changed password is a new pool.
	c := newTestServer(t, serverConfig{users: map[string]string{"u": "p1", "v": "p2"}})
	wantOutcome(t, deliver(t, ch, testRequest(c.settings(t, "auth", "plain", "username", "u", "password", "p1"), testTargets...)), channel.Success)
	b.waitClosed(t, 1)
	wantOutcome(t, deliver(t, ch, testRequest(c.settings(t, "auth", "plain", "username", "v", "password", "p2"), testTargets...)), channel.Success)
	c.waitClosed(t, 1)
	if n := c.accepted.Load(); n != 2 {
		t.Errorf("c: %d connections, want 2", n)
	}
}

func TestClose(t *testing.T) {
	srv := newTestServer(t, serverConfig{})
	ch := New(nil)
	settings := srv.settings(t, "pool_size", "2")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { wantOutcome(t, deliver(t, ch, testRequest(settings, testTargets...)), channel.Success) })
	}
	wg.Wait()
	open := int(srv.accepted.Load())
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	srv.waitClosed(t, open)
	// The channel is still usable.
	wantOutcome(t, deliver(t, ch, testRequest(settings, testTargets...)), channel.Success)
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	srv.waitClosed(t, 1)
}

// TestXOAUTH2TokenCache checks that the token is fetched once, shared by
// concurrent connections and reused until it nearly expires.
func TestXOAUTH2TokenCache(t *testing.T) {
	tokens := newTokenEndpoint(t)
	var mu sync.Mutex
	var used []string
	srv := newTestServer(t, serverConfig{tls: tlsStartTLS, xoauth2: func(user, token string) bool {
		mu.Lock()
		used = append(used, token)
		mu.Unlock()
		return user == "mailer@example.org" && tokens.valid(token)
	}})
	var now struct {
		sync.Mutex
		offset time.Duration
	}
	ch := newChannel(t, nil)
	ch.now = func() time.Time {
		now.Lock()
		defer now.Unlock()
		return time.Now().Add(now.offset)
	}
	settings := srv.settings(t, "auth", "xoauth2", "username", "mailer@example.org", "token_url", tokens.url,
		"client_id", tokens.clientID, "client_secret", tokens.clientSecret, "pool_size", "4")

	// Concurrent deliveries open up to four connections with one token.
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() { wantOutcome(t, deliver(t, ch, testRequest(settings, testTargets...)), channel.Success) })
	}
	wg.Wait()
	if n := tokens.fetches.Load(); n != 1 {
		t.Errorf("%d tokens fetched, want 1", n)
	}
	// New connections reuse the cached token.
	for range 3 {
		_ = ch.Close()
		wantOutcome(t, deliver(t, ch, testRequest(settings, testTargets...)), channel.Success)
	}
	if n := tokens.fetches.Load(); n != 1 {
		t.Errorf("%d tokens fetched, want 1", n)
	}
	// Shortly before it expires, a new one is fetched.
	now.Lock()
	now.offset = time.Hour - 30*time.Second
	now.Unlock()
	_ = ch.Close()
	wantOutcome(t, deliver(t, ch, testRequest(settings, testTargets...)), channel.Success)
	_ = ch.Close()
	wantOutcome(t, deliver(t, ch, testRequest(settings, testTargets...)), channel.Success)
	if n := tokens.fetches.Load(); n != 2 {
		t.Errorf("%d tokens fetched, want 2", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(used) == 0 || !strings.HasPrefix(used[len(used)-1], "tok-2-") {
		t.Errorf("tokens used: %q", used)
	}
}

func TestXOAUTH2TokenEndpointErrors(t *testing.T) {
	srv := newTestServer(t, serverConfig{xoauth2: func(string, string) bool { return true }})
	tokens := newTokenEndpoint(t)
	settings := func(secret string) map[string]string {
		return srv.settings(t, "auth", "xoauth2", "username", "mailer@example.org", "token_url", tokens.url,
			"client_id", tokens.clientID, "client_secret", secret)
	}
	check := func(t *testing.T, res channel.Result, want channel.Outcome, secret string) {
		t.Helper()
		wantOutcome(t, res, want)
		if strings.Contains(res.Error, secret) || strings.Contains(res.Error, tokens.clientSecret) {
			t.Errorf("error %q shows the client secret", res.Error)
		}
	}
	t.Run("wrong secret", func(t *testing.T) {
		ch := newChannel(t, nil)
		res := deliver(t, ch, testRequest(settings("wrong-Secret-123"), testTargets...))
		check(t, res, channel.Permanent, "wrong-Secret-123")
		if !strings.Contains(res.Error, "401") || !strings.Contains(res.Error, "invalid_client") {
			t.Errorf("error %q", res.Error)
		}
	})
	t.Run("endpoint 503", func(t *testing.T) {
		tokens.status.Store(503)
		defer tokens.status.Store(0)
		ch := newChannel(t, nil)
		res := deliver(t, ch, testRequest(settings(tokens.clientSecret), testTargets...))
		check(t, res, channel.Transient, tokens.clientSecret)
		if !strings.Contains(res.Error, "503") {
			t.Errorf("error %q", res.Error)
		}
	})
	t.Run("endpoint 400 echoing the secret", func(t *testing.T) {
		tokens.status.Store(400)
		defer tokens.status.Store(0)
		ch := newChannel(t, nil)
		res := deliver(t, ch, testRequest(settings(tokens.clientSecret), testTargets...))
		check(t, res, channel.Permanent, tokens.clientSecret)
	})
	t.Run("endpoint down", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		s := settings(tokens.clientSecret)
		s["token_url"] = "http://" + addr + "/token"
		ch := newChannel(t, nil)
		res := deliver(t, ch, testRequest(s, testTargets...))
		check(t, res, channel.Transient, tokens.clientSecret)
	})
	if n := srv.accepted.Load(); n != 0 {
		t.Errorf("%d SMTP connections without a token", n)
	}
}

// TestNoSecretsInLogsOrErrors captures every log record and error text of
// failing authenticated deliveries and looks for secrets and addresses.
func TestNoSecretsInLogsOrErrors(t *testing.T) {
	const user, password, wrong = "mailer@example.org", "Correct-Horse-77", "Wrong-Battery-99"
	tokens := newTokenEndpoint(t)
	var logs logBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var texts []string

	for _, mode := range []string{tlsNone, tlsStartTLS, tlsImplicit} {
		for _, auth := range []string{authPlain, authLogin} {
			srv := newTestServer(t, serverConfig{tls: mode, users: map[string]string{user: password}})
			ch := newChannel(t, logger)
			res := deliver(t, ch, testRequest(srv.settings(t, "auth", auth, "username", user, "password", wrong), testTargets...))
			wantOutcome(t, res, channel.Permanent)
			if !strings.Contains(res.Error, "535") {
				t.Errorf("%s/%s: error %q does not hold 535", mode, auth, res.Error)
			}
			texts = append(texts, res.Error)
		}
	}

	// XOAUTH2: the server refuses the token.
	srv := newTestServer(t, serverConfig{tls: tlsStartTLS, xoauth2: func(string, string) bool { return false }})
	ch := newChannel(t, logger)
	settings := srv.settings(t, "auth", "xoauth2", "username", user, "token_url", tokens.url,
		"client_id", tokens.clientID, "client_secret", tokens.clientSecret)
	res := deliver(t, ch, testRequest(settings, testTargets...))
	wantOutcome(t, res, channel.Permanent)
	texts = append(texts, res.Error)
	// A refused token is not reused.
	res = deliver(t, ch, testRequest(settings, testTargets...))
	wantOutcome(t, res, channel.Permanent)
	texts = append(texts, res.Error)
	if n := tokens.fetches.Load(); n != 2 {
		t.Errorf("%d tokens fetched, want 2", n)
	}

	// A server that echoes recipients in its replies.
	echo := newTestServer(t, serverConfig{users: map[string]string{user: password}, rcpt: func(to string) error {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "<" + to + ">: unknown user " + to}
	}})
	ch = newChannel(t, logger)
	res = deliver(t, ch, testRequest(echo.settings(t, "auth", "login", "username", user, "password", password), testTargets...))
	wantOutcome(t, res, channel.Permanent)
	texts = append(texts, res.Error)

	texts = append(texts, logs.String())
	if !strings.Contains(logs.String(), "delivery failed") {
		t.Errorf("nothing logged:\n%s", logs.String())
	}
	secrets := []string{password, wrong, tokens.clientSecret, "tok-1-", "tok-2-", user}
	secrets = append(secrets, testTargets...)
	for _, text := range texts {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%q shows in %q", s, text)
			}
		}
	}
}

// TestServerReplyURLsAndPathsRemoved plays the review's SMTP server, which
// answers RCPT TO with a text holding an intranet URL with a session and a
// file path: the notification's error (which viewers read) and the log keep
// the reply's code and words, mask the addresses, and hold neither the URL
// nor the path. Before, only the addresses were masked.
func TestServerReplyURLsAndPathsRemoved(t *testing.T) {
	const url, path = "http://intranet.example/x?session=ABCDEF123456", "/etc/passwd"
	srv := newTestServer(t, serverConfig{rcpt: func(to string) error {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1},
			Message: to + " unknown user; contact admin@corp.example or see " + url + " " + path + " or C:\\mail\\spool"}
	}})
	var logs logBuffer
	ch := newChannel(t, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	res := deliver(t, ch, testRequest(srv.settings(t), testTargets...))
	wantOutcome(t, res, channel.Permanent)
	for _, want := range []string{"550", "unknown user; contact a***@corp.example or see [redacted] [redacted] or [redacted]"} {
		if !strings.Contains(res.Error, want) {
			t.Errorf("error %q, want it to hold %q", res.Error, want)
		}
	}
	for _, text := range []string{res.Error, logs.String()} {
		for _, leak := range []string{"intranet.example", "session", "ABCDEF123456", path, "spool", "admin@corp.example"} {
			if strings.Contains(text, leak) {
				t.Errorf("%q shows in %q", leak, text)
			}
		}
	}
}

// TestConcurrentDeliveries runs many deliveries at once over several
// settings changes, for the race detector.
func TestConcurrentDeliveries(t *testing.T) {
	a := newTestServer(t, serverConfig{tls: tlsStartTLS})
	b := newTestServer(t, serverConfig{})
	ch := newChannel(t, nil)
	sa, sb := a.settings(t), b.settings(t)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			s := sa
			if i%8 == 7 {
				s = sb
			}
			res := deliver(t, ch, testRequest(s, fmt.Sprintf("user%d@example.com", i)))
			wantOutcome(t, res, channel.Success)
		})
		if i == 32 {
			wg.Go(func() { _ = ch.Close() })
		}
	}
	wg.Wait()
	if n := len(a.messages()) + len(b.messages()); n != 64 {
		t.Errorf("%d messages, want 64", n)
	}
}

func TestMask(t *testing.T) {
	m := &masker{secrets: []string{"hunter2"}, addresses: []string{"ünïcode@exämple.com"}}
	got := m.mask(`550 5.1.1 <bob@example.com>: unknown; "john doe"@example.org; pw hunter2; ünïcode@exämple.com` + "\r\nnext line")
	for _, s := range []string{"bob@example.com", "john doe", "hunter2", "ünïcode@"} {
		if strings.Contains(got, s) {
			t.Errorf("%q shows in %q", s, got)
		}
	}
	if !strings.Contains(got, "b***@example.com") || strings.Contains(got, "\n") {
		t.Errorf("mask: %q", got)
	}
	long := m.mask(strings.Repeat("é", 1000))
	if len(long) > maxErrorText+len("…") {
		t.Errorf("long text not cut: %d bytes", len(long))
	}
}
