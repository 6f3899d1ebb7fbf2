// Package logmask keeps e-mail addresses and secrets out of the logs: a
// slog.Handler that rewrites every record before the next handler sees it.
// E-mail addresses in the message and in every string value (attributes,
// groups, errors, Stringers, string slices) become a***@example.com,
// passwords in connection strings become ***, and the value of an attribute
// whose key names a secret (password, token, secret, ...) becomes *** when
// it could hold one (text, not a boolean or a number). Every logger the
// outbox binary builds is wrapped in it.
package logmask

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
)

// New returns a handler that masks every record before next sees it.
func New(next slog.Handler) slog.Handler {
	return maskHandler{next: next}
}

// maskHandler is the handler New returns.
type maskHandler struct {
	next slog.Handler
}

// Enabled implements slog.Handler.
func (h maskHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (h maskHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, Text(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(maskAttr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

// WithAttrs implements slog.Handler.
func (h maskHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	masked := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		masked[i] = maskAttr(a)
	}
	return maskHandler{next: h.next.WithAttrs(masked)}
}

// WithGroup implements slog.Handler.
func (h maskHandler) WithGroup(name string) slog.Handler {
	return maskHandler{next: h.next.WithGroup(name)}
}

// maskAttr masks one attribute, looking into groups.
func maskAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	if secretAttrKey(a.Key) && canHoldSecret(v) {
		return slog.String(a.Key, "***")
	}
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, Text(v.String()))
	case slog.KindGroup:
		g := v.Group()
		masked := make([]slog.Attr, len(g))
		for i, ga := range g {
			masked[i] = maskAttr(ga)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(masked...)}
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			// Still an error, so that handlers show it as one.
			return slog.Any(a.Key, maskedError(Text(x.Error())))
		case fmt.Stringer:
			return slog.String(a.Key, Text(x.String()))
		case []string:
			out := make([]string, len(x))
			for i, s := range x {
				out[i] = Text(s)
			}
			return slog.Any(a.Key, out)
		case []byte:
			return slog.String(a.Key, Text(string(x)))
		case json.RawMessage:
			return slog.String(a.Key, Text(string(x)))
		default:
			// Anything else is printed by the handler in its own way; if
			// its text holds something to mask, log the masked text
			// instead.
			s := fmt.Sprintf("%+v", x)
			if m := Text(s); m != s {
				return slog.String(a.Key, m)
			}
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// canHoldSecret reports whether v is a value a secret could be: text or
// anything printed as text, not a group (its attributes are judged each),
// a boolean, a number, a duration or a time ("password_changed": true is a
// fact, not a password).
func canHoldSecret(v slog.Value) bool {
	switch v.Kind() {
	case slog.KindGroup, slog.KindBool, slog.KindInt64, slog.KindUint64, slog.KindFloat64, slog.KindDuration, slog.KindTime:
		return false
	case slog.KindAny:
		switch v.Any().(type) {
		case bool, int, int8, int16, int32, uint, uint8, uint16, uint32, uintptr, float32, complex64, complex128:
			return false
		}
	}
	return true
}

// secretAttrKey reports whether an attribute key names a secret whose value
// is never logged.
func secretAttrKey(key string) bool {
	k := strings.ToLower(key)
	for _, w := range []string{"password", "passwd", "secret", "token", "api_key", "apikey", "authorization", "credential", "cookie"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// maskedError is an error's text after masking.
type maskedError string

func (e maskedError) Error() string { return string(e) }

var (
	// urlPassword matches the password of user:password@ in a URL.
	urlPassword = regexp.MustCompile(`(://[^/\s:@]*:)[^@\s/]*@`)
	// keywordPassword matches password=... and pwd=... in a keyword DSN.
	// The value may be quoted ('…' with \' escapes, "…") or braced ({…}).
	keywordPassword = regexp.MustCompile(`(?i)\b(password|pwd)\s*=\s*('(?:[^'\\]|\\.)*'|"[^"]*"|\{[^}]*\}|[^;\s&]*)`)
	// emailAddress matches an e-mail address; the first character of the
	// local part and the domain are kept.
	emailAddress = regexp.MustCompile(`([A-Za-z0-9._%+-])[A-Za-z0-9._%+-]*@([A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+)`)
)

// Text hides passwords in connection strings and masks e-mail addresses:
// alice@example.com becomes a***@example.com. It is idempotent.
func Text(s string) string {
	if !strings.ContainsAny(s, "@=") {
		return s
	}
	s = urlPassword.ReplaceAllString(s, "${1}***@")
	s = keywordPassword.ReplaceAllString(s, "${1}=***")
	return emailAddress.ReplaceAllString(s, "${1}***@${2}")
}
