// Package hookcapture is a local HTTP receiver that accepts every request
// and keeps it instead of acting on it: the webhook sink of outbox dev, as
// smtpcapture is its mail sink. A list of a webhook-like channel (the
// built-in webhook, a third-party plugin) pointed at it shows what the
// channel sent on the page's /hooks view.
//
// It listens on loopback only and answers only loopback peers that name a
// loopback host, and refuses what a browser sends for a web page (a request
// with Origin or a cross-site Sec-Fetch-Site), so that no website the
// developer visits fills it. A request's body is bounded (MaxBodyBytes: a
// larger one is refused with 413 and not kept), a kept body is clipped
// (KeepBodyBytes), at most Keep requests are kept, the headers and query
// parameters that carry credentials (Authorization, cookies, anything named
// like a token, secret, signature, HMAC, JWT, key or password) are kept by
// name with their values hidden, and so are the path's long opaque segments
// (the secret of a Slack-style webhook URL).
package hookcapture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/siteline/outbox/adapters/devkit/kept"
	"github.com/siteline/outbox/adapters/guard"
)

// Defaults of Config.
const (
	DefaultKeep          = 500
	DefaultMaxBodyBytes  = 1 << 20
	DefaultKeepBodyBytes = 64 << 10
)

// Hidden replaces the value of a header or query parameter that carries a
// credential.
const Hidden = "(hidden)"

// Config configures a Server.
type Config struct {
	// Addr is the loopback TCP address to listen on; default 127.0.0.1:0
	// (a free port, see Server.Addr). An address off loopback is refused.
	Addr string
	// Keep is how many requests are kept, oldest dropped first; default
	// DefaultKeep.
	Keep int
	// MaxBodyBytes bounds a request's body: a larger one is answered 413
	// and not kept. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// KeepBodyBytes is how much of a body is kept; default
	// DefaultKeepBodyBytes.
	KeepBodyBytes int
}

// Header is one request header as kept.
type Header struct {
	Name, Value string
}

// Post is one request received.
type Post struct {
	At     time.Time
	Method string
	// Path is the request's path; Query its query string, values of
	// credential parameters hidden.
	Path, Query string
	// Header holds the request's headers sorted by name, values of
	// credential headers hidden.
	Header []Header
	// Body is the request's body, its first KeepBodyBytes; Size is its
	// whole length.
	Body []byte
	Size int64
}

// Clipped reports whether the body kept is shorter than the one received.
func (p Post) Clipped() bool { return int64(len(p.Body)) < p.Size }

// Server is a running receiver. It is safe for concurrent use.
type Server struct {
	cfg  Config
	ln   net.Listener
	srv  *http.Server
	done chan struct{}

	posts *kept.List[Post]
}

// New returns a receiver of cfg that does not listen: its Handler serves
// requests given to it (tests, fuzzing).
func New(cfg Config) *Server {
	if cfg.Keep <= 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.KeepBodyBytes <= 0 {
		cfg.KeepBodyBytes = DefaultKeepBodyBytes
	}
	return &Server{cfg: cfg, posts: kept.New[Post](cfg.Keep), done: make(chan struct{})}
}

// Start listens on cfg.Addr and serves until Close.
func Start(cfg Config) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if !guard.OnLoopback(cfg.Addr) {
		return nil, notLoopback(fmt.Sprintf("%q", cfg.Addr))
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("hookcapture: %w", err)
	}
	return Serve(ln, cfg)
}

// Serve serves on ln, a loopback listener, until Close (which closes ln);
// cfg.Addr is not used. A listener off loopback is closed and refused.
func Serve(ln net.Listener, cfg Config) (*Server, error) {
	if !guard.OnLoopback(ln.Addr().String()) {
		_ = ln.Close()
		return nil, notLoopback(ln.Addr().String())
	}
	s := New(cfg)
	s.ln = ln
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
		WriteTimeout: time.Minute, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 32 << 10}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln) // returns ErrServerClosed at Close
	}()
	return s, nil
}

// notLoopback is the refusal of an address off loopback.
func notLoopback(addr string) error {
	return fmt.Errorf("hookcapture: %s is not a loopback address: the receiver keeps whatever it is sent, so it listens on loopback only", addr)
}

// Addr is the address the receiver listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the receiver's base URL, http://ADDR, without a trailing slash.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Close stops the receiver: it stops listening, and requests in flight
// end.
func (s *Server) Close() error {
	if s.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, s.srv.Close())
	}
	<-s.done
	if err != nil {
		return fmt.Errorf("hookcapture: close: %w", err)
	}
	return nil
}

