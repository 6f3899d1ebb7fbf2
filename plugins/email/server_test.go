package email

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// testPKI is a CA and a server certificate it signed, for 127.0.0.1,
// localhost and mail.test, plus a second CA that signed nothing.
type testPKI struct {
	caPEM      []byte
	otherCAPEM []byte
	server     tls.Certificate
}

var pkiOnce = sync.OnceValues(newTestPKI)

func newTestPKI() (*testPKI, error) {
	newCA := func(name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber:          big.NewInt(1),
			Subject:               pkix.Name{CommonName: name},
			NotBefore:             time.Now().Add(-time.Hour),
			NotAfter:              time.Now().Add(24 * time.Hour),
			IsCA:                  true,
			BasicConstraintsValid: true,
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			return nil, nil, nil, err
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, nil, nil, err
		}
		return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
	}
	ca, caKey, caPEM, err := newCA("outbox test CA")
	if err != nil {
		return nil, err
	}
	_, _, otherPEM, err := newCA("other test CA")
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "mail.test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "mail.test"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	return &testPKI{
		caPEM:      caPEM,
		otherCAPEM: otherPEM,
		server:     tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
	}, nil
}

// writeFile writes data to a new file in t's temporary directory.
func writeFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// received is one message as the test SMTP server got it.
type received struct {
	from  string
	rcpts []string
	data  []byte
	user  string // who authenticated, "" when nobody
}

// serverConfig sets up a test SMTP server. Zero values: plain text, no AUTH.
type serverConfig struct {
	tls     string            // none, starttls or implicit
	users   map[string]string // PLAIN and LOGIN users and passwords
	xoauth2 func(user, token string) bool
	mail    func(from string) error // the answer to MAIL FROM; nil accepts
	rcpt    func(to string) error   // the answer to RCPT TO; nil accepts
	data    func() error            // called with the message; nil accepts
	discard bool                    // count messages, keep nothing (benchmarks)
	quit    func()                  // called when a client's QUIT arrives, before the server reads it; nil: nothing
	listen  string                  // the address to listen on; 127.0.0.1:0 when empty
}

// testServer is a real SMTP server (emersion/go-smtp) on a loopback port.
type testServer struct {
	cfg  serverConfig
	host string
	port string

	accepted atomic.Int64  // TCP connections accepted
	closed   chan struct{} // one value per TCP connection closed
	count    atomic.Int64  // messages received

	mu    sync.Mutex
	msgs  []received
	conns []net.Conn
}

// newTestServer starts a test SMTP server, closed at the end of the test.
func newTestServer(t testing.TB, cfg serverConfig) *testServer {
	t.Helper()
	s := &testServer{cfg: cfg, closed: make(chan struct{}, 1<<16)}
	srv := smtp.NewServer(smtp.BackendFunc(s.newSession))
	srv.Domain = "mail.test"
	srv.AllowInsecureAuth = true
	srv.ErrorLog = log.New(io.Discard, "", 0)

	addr := cfg.listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	raw, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var l net.Listener = &trackingListener{Listener: raw, s: s}
	if cfg.tls == tlsStartTLS || cfg.tls == tlsImplicit {
		p, err := pkiOnce()
		if err != nil {
			t.Fatal(err)
		}
		tc := &tls.Config{Certificates: []tls.Certificate{p.server}, MinVersion: tls.VersionTLS12}
		if cfg.tls == tlsImplicit {
			l = tls.NewListener(l, tc)
		} else {
			srv.TLSConfig = tc
		}
	}
	s.host, s.port, _ = net.SplitHostPort(raw.Addr().String())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		_ = raw.Close() // in case Serve had not registered it yet
		<-done
	})
	return s
}

// settings returns channel settings for this server: its host and port, its
// tls mode, the test CA, and a From address; kv are more settings.
func (s *testServer) settings(t testing.TB, kv ...string) map[string]string {
	t.Helper()
	tlsMode := s.cfg.tls
	if tlsMode == "" {
		tlsMode = tlsNone
	}
	m := map[string]string{
		settingHost: s.host,
		settingPort: s.port,
		settingTLS:  tlsMode,
		settingFrom: "Outbox <outbox@example.org>",
	}
	if tlsMode != tlsNone {
		p, err := pkiOnce()
		if err != nil {
			t.Fatal(err)
		}
		m[settingTLSCAFile] = writeFile(t, "ca.pem", p.caPEM)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// messages returns the messages received so far.
func (s *testServer) messages() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.msgs...)
}

