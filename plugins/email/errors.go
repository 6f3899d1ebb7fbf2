package email

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/textproto"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/wneessen/go-mail"
	gmsmtp "github.com/wneessen/go-mail/smtp"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/internal/textclean"
)

// maxErrorText bounds the length of a Result's Error.
const maxErrorText = 512

// minMaskedSecret is the length from which a secret is masked in texts.
// Nothing this package writes holds a secret; the masking is a second line
// of defence, and masking every "p" of a one-letter password would garble
// the text for nothing.
const minMaskedSecret = 4

// addressPattern matches e-mail addresses in free text such as an SMTP reply
// ("550 5.1.1 <bob@example.com>: unknown user"), including quoted local parts.
var addressPattern = regexp.MustCompile(
	`(?:"[^"\r\n]*"|[\p{L}\p{N}.!#$%&'*+/=?^_` + "`" + `{|}~-]+)@[\p{L}\p{N}](?:[\p{L}\p{N}-]*[\p{L}\p{N}])?(?:\.[\p{L}\p{N}](?:[\p{L}\p{N}-]*[\p{L}\p{N}])?)*`)

// maskAddress keeps the first character of the local part and the domain:
// bob@example.com becomes b***@example.com.
func maskAddress(addr string) string {
	at := strings.LastIndexByte(addr, '@')
	if at <= 0 {
		return "<address>"
	}
	r, _ := utf8.DecodeRuneInString(addr)
	return string(r) + "***" + addr[at:]
}

// masker hides secrets and e-mail addresses in texts meant for logs and for
// Result.Error.
type masker struct {
	secrets   []string // replaced by <secret>
	addresses []string // replaced by their masked form, even where the pattern misses them
}

// mask returns s with every secret and every e-mail address masked and every
// URL- or path-like word (an SMTP server's "see http://...?session=..." or
// "/etc/passwd") replaced by "[redacted]", on one line, at most maxErrorText
// bytes long.
func (m *masker) mask(s string) string {
	hide := func(s string) string {
		for _, secret := range m.secrets {
			if len(secret) >= minMaskedSecret {
				s = strings.ReplaceAll(s, secret, "<secret>")
			}
		}
		return s
	}
	s = hide(s)
	for _, a := range m.addresses {
		if a != "" {
			s = strings.ReplaceAll(s, a, maskAddress(a))
		}
	}
	s = addressPattern.ReplaceAllStringFunc(s, maskAddress)
	// Again on the single-spaced text: a line break or a run of spaces may
	// have split a secret.
	s = hide(textclean.Words(s, textclean.LinkLike))
	if len(s) > maxErrorText {
		cut := maxErrorText
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// withSecret returns a masker that hides secret as well.
func (m *masker) withSecret(secret string) *masker {
	c := *m
	c.secrets = append(append([]string(nil), m.secrets...), secret)
	return &c
}

// outcomeError is an error whose outcome is known where it happens (a bad
// setting, an invalid target, a token endpoint's answer).
type outcomeError struct {
	outcome channel.Outcome
	err     error
}

func (e *outcomeError) Error() string { return e.err.Error() }
func (e *outcomeError) Unwrap() error { return e.err }

// permanent marks err as Permanent.
func permanent(err error) error { return &outcomeError{outcome: channel.Permanent, err: err} }

// transient marks err as Transient.
func transient(err error) error { return &outcomeError{outcome: channel.Transient, err: err} }

// classify tells whether an error of a delivery attempt may pass (Transient)
// or will recur as is (Permanent). An SMTP 5xx reply is Permanent and a 4xx
// reply Transient; a network error, a timeout or anything unknown is
// Transient; a configuration the server cannot work with (no STARTTLS, no
// such AUTH mechanism, an untrusted certificate) is Permanent.
func classify(err error) channel.Outcome {
	var oe *outcomeError
	if errors.As(err, &oe) {
		return oe.outcome
	}
	var te *textproto.Error
	if errors.As(err, &te) {
		if te.Code >= 500 && te.Code < 600 {
			return channel.Permanent
		}
		return channel.Transient
	}
	for _, target := range []error{
		gmsmtp.ErrUnencrypted, gmsmtp.ErrWrongHostname,
		mail.ErrPlainAuthNotSupported, mail.ErrLoginAuthNotSupported, mail.ErrXOauth2AuthNotSupported,
	} {
		if errors.Is(err, target) {
			return channel.Permanent
		}
	}
	var (
		verifyErr    *tls.CertificateVerificationError
		authorityErr x509.UnknownAuthorityError
		hostnameErr  x509.HostnameError
		invalidErr   x509.CertificateInvalidError
		recordErr    tls.RecordHeaderError
	)
	if errors.As(err, &verifyErr) || errors.As(err, &authorityErr) || errors.As(err, &hostnameErr) ||
		errors.As(err, &invalidErr) || errors.As(err, &recordErr) {
		return channel.Permanent
	}
	// go-mail reports these two with unexported errors.
	if s := err.Error(); strings.Contains(s, "does not support SMTP AUTH") || strings.Contains(s, "does not support STARTTLS") {
		return channel.Permanent
	}
	return channel.Transient
}