// Posts returns the requests kept, oldest first.
func (s *Server) Posts() []Post { return s.posts.All() }

// Wait blocks until at least n requests are kept or ctx ends.
func (s *Server) Wait(ctx context.Context, n int) error {
	if got, err := s.posts.Wait(ctx, n); err != nil {
		return fmt.Errorf("hookcapture: %d of %d requests received: %w", got, n, err)
	}
	return nil
}

// Handler serves the receiver: a loopback peer's request of any method
// and path is kept and answered 204; any other peer, a Host that is not a
// loopback name (DNS rebinding) and a browser's request for a web page
// (Origin, or Sec-Fetch-Site other than none) get 403, a body over
// MaxBodyBytes 413.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil || !peer.Addr().Unmap().IsLoopback() || !loopbackHost(r.Host) {
			http.Error(w, "the webhook capture of outbox dev answers this machine only", http.StatusForbidden)
			return
		}
		if r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") != "" && r.Header.Get("Sec-Fetch-Site") != "none" {
			http.Error(w, "the webhook capture of outbox dev takes no request from a web page", http.StatusForbidden)
			return
		}
		if r.ContentLength > s.cfg.MaxBodyBytes {
			http.Error(w, fmt.Sprintf("body over %d bytes", s.cfg.MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			http.Error(w, fmt.Sprintf("body over %d bytes", s.cfg.MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return
		case err != nil:
			http.Error(w, "read the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		p := Post{At: time.Now().UTC(), Method: r.Method, Path: maskPath(r.URL.Path), Query: maskQuery(r.URL.RawQuery),
			Header: maskHeader(r.Header), Size: int64(len(body))}
		p.Body = slices.Clip(body[:min(len(body), s.cfg.KeepBodyBytes)])
		s.posts.Add(p)
		w.WriteHeader(http.StatusNoContent)
	})
}

// loopbackHost reports whether host, a request's Host (with or without a
// port), names this machine: localhost or a loopback address.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// secretWords are parts of header and query parameter names that carry a
// credential.
var secretWords = []string{"auth", "cookie", "token", "secret", "sign", "sig", "hmac", "jwt", "bearer", "key", "password",
	"pass", "pwd", "session", "credential", "nonce"}

// minOpaqueSegment is the length from which a path segment of letters
// and digits mixed is taken for a credential (Slack's webhook secret is
// 24 characters; a UUID 36).
const minOpaqueSegment = 16

// maskPath returns path with each long opaque segment — at least
// minOpaqueSegment characters of letters, digits, '-' and '_', letters
// and digits both — shown as Hidden: the secret part of a webhook URL
// such as Slack's /services/T…/B…/SECRET. Short or plain segments (/hooks,
// /control-room, /v1) stay.
func maskPath(path string) string {
	parts := strings.Split(path, "/")
	for i, p := range parts {
		if opaque(p) {
			parts[i] = Hidden
		}
	}
	return strings.Join(parts, "/")
}

// opaque reports whether a path segment looks like a credential.
func opaque(seg string) bool {
	if len(seg) < minOpaqueSegment {
		return false
	}
	var letter, digit bool
	for _, c := range seg {
		switch {
		case c >= '0' && c <= '9':
			digit = true
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			letter = true
		case c == '-' || c == '_':
		default:
			return false
		}
	}
	return letter && digit
}

// IsSecretName reports whether a header or query parameter named name
// carries a credential, whose value is hidden.
func IsSecretName(name string) bool {
	n := strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// maskHeader returns h sorted by name, one Header per value, credential
// values hidden.
func maskHeader(h http.Header) []Header {
	var out []Header
	for _, name := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[name] {
			if IsSecretName(name) {
				v = Hidden
			}
			out = append(out, Header{Name: name, Value: v})
		}
	}
	return out
}

// maskQuery returns the query string raw, its parameters sorted, with the
// values of credential parameters shown as Hidden; a query that does not
// parse is hidden whole.
func maskQuery(raw string) string {
	if raw == "" {
		return ""
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return Hidden
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(q)) {
		for _, v := range q[k] {
			if b.Len() > 0 {
				b.WriteByte('&')
			}
			b.WriteString(url.QueryEscape(k))
			b.WriteByte('=')
			if IsSecretName(k) {
				b.WriteString(Hidden)
			} else {
				b.WriteString(url.QueryEscape(v))
			}
		}
	}
	return b.String()
}