// dropConnections closes every open connection from the server side.
func (s *testServer) dropConnections() {
	s.mu.Lock()
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// waitClosed waits until n connections have been closed.
func (s *testServer) waitClosed(t testing.TB, n int) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for range n {
		select {
		case <-s.closed:
		case <-timeout.C:
			t.Fatalf("connections still open after 10s")
		}
	}
}

// trackingListener counts and keeps the accepted connections.
type trackingListener struct {
	net.Listener
	s *testServer
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.s.accepted.Add(1)
	tc := &trackedConn{Conn: c, closed: l.s.closed, quit: l.s.cfg.quit}
	l.s.mu.Lock()
	l.s.conns = append(l.s.conns, tc)
	l.s.mu.Unlock()
	return tc, nil
}

// trackedConn reports its closing on closed, and calls quit (when set)
// before the server reads a QUIT, so that a test can hold the reply.
type trackedConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
	quit   func()
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.quit != nil && bytes.Contains(b[:n], []byte("QUIT")) {
		c.quit()
	}
	return n, err
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.closed <- struct{}{} })
	return err
}

// session is one SMTP session of the test server.
type session struct {
	s    *testServer
	user string
	msg  received
}

func (s *testServer) newSession(*smtp.Conn) (smtp.Session, error) {
	return &session{s: s}, nil
}

func (ss *session) authRequired() bool {
	return ss.s.cfg.users != nil || ss.s.cfg.xoauth2 != nil
}

func (ss *session) AuthMechanisms() []string {
	var mechs []string
	if ss.s.cfg.users != nil {
		mechs = append(mechs, sasl.Plain, sasl.Login)
	}
	if ss.s.cfg.xoauth2 != nil {
		mechs = append(mechs, "XOAUTH2")
	}
	return mechs
}

func (ss *session) Auth(mech string) (sasl.Server, error) {
	checkPassword := func(user, password string) error {
		if want, ok := ss.s.cfg.users[user]; !ok || want != password {
			return smtp.ErrAuthFailed
		}
		ss.user = user
		return nil
	}
	switch {
	case mech == sasl.Plain && ss.s.cfg.users != nil:
		return sasl.NewPlainServer(func(identity, user, password string) error {
			if identity != "" && identity != user {
				return smtp.ErrAuthFailed
			}
			return checkPassword(user, password)
		}), nil
	case mech == sasl.Login && ss.s.cfg.users != nil:
		return &loginServer{authenticate: checkPassword}, nil
	case mech == "XOAUTH2" && ss.s.cfg.xoauth2 != nil:
		return &xoauth2Server{authenticate: func(user, token string) error {
			if !ss.s.cfg.xoauth2(user, token) {
				return smtp.ErrAuthFailed
			}
			ss.user = user
			return nil
		}}, nil
	}
	return nil, smtp.ErrAuthUnknownMechanism
}

func (ss *session) Mail(from string, _ *smtp.MailOptions) error {
	if ss.authRequired() && ss.user == "" {
		return smtp.ErrAuthRequired
	}
	if ss.s.cfg.mail != nil {
		if err := ss.s.cfg.mail(from); err != nil {
			return err
		}
	}
	ss.msg = received{from: from, user: ss.user}
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if ss.s.cfg.rcpt != nil {
		if err := ss.s.cfg.rcpt(to); err != nil {
			return err
		}
	}
	ss.msg.rcpts = append(ss.msg.rcpts, to)
	return nil
}

func (ss *session) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if ss.s.cfg.data != nil {
		if err := ss.s.cfg.data(); err != nil {
			return err
		}
	}
	ss.s.count.Add(1)
	if !ss.s.cfg.discard {
		ss.msg.data = data
		ss.s.mu.Lock()
		ss.s.msgs = append(ss.s.msgs, ss.msg)
		ss.s.mu.Unlock()
	}
	ss.msg = received{}
	return nil
}

