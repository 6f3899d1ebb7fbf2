package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/siteline/outbox/ports"
)

// authenticate returns the caller: an API token from the Authorization
// header, else the session cookie. It returns an error wrapping
// ports.ErrUnauthenticated when there is neither or it is not valid; such
// an error is a *credentialRefusal that says what the refusal is counted
// under.
func (s *Server) authenticate(r *http.Request) (ports.Principal, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, cred, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(cred) == "" {
			return ports.Principal{}, refuseCredential(refusedMalformedCredentials,
				fmt.Errorf("the Authorization header must be \"Bearer <token>\": %w", ports.ErrUnauthenticated))
		}
		p, err := s.cfg.Operators.Authenticate(r.Context(), strings.TrimSpace(cred))
		if err == nil && p.Session {
			// Each credential has its place: a session secret is no token.
			err = fmt.Errorf("the Authorization header takes an API token, not a session: %w", ports.ErrUnauthenticated)
		}
		if errors.Is(err, ports.ErrUnauthenticated) {
			return ports.Principal{}, refuseCredential(refusedBadToken, err)
		}
		return p, err
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return ports.Principal{}, refuseCredential(refusedNoCredentials,
			fmt.Errorf("log in first, or give an API token (Authorization: Bearer): %w", ports.ErrUnauthenticated))
	}
	p, err := s.cfg.Operators.Authenticate(r.Context(), c.Value)
	if err == nil && !p.Session {
		// A token planted in the cookie is not a login.
		err = fmt.Errorf("the session cookie holds no session: %w", ports.ErrUnauthenticated)
	}
	if errors.Is(err, ports.ErrUnauthenticated) {
		return ports.Principal{}, refuseCredential(refusedBadSession, err)
	}
	return p, err
}

// credentialRefusal is a request's credential refused (or missing), with
// the reason the refusal is counted under.
type credentialRefusal struct {
	reason string
	err    error
}

func refuseCredential(reason string, err error) error {
	return &credentialRefusal{reason: reason, err: err}
}

func (c *credentialRefusal) Error() string { return c.err.Error() }
func (c *credentialRefusal) Unwrap() error { return c.err }

// countRefusal counts and logs (bounded, keyed by the client's address) a
// request refused for its credential: never the credential itself, only
// the reason and the path. A request without any credential is counted
// only when countMissing: a browser's first visit to a page has none.
func (s *Server) countRefusal(r *http.Request, err error, countMissing bool) {
	var cr *credentialRefusal
	if !errors.As(err, &cr) || (cr.reason == refusedNoCredentials && !countMissing) {
		return
	}
	s.refusals.Refuse(s.clientAddr(r), cr.reason, "path", logPath(r.URL.Path))
}

// logPath is a request path as a log line may show it: at most 100 bytes
// of valid UTF-8.
func logPath(p string) string {
	if len(p) > 100 {
		p = p[:100]
	}
	return strings.ToValidUTF8(p, "?")
}

// login checks a name and password and sets the session cookie. The
// client's address goes to the core's throttle; a failed or refused login
// is logged (at most one line per address per interval, with the account
// name masked and never the password) and counted in
// outbox_refusals_total{entrance="http"}.
func (s *Server) login(w http.ResponseWriter, r *http.Request, name, password string) (ports.Session, error) {
	client := s.clientAddr(r)
	sess, err := s.cfg.Operators.Login(r.Context(), ports.LoginRequest{Name: name, Password: password, Client: client})
	if err != nil {
		if reason := loginRefusal(err); reason != "" {
			s.refusals.Refuse(client, reason, "user", logName(name))
		}
		return sess, err
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: sess.Secret, Path: "/",
		Expires: sess.ExpiresAt, MaxAge: int(time.Until(sess.ExpiresAt).Seconds()),
		HttpOnly: true, Secure: s.cfg.SecureCookies, SameSite: http.SameSiteLaxMode,
	})
	return sess, nil
}

