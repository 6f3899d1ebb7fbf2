// Package smtpcapture is a local SMTP server that accepts every message and
// keeps it instead of sending it on: the mail sink of the embedded default
// set-up and of tests, like MailHog or smtp4dev. It speaks real SMTP over TCP
// (github.com/emersion/go-smtp), without TLS or authentication, so it must
// only listen on loopback.
package smtpcapture

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/siteline/outbox/adapters/devkit/kept"
)

// Message is one captured message.
type Message struct {
	// From is the envelope sender and To the envelope recipients (for a
	// BCC-only message, the only place they appear).
	From string
	To   []string
	// Data is the message as received (headers and body).
	Data []byte
	// At is when it was received.
	At time.Time
}

// Server is a running capture server. It is safe for concurrent use.
type Server struct {
	srv  *smtp.Server
	ln   net.Listener
	done chan struct{}

	dir       string
	reject    []string
	dataDelay time.Duration

	mu       sync.Mutex // numbers the files of dir in the order kept
	received int
	messages *kept.List[Message]
}

// Config configures a Server.
type Config struct {
	// Addr is the TCP address to listen on; default 127.0.0.1:0 (a free
	// port, see Server.Addr).
	Addr string
	// Keep is how many messages are kept, oldest dropped first; default
	// 10,000.
	Keep int
	// MaxMessageBytes caps one message; default 10 MiB.
	MaxMessageBytes int64
	// Dir, when set, also receives every message as a file NNNNNN.eml
	// (numbered from 1 per start; existing files are overwritten), to open
	// in a mail client.
	Dir string
	// Reject lists recipients the server refuses with 550 5.1.1, so that a
	// permanent failure can be tried: an address (any letter case), or
	// "@domain" for every address of the domain.
	Reject []string
	// DataDelay is how long the server waits, once a message's data is in,
	// before it keeps the message and answers the end of DATA: what a relay
	// spends committing each message to disk before its 250, for benchmarks
	// that should pay a real server's per-message cost; default 0.
	DataDelay time.Duration
}

// Start listens on cfg.Addr and serves until Close.
func Start(cfg Config) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Keep <= 0 {
		cfg.Keep = 10_000
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = 10 << 20
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("smtp capture: listen: %w", err)
	}
	if cfg.Dir != "" {
		if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("smtp capture: %w", err)
		}
	}
	s := &Server{ln: ln, done: make(chan struct{}), messages: kept.New[Message](cfg.Keep), dir: cfg.Dir, reject: cfg.Reject,
		dataDelay: cfg.DataDelay}
	s.srv = smtp.NewServer(s)
	s.srv.Domain = "localhost"
	s.srv.MaxMessageBytes = cfg.MaxMessageBytes
	s.srv.MaxRecipients = 10_000
	s.srv.ReadTimeout = time.Minute
	s.srv.WriteTimeout = time.Minute
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server, closing open connections, and waits for it.
func (s *Server) Close() error {
	err := s.srv.Close()
	// Close only closes listeners Serve already took up; closing ours too
	// ends a Serve that had not started yet.
	_ = s.ln.Close()
	<-s.done
	if errors.Is(err, smtp.ErrServerClosed) {
		err = nil
	}
	return err
}

// Messages returns the captured messages, oldest first.
func (s *Server) Messages() []Message {
	return s.messages.All()
}

// Count returns how many messages are kept.
func (s *Server) Count() int {
	return s.messages.Len()
}

// Wait blocks until at least n messages are kept or ctx ends.
func (s *Server) Wait(ctx context.Context, n int) error {
	if got, err := s.messages.Wait(ctx, n); err != nil {
		return fmt.Errorf("smtp capture: %d of %d messages: %w", got, n, err)
	}
	return nil
}

func (s *Server) keep(m Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.received++
	if s.dir != "" {
		name := filepath.Join(s.dir, fmt.Sprintf("%06d.eml", s.received))
		if err := os.WriteFile(name, m.Data, 0o640); err != nil {
			return fmt.Errorf("smtp capture: keep message: %w", err)
		}
	}
	s.messages.Add(m)
	return nil
}

// rejects reports whether rcpt is on the reject list.
func (s *Server) rejects(rcpt string) bool {
	for _, r := range s.reject {
		if strings.EqualFold(rcpt, r) || strings.HasPrefix(r, "@") && len(rcpt) > len(r) && strings.EqualFold(rcpt[len(rcpt)-len(r):], r) {
			return true
		}
	}
	return false
}

// Parse returns the message's decoded subject and plain-text body, for
// display: the subject's encoded words decoded, the body's quoted-printable
// or base64 transfer encoding undone. A part it cannot decode is shown as
// received: a message that does not parse is all body, an undecodable body
// is the raw body. Both are valid UTF-8 (invalid bytes become U+FFFD), at
// most three times as long as the message.
func (m Message) Parse() (subject, body string) {
	msg, err := mail.ReadMessage(bytes.NewReader(m.Data))
	if err != nil {
		return "", strings.ToValidUTF8(string(m.Data), "\uFFFD")
	}
	subject = msg.Header.Get("Subject")
	if d, err := new(mime.WordDecoder).DecodeHeader(subject); err == nil {
		subject = d
	}
	raw, _ := io.ReadAll(msg.Body) // a bytes.Reader's remainder: no error
	var r io.Reader = bytes.NewReader(raw)
	switch strings.ToLower(strings.TrimSpace(msg.Header.Get("Content-Transfer-Encoding"))) {
	case "quoted-printable":
		r = quotedprintable.NewReader(r)
	case "base64":
		r = base64.NewDecoder(base64.StdEncoding, r)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		b = raw // shown as received, not the part decoded before the error
	}
	return strings.ToValidUTF8(subject, "\uFFFD"), strings.ToValidUTF8(string(b), "\uFFFD")
}

// NewSession implements smtp.Backend.
func (s *Server) NewSession(*smtp.Conn) (smtp.Session, error) { return &session{s: s}, nil }

// session is one SMTP connection's state.
type session struct {
	s    *Server
	from string
	to   []string
}

func (x *session) Mail(from string, _ *smtp.MailOptions) error {
	x.from = from
	return nil
}

func (x *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	if x.s.rejects(to) {
		return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1},
			Message: "mailbox unavailable (refused by the capture server's reject list)"}
	}
	x.to = append(x.to, to)
	return nil
}

func (x *session) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if x.s.dataDelay > 0 {
		time.Sleep(x.s.dataDelay) // the relay's work before its reply, not a wait for an outcome
	}
	err = x.s.keep(Message{From: x.from, To: x.to, Data: b, At: time.Now()})
	x.to = nil
	return err
}

func (x *session) Reset() { x.from, x.to = "", nil }

func (x *session) Logout() error { return nil }
