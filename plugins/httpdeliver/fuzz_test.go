package httpdeliver_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/siteline/outbox/plugins/httpdeliver"
)

// FuzzParseTarget: a list's target either parses to an absolute http(s) URL
// with a host, whose redacted forms hold neither its user information nor
// its query, or is refused with a fixed text that cannot repeat it.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{
		"https://hooks.slack.com/services/T/B/X", "http://127.0.0.1:8080/hook?x=1", " https://example.com ",
		"https://user:pw@example.com/x", "https://[::1]:443/x", "https://[fe80::1%25eth0]/", "example.com/hook",
		"//example.com/hook", "ftp://example.com/", "https://", "https:example.com", "https://example.com/%zz",
		"http://2130706433/", "http://0x7f.1/", "javascript:alert(1)", "https://exa mple.com/", "http://a/#frag",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := httpdeliver.ParseTarget(raw)
		if err != nil {
			if text := err.Error(); text != "parse target: "+httpdeliver.ErrInvalidTarget.Error() &&
				text != "check target: "+httpdeliver.ErrInvalidTarget.Error() {
				t.Fatalf("ParseTarget(%q): error %q is not one of the fixed texts", raw, text)
			}
			return
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Opaque != "" {
			t.Fatalf("ParseTarget(%q) = %v: not an absolute http(s) URL with a host", raw, u)
		}
		for _, redacted := range []string{httpdeliver.RedactPath(u), httpdeliver.RedactQuery(u)} {
			if p, ok := u.User.Password(); ok && len(p) >= 4 && strings.Contains(redacted, p) {
				t.Fatalf("ParseTarget(%q): redacted %q holds the password", raw, redacted)
			}
			if len(u.RawQuery) >= 4 && strings.Contains(redacted, "?"+u.RawQuery) {
				t.Fatalf("ParseTarget(%q): redacted %q holds the query", raw, redacted)
			}
		}
	})
}

// FuzzTimeout: the timeout setting is DefaultTimeout when blank, a positive
// duration otherwise, or an error naming the setting.
func FuzzTimeout(f *testing.F) {
	for _, s := range []string{"", " ", "5s", "1m30s", "0s", "-1s", "10", "soon", "9999999999h", "1e3s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, err := httpdeliver.Timeout(map[string]string{httpdeliver.TimeoutSettingName: v})
		switch {
		case err != nil:
			if !strings.Contains(err.Error(), `setting "timeout"`) {
				t.Fatalf("Timeout(%q): error %q does not name the setting", v, err)
			}
		case strings.TrimSpace(v) == "":
			if d != httpdeliver.DefaultTimeout {
				t.Fatalf("Timeout(%q) = %v, want the default", v, d)
			}
		case d <= 0:
			t.Fatalf("Timeout(%q) = %v, not positive", v, d)
		}
	})
}

// FuzzParseRetryAfter: a server's Retry-After is a wait from 0 to
// MaxRetryAfter, whatever it says.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "30", " 120 ", "-5", "1.5", "soon", "86400", "99999999999999999999999",
		"Sun, 01 Mar 2026 12:05:00 GMT", "Sunday, 01-Mar-26 12:00:30 GMT", "Sun Mar  1 12:01:00 2026"} {
		f.Add(s)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		if d := httpdeliver.ParseRetryAfter(v, now); d < 0 || d > httpdeliver.MaxRetryAfter {
			t.Fatalf("ParseRetryAfter(%q) = %v, outside 0 to %v", v, d, httpdeliver.MaxRetryAfter)
		}
	})
}

// FuzzSanitize: what a receiver answers becomes, at most, one short line of
// printable UTF-8 without the target's secrets or anything like a URL, a
// path or an address.
func FuzzSanitize(f *testing.F) {
	for _, s := range []struct{ body, secret string }{
		{"invalid_payload", "T0001"}, {"channel_is_archived", "s3cr3t"}, {"bad SECRETTOKEN here", "SECRETTOKEN"},
		{"see https://hooks.slack.com/x", "hooks"}, {"mail ops@example.com", "ops@"}, {"to\x00ken x", "to ken"},
		{`{"error":"invalid_token"}`, "invalid"}, {"<html>Bad</html>", "Bad"}, {"\xff\xfe", "abcd"},
	} {
		f.Add([]byte(s.body), s.secret)
	}
	f.Fuzz(func(t *testing.T, body []byte, secret string) {
		got := httpdeliver.Sanitize(body, secret)
		if got == "" {
			return
		}
		if !utf8.ValidString(got) || strings.ContainsAny(got, "\r\n\t\x00") {
			t.Fatalf("Sanitize(%q) = %q: not one line of printable UTF-8", body, got)
		}
		if n := utf8.RuneCountInString(got); n > 121 {
			t.Fatalf("Sanitize(%q) = %d runes, want at most 121", body, n)
		}
		for _, w := range strings.Fields(got) {
			if w != "[redacted]" && (len(w) > 40 || strings.ContainsAny(w, "@/\\")) {
				t.Fatalf("Sanitize(%q) = %q: the word %q should be redacted", body, got, w)
			}
		}
		// A secret that is a plain phrase (the fragments of a URL are) is
		// gone, whatever the body did to split it.
		if len(secret) >= 4 && utf8.ValidString(secret) && !strings.ContainsAny(secret, "[]…") &&
			secret == strings.Join(strings.Fields(secret), " ") && strings.Contains(got, secret) {
			t.Fatalf("Sanitize(%q) = %q holds the secret %q", body, got, secret)
		}
	})
}
