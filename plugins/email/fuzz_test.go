package email

import (
	"errors"
	"slices"
	"strings"
	"testing"

	channel "github.com/siteline/outbox/plugins/channel/v1"
)

// FuzzParseSettings: any settings either parse into a usable configuration
// or are refused, Permanent, naming settings and never repeating a secret.
func FuzzParseSettings(f *testing.F) {
	f.Add("smtp.example.com", "587", "starttls", "plain", "outbox@example.com", "pw", "Outbox <outbox@example.com>",
		"", "", "", "", "4", "10s")
	f.Add("127.0.0.1", "2525", "none", "", "", "", "outbox@example.com", "", "", "", "", "", "")
	f.Add("[::1]", "", "implicit", "xoauth2", "mailer@example.org", "", "a@b.c",
		"https://login.example.com/token", "client", "secret", "scope1, ,scope2", "64", "1m")
	f.Add("host:25", "0", "tls", "cram-md5", "", "", "not an address", "ftp://x/y", "", " ", ",", "65", "-1s")
	f.Add("", "99999", "", "login", "u", " ", "", "", "", "", "", "x", "soon")
	f.Fuzz(func(t *testing.T, host, port, tlsMode, auth, username, password, from, tokenURL, clientID, clientSecret,
		scopes, poolSize, connectTimeout string) {
		s := map[string]string{
			settingHost: host, settingPort: port, settingTLS: tlsMode, settingAuth: auth, settingUsername: username,
			settingPassword: "PW-" + password, settingFrom: from, settingTokenURL: tokenURL, settingClientID: clientID,
			settingClientSecret: "CS-" + clientSecret, settingScopes: scopes, settingPoolSize: poolSize,
			settingConnectTimeout: connectTimeout,
		}
		c, err := parseSettings(s)
		if err != nil {
			if !errors.Is(err, errSettings) || classify(permanent(err)) != channel.Permanent {
				t.Fatalf("parseSettings: %v does not wrap errSettings", err)
			}
			for _, secret := range []string{s[settingPassword], s[settingClientSecret]} {
				if len(secret) > 3 && strings.Contains(err.Error(), secret) {
					t.Fatalf("parseSettings: %q repeats a secret", err)
				}
			}
			return
		}
		switch {
		case c.host == "" || strings.ContainsAny(c.host, " \t\r\n/@?#"):
			t.Fatalf("host %q accepted", c.host)
		case c.port < 1 || c.port > 65535:
			t.Fatalf("port %d accepted", c.port)
		case !slices.Contains([]string{tlsNone, tlsStartTLS, tlsImplicit}, c.tls):
			t.Fatalf("tls %q accepted", c.tls)
		case !slices.Contains([]string{authNone, authPlain, authLogin, authXOAUTH2}, c.auth):
			t.Fatalf("auth %q accepted", c.auth)
		case c.from == nil || !strings.Contains(c.from.Address, "@"):
			t.Fatalf("from %v accepted", c.from)
		case c.poolSize < 1 || c.poolSize > maxPoolSize:
			t.Fatalf("pool_size %d accepted", c.poolSize)
		case c.connectTimeout <= 0:
			t.Fatalf("connect_timeout %v accepted", c.connectTimeout)
		case c.tls != tlsNone && c.serverName == "":
			t.Fatalf("tls %s without a server name", c.tls)
		case c.auth == authXOAUTH2 && (c.tokenURL == "" || c.clientID == "" || strings.TrimSpace(c.clientSecret) == ""):
			t.Fatalf("xoauth2 without its client: %+v", c)
		}
		// The pool key never holds a secret in clear.
		if k := c.key(); c.password != "" && (k.username == c.password || k.host == c.password) {
			t.Fatalf("pool key %+v holds the password", k)
		}
	})
}

// FuzzParseTargets: every target either maps to one of distinct bare
// addresses or is marked invalid, and every address comes from a target.
func FuzzParseTargets(f *testing.F) {
	f.Add("alice@example.com", "Bob <bob@example.net>", "alice@example.com")
	f.Add("", "not an address", "a@b")
	f.Add(`"quoted local"@example.com`, "<@>", "x@[127.0.0.1]")
	f.Add("=?utf-8?q?J=C3=B6rg?= <joerg@example.com>", "a@b, c@d", "\x00@example.com")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		targets := []string{a, b, c}
		r := parseTargets(targets)
		if len(r.of) != len(targets) || len(r.addrs) > len(targets) {
			t.Fatalf("parseTargets(%q) = %+v", targets, r)
		}
		used := make([]bool, len(r.addrs))
		for i, j := range r.of {
			if j < -1 || j >= len(r.addrs) {
				t.Fatalf("parseTargets(%q): target %d maps to %d", targets, i, j)
			}
			if j >= 0 {
				used[j] = true
			}
		}
		seen := map[string]bool{}
		for j, addr := range r.addrs {
			if addr.Name != "" || !strings.Contains(addr.Address, "@") || seen[addr.Address] || !used[j] {
				t.Fatalf("parseTargets(%q) = %+v", targets, r)
			}
			seen[addr.Address] = true
		}
	})
}

// FuzzMask: whatever an SMTP server answers, the text that reaches a
// notification's error is one line of bounded length without a URL- or
// path-like word (no "/" nor "\\" at all), and holds no secret.
func FuzzMask(f *testing.F) {
	f.Add(`550 5.1.1 <bob@example.com> unknown user; see http://intranet.example/x?session=ABCDEF123456 /etc/passwd`, "ABCDEF123456", "bob@example.com")
	f.Add("535 5.7.8 authentication failed for hunter22\r\nC:\\mail\\spool", "hunter22", "alice@example.com")
	f.Add("421 4.7.0 try again later: pass\tword", "pass word", "x")
	f.Add("550 /***@example.com ftp://host smb:\\\\share", "", "/x@example.com")
	f.Fuzz(func(t *testing.T, reply, secret, target string) {
		m := &masker{secrets: []string{secret}, addresses: []string{target}}
		got := m.mask(reply)
		if strings.ContainsAny(got, "\r\n/\\") {
			t.Fatalf("mask(%q) = %q: a line break, a URL or a path", reply, got)
		}
		if len(got) > maxErrorText+len("…") {
			t.Fatalf("mask(%q): %d bytes", reply, len(got))
		}
		plain := len(secret) >= minMaskedSecret && !strings.ContainsFunc(secret, func(r rune) bool {
			return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9')
		})
		if plain && !strings.Contains(reply, "@") && !strings.Contains("<secret>[redacted]<address>…", secret) && strings.Contains(got, secret) {
			t.Fatalf("mask(%q) = %q holds the secret %q", reply, got, secret)
		}
	})
}
