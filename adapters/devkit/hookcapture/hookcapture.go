// Package hookcapture is a local HTTP receiver that accepts every request
// and keeps it instead of acting on it: the webhook sink of outbox dev, as
// smtpcapture is its mail sink. A list of a webhook-like channel (the
// built-in webhook, a third-party plugin) pointed at it shows what the
// channel sent on the page's /hooks view.
//
// It listens on loopback only and answers only loopback peers. A request's
// body is bounded (MaxBodyBytes: a larger one is refused with 413 and not
// kept), a kept body is clipped (KeepBodyBytes), at most Keep requests are
// kept, and the headers and query parameters that carry credentials
// (Authorization, cookies, anything named like a token, secret, signature,
// key or password) are kept by name with their values hidden.
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
	"sync"
	"time"

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

	mu     sync.Mutex
	posts  []Post
	notify chan struct{} // closed and replaced at each request kept
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
	return &Server{cfg: cfg, notify: make(chan struct{}), done: make(chan struct{})}
}

// Start listens on cfg.Addr and serves until Close.
func Start(cfg Config) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if !guard.OnLoopback(cfg.Addr) {
		return nil, fmt.Errorf("hookcapture: %q is not a loopback address: the receiver keeps whatever it is sent, so it listens on loopback only", cfg.Addr)
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
		return nil, fmt.Errorf("hookcapture: %s is not a loopback address: the receiver keeps whatever it is sent, so it listens on loopback only", ln.Addr())
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
func (s *Server) Posts() []Post {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.posts)
}

// Wait blocks until at least n requests are kept or ctx ends.
func (s *Server) Wait(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		got, ch := len(s.posts), s.notify
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("hookcapture: %d of %d requests received: %w", got, n, ctx.Err())
		}
	}
}

// Handler serves the receiver: a loopback peer's request of any method
// and path is kept and answered 204; any other peer gets 403, a body over
// MaxBodyBytes 413.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil || !peer.Addr().Unmap().IsLoopback() {
			http.Error(w, "the webhook capture of outbox dev answers this machine only", http.StatusForbidden)
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
		p := Post{At: time.Now().UTC(), Method: r.Method, Path: r.URL.Path, Query: maskQuery(r.URL.RawQuery),
			Header: maskHeader(r.Header), Size: int64(len(body))}
		p.Body = slices.Clip(body[:min(len(body), s.cfg.KeepBodyBytes)])
		s.keep(p)
		w.WriteHeader(http.StatusNoContent)
	})
}

// keep stores p, dropping the oldest beyond Keep, and wakes Wait.
func (s *Server) keep(p Post) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.posts = append(s.posts, p)
	if over := len(s.posts) - s.cfg.Keep; over > 0 {
		s.posts = slices.Delete(s.posts, 0, over)
	}
	close(s.notify)
	s.notify = make(chan struct{})
}

// secretWords are parts of header and query parameter names that carry a
// credential.
var secretWords = []string{"auth", "cookie", "token", "secret", "signature", "key", "password", "pass", "session", "sig", "credential"}

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
