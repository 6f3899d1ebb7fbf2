package httpdeliver

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/internal/textclean"
)

// MaxRetryAfter caps a server's Retry-After, so that a broken or hostile
// server cannot hold a notification back for years.
const MaxRetryAfter = time.Hour

// Classify maps an HTTP status to an outcome: 2xx Success; 408, 429 and 5xx
// Transient; anything else (other 4xx, 3xx that are not followed, 1xx)
// Permanent.
func Classify(status int) channel.Outcome {
	switch {
	case status >= 200 && status <= 299:
		return channel.Success
	case status == http.StatusRequestTimeout, status == http.StatusTooManyRequests,
		status >= 500 && status <= 599:
		return channel.Transient
	default:
		return channel.Permanent
	}
}

// ParseRetryAfter reads a Retry-After header value, either delta-seconds
// ("120") or an HTTP-date, as a wait from now. It returns 0 for a missing,
// malformed or past value and caps the wait at MaxRetryAfter.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseUint(v, 10, 64); err == nil {
		if n > uint64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter
		}
		d = time.Duration(n) * time.Second
	} else if errors.Is(err, strconv.ErrRange) {
		return MaxRetryAfter
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), MaxRetryAfter)
}

// maxBodyInError is the longest answer body quoted in an error; a longer one
// is left out, as is one that is not plain UTF-8 text.
const maxBodyInError = 200

// maxQuoted bounds the quoted part of an answer, in runes, after sanitising.
const maxQuoted = 120

// Sanitize makes a short, single-line text out of an answer body for an
// error message, or returns "" when the body is too long, binary or markup.
// Every word that looks like a URL, a path, an e-mail address or a token
// (longer than 40 bytes) is replaced by "[redacted]", and so is every
// occurrence of the secrets (typically the target's path segments, query
// values and user information).
func Sanitize(body []byte, secrets ...string) string {
	if len(body) > maxBodyInError || !utf8.Valid(body) {
		return ""
	}
	s := strings.TrimSpace(string(body))
	if s == "" || s[0] == '<' {
		return ""
	}
	return sanitizeText(s, secrets)
}

// sanitizeText cleans a text of unknown origin: one line, printable, no
// URL-, path-, address- or token-like words, no secrets, at most maxQuoted
// runes.
func sanitizeText(s string, secrets []string) string {
	redact := func(s string) string {
		for _, sec := range secrets {
			if sec != "" {
				s = strings.ReplaceAll(s, sec, "[redacted]")
			}
		}
		return s
	}
	s = redact(s)
	s = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, s)
	// Again on the single-spaced text: a secret may have been split by a
	// control character or a run of spaces ("to\x00ken").
	s = redact(strings.Join(strings.Fields(s), " "))
	s = textclean.Words(s, func(w string) bool {
		return len(w) > 40 || strings.Contains(w, "@") || textclean.LinkLike(w)
	})
	if utf8.RuneCountInString(s) > maxQuoted {
		s = string([]rune(s)[:maxQuoted]) + "…"
	}
	return s
}

// urlSecrets lists the parts of a target that must never appear in a text:
// its user information, path segments, raw query and query keys and values.
// Fragments shorter than 4 bytes are too common to hide and too short to be
// a credential.
func urlSecrets(u *url.URL) []string {
	var out []string
	add := func(s string) {
		if len(s) >= 4 {
			out = append(out, s)
		}
	}
	if u.User != nil {
		add(u.User.String())
		add(u.User.Username())
		if p, ok := u.User.Password(); ok {
			add(p)
		}
	}
	add(u.EscapedPath())
	add(u.Path)
	for _, seg := range strings.Split(u.EscapedPath(), "/") {
		add(seg)
		if dec, err := url.PathUnescape(seg); err == nil {
			add(dec)
		}
	}
	add(u.RawQuery)
	for k, vs := range u.Query() {
		add(k)
		for _, v := range vs {
			add(v)
		}
	}
	add(u.Fragment)
	// Longest first, so that a secret containing another is hidden whole.
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	return slices.Compact(out)
}

// safeError is an error whose text was built to be free of URLs and
// addresses while it still wraps the cause, so that errors.Is and errors.As
// see through it.
type safeError struct {
	msg   string
	cause error
}

func (e *safeError) Error() string { return e.msg }
func (e *safeError) Unwrap() error { return e.cause }

// describeNetError turns the error of http.Client.Do into one whose text
// holds neither the URL (a *url.Error quotes it whole) nor the addresses
// (a *net.OpError names both ends) nor a host name, while wrapping the
// cause.
func describeNetError(err error, secrets []string) error {
	return &safeError{msg: "POST failed: " + NetErrorText(err, secrets), cause: err}
}

// NetErrorText describes the error of http.Client.Do without the URL (a
// *url.Error quotes it whole, query included), the addresses (a
// *net.OpError names both ends) or any of secrets: a TLS or DNS failure by
// its kind, anything else by its innermost text, sanitized and bounded.
func NetErrorText(err error, secrets []string) string {
	var (
		dnsErr  *net.DNSError
		hostErr x509.HostnameError
		authErr x509.UnknownAuthorityError
		certErr x509.CertificateInvalidError
		tlsErr  *tls.CertificateVerificationError
		recErr  tls.RecordHeaderError
		netErr  net.Error
	)
	switch {
	case errors.As(err, &dnsErr):
		if dnsErr.IsNotFound {
			return "host name lookup: no such host"
		}
		if dnsErr.IsTimeout {
			return "host name lookup: timed out"
		}
		return "host name lookup failed"
	case errors.As(err, &hostErr):
		return "TLS: the certificate is not valid for the target host"
	case errors.As(err, &authErr):
		return "TLS: the certificate is signed by an unknown authority"
	case errors.As(err, &certErr):
		return "TLS: the certificate is invalid"
	case errors.As(err, &tlsErr):
		return "TLS: the certificate could not be verified"
	case errors.As(err, &recErr):
		return "TLS: the server did not answer with TLS"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the server closed the connection without an answer"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timed out"
	}
	return sanitizeText(innermostText(err), secrets)
}

// innermostText strips the wrappers that name the URL or the addresses and
// returns the text of what is left, prefixed by the failed operation.
func innermostText(err error) string {
	var op string
	for {
		switch e := err.(type) {
		case *url.Error:
			err = e.Err
			continue
		case *net.OpError:
			if op == "" {
				op = e.Op
			}
			err = e.Err
			continue
		case *os.SyscallError:
			err = e.Err
			continue
		}
		break
	}
	if err == nil {
		return "unknown network error"
	}
	if op != "" {
		return op + ": " + err.Error()
	}
	return err.Error()
}