func (ss *session) Reset() { ss.msg = received{} }

func (ss *session) Logout() error { return nil }

// loginServer is the server side of SASL LOGIN, which go-sasl lacks.
type loginServer struct {
	step         int
	user         string
	authenticate func(user, password string) error
}

func (a *loginServer) Next(response []byte) (challenge []byte, done bool, err error) {
	switch a.step {
	case 0:
		a.step++
		if response == nil {
			return []byte("Username:"), false, nil
		}
		a.user = string(response) // an initial response holds the user name
		a.step++
		return []byte("Password:"), false, nil
	case 1:
		a.step++
		a.user = string(response)
		return []byte("Password:"), false, nil
	case 2:
		a.step++
		return nil, true, a.authenticate(a.user, string(response))
	}
	return nil, false, errors.New("unexpected LOGIN response")
}

// xoauth2Server is the server side of Google's and Microsoft's XOAUTH2:
// "user=<user>\x01auth=Bearer <token>\x01\x01".
type xoauth2Server struct {
	asked        bool
	authenticate func(user, token string) error
}

func (a *xoauth2Server) Next(response []byte) (challenge []byte, done bool, err error) {
	if response == nil && !a.asked {
		a.asked = true
		return []byte{}, false, nil
	}
	var user, token string
	for _, field := range strings.Split(string(response), "\x01") {
		if v, ok := strings.CutPrefix(field, "user="); ok {
			user = v
		}
		if v, ok := strings.CutPrefix(field, "auth=Bearer "); ok {
			token = v
		}
	}
	if user == "" || token == "" {
		return nil, true, smtp.ErrAuthFailed
	}
	return nil, true, a.authenticate(user, token)
}

// tokenEndpoint is a test OAuth2 token endpoint for the client credentials
// grant. It issues tok-1, tok-2, ... each valid for an hour.
type tokenEndpoint struct {
	url          string
	clientID     string
	clientSecret string
	status       atomic.Int64 // when not 0 nor 200, every request fails with it
	fetches      atomic.Int64 // tokens issued
	requests     atomic.Int64

	mu     sync.Mutex
	issued map[string]bool
}

func newTokenEndpoint(t testing.TB) *tokenEndpoint {
	t.Helper()
	e := &tokenEndpoint{clientID: "outbox-client", clientSecret: "s3cr3t-client-Secret", issued: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(srv.Close)
	e.url = srv.URL + "/token"
	return e
}

func (e *tokenEndpoint) serve(w http.ResponseWriter, r *http.Request) {
	e.requests.Add(1)
	w.Header().Set("Content-Type", "application/json")
	if s := int(e.status.Load()); s != 0 && s != http.StatusOK {
		w.WriteHeader(s)
		code := "server_error"
		if s < 500 {
			code = "invalid_client"
		}
		// An endpoint may echo the request: the channel must not repeat it.
		_ = json.NewEncoder(w).Encode(map[string]string{"error": code,
			"error_description": "client " + e.clientSecret + " refused"})
		return
	}
	if err := r.ParseForm(); err != nil || r.Method != http.MethodPost || r.PostForm.Get("grant_type") != "client_credentials" {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_request"})
		return
	}
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id != e.clientID || secret != e.clientSecret {
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_client"})
		return
	}
	n := e.fetches.Add(1)
	tok := fmt.Sprintf("tok-%d-%s", n, strings.Repeat("x", 20))
	e.mu.Lock()
	e.issued[tok] = true
	e.mu.Unlock()
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 3600})
}

// valid tells whether the endpoint issued token.
func (e *tokenEndpoint) valid(token string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.issued[token]
}

// hangingServer accepts TCP connections and never answers.
type hangingServer struct {
	addr     string
	accepted chan struct{}
}

func newHangingServer(t testing.TB) *hangingServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hangingServer{addr: l.Addr().String(), accepted: make(chan struct{}, 64)}
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			h.accepted <- struct{}{}
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return h
}

// logBuffer is a slog handler target that keeps every record's text.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