// The reasons a refused login is counted under (metric label values).
const (
	refusedLogin           = "login failed"
	refusedLoginAddress    = "login throttled (address)"
	refusedLoginAccount    = "login throttled (account)"
	refusedLoginBusy       = "login in progress"
	refusedLoginOverloaded = "login overloaded"
	// refusedOwnTokenRate: an account making tokens of its own too fast.
	refusedOwnTokenRate = "own tokens over rate"

	// Refused credentials on every other route. A bad token is unknown,
	// revoked, expired, or its account deleted, or a session secret sent as
	// a token; a bad session is closed, expired, or its account deleted, or
	// a token put in the session cookie.
	refusedBadToken             = "bad token"
	refusedBadSession           = "bad session"
	refusedMalformedCredentials = "malformed credentials"
	refusedNoCredentials        = "no credentials"

	// refusedRole: a known caller asked for a route above its role;
	// refusedCrossOrigin: an unsafe request from another origin.
	refusedRole        = "role too low"
	refusedCrossOrigin = "cross-origin"
)

// loginRefusal is the reason a failed login is counted under; "" for an
// error that is no refusal of the caller (the database failed).
func loginRefusal(err error) string {
	var te *ports.LoginThrottledError
	switch {
	case errors.As(err, &te):
		switch te.Reason {
		case ports.LoginThrottledAddress:
			return refusedLoginAddress
		case ports.LoginThrottledAccount:
			return refusedLoginAccount
		}
		return refusedLoginBusy
	case errors.Is(err, ports.ErrUnauthenticated):
		return refusedLogin
	case errors.Is(err, ports.ErrUnavailable):
		return refusedLoginOverloaded
	}
	return ""
}

// setRetryAfter sets Retry-After when err is a throttled login.
func setRetryAfter(w http.ResponseWriter, err error) {
	var te *ports.LoginThrottledError
	if errors.As(err, &te) {
		w.Header().Set("Retry-After", strconv.FormatInt(retryAfterSeconds(te), 10))
	}
}

// retryAfterSeconds is a throttled login's wait in whole seconds, rounded
// up, at least 1.
func retryAfterSeconds(te *ports.LoginThrottledError) int64 {
	return max(1, int64((te.RetryAfter+time.Second-1)/time.Second))
}

// logName is an account name as a log line may show it: at most 64 bytes
// of valid UTF-8, and an e-mail address masked as a***@example.com.
func logName(name string) string {
	if len(name) > 64 {
		name = name[:64]
	}
	name = strings.ToValidUTF8(name, "?")
	if at := strings.LastIndexByte(name, '@'); at >= 0 {
		r, _ := utf8.DecodeRuneInString(name)
		if at == 0 {
			return "***" + name[at:]
		}
		return string(r) + "***" + name[at:]
	}
	return name
}

// logout closes the session of the request's cookie and clears the cookie.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) error {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: s.cfg.SecureCookies, SameSite: http.SameSiteLaxMode})
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	return s.cfg.Operators.Logout(r.Context(), c.Value)
}

// setFlash keeps a one-line message for the next page the browser shows.
func (s *Server) setFlash(w http.ResponseWriter, msg string) {
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: url.QueryEscape(msg), Path: "/", MaxAge: 60,
		HttpOnly: true, Secure: s.cfg.SecureCookies, SameSite: http.SameSiteLaxMode})
}

// takeFlash returns the message setFlash kept and clears it.
func (s *Server) takeFlash(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return ""
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: s.cfg.SecureCookies, SameSite: http.SameSiteLaxMode})
	msg, err := url.QueryUnescape(c.Value)
	if err != nil || len(msg) > 500 {
		return ""
	}
	return msg
}

// safeNext returns next when it is a path on this server, else fallback,
// so that the login page and the action forms never send a browser to
// another site. Browsers drop tabs and newlines from a URL and read a
// backslash as a slash, so "/\t/evil.example" would be "//evil.example" to
// them: any control character, space or backslash is refused outright.
func safeNext(next, fallback string) string {
	if next == "" || strings.ContainsFunc(next, func(r rune) bool { return r < 0x21 || r == 0x7f || r == '\\' }) {
		return fallback
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" ||
		!strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		return fallback
	}
	return u.RequestURI()
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
