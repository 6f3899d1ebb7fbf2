package ports

import (
	"regexp"
	"strings"
)

// secretWords are the fragments of a setting name that mark its value as a
// secret.
var secretWords = []string{"password", "passwd", "secret", "token", "apikey", "api_key", "api-key", "credential", "private_key"}

// IsSecretKey reports whether a channel setting named key holds a secret
// (password, secret, token, API key, credential), ignoring case. A key naming
// an address (ending in url, uri or endpoint, as token_url) is not a secret.
func IsSecretKey(key string) bool {
	k := strings.ToLower(key)
	for _, s := range []string{"url", "uri", "endpoint"} {
		if strings.HasSuffix(k, s) {
			return false
		}
	}
	for _, w := range secretWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// IsSecretRef reports whether v is a secret reference a channel resolves
// itself: env:NAME or file:/path, with a non-empty name or path.
func IsSecretRef(v string) bool {
	for _, p := range []string{"env:", "file:"} {
		if rest, ok := strings.CutPrefix(v, p); ok && strings.TrimSpace(rest) != "" {
			return true
		}
	}
	return false
}

// looksLikeRef reports whether v starts like a secret reference (env: or
// file:), whether or not the rest names anything.
func looksLikeRef(v string) bool {
	return strings.HasPrefix(v, "env:") || strings.HasPrefix(v, "file:")
}

var (
	// urlUserinfo matches the userinfo of a URL (user, user:password) up
	// to its @.
	urlUserinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/\s@?#]+@`)
	// urlQueryPair matches one key=value of a URL's query.
	urlQueryPair = regexp.MustCompile(`([?&;])([^=&;#\s]+)=([^&;#\s]*)`)
	// emailAddress matches an e-mail address; the first character of the
	// local part and the domain are kept when masked.
	emailAddress = regexp.MustCompile(`([A-Za-z0-9._%+-])[A-Za-z0-9._%+-]*@([A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)+)`)
)

// credentialQueryKeys are query parameters that carry a credential besides
// those IsSecretKey names.
var credentialQueryKeys = map[string]bool{"key": true, "sig": true, "signature": true, "auth": true,
	"authorization": true, "pass": true, "pwd": true, "code": true, "jwt": true, "session": true, "sessionid": true}

// MaskURLCredentials returns s with the credentials of the URLs in it
// replaced by ***: the userinfo (user:password@ becomes ***@) and the value
// of each query parameter whose name looks like a credential (token,
// api_key, password, key, sig, ...). It is for showing a setting that is
// not secret but may hold a URL (an OAuth2 token_url): what stays is enough
// to recognise it. It is idempotent.
func MaskURLCredentials(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	s = urlUserinfo.ReplaceAllString(s, "${1}***@")
	return urlQueryPair.ReplaceAllStringFunc(s, func(m string) string {
		sub := urlQueryPair.FindStringSubmatch(m)
		k := strings.ToLower(sub[2])
		if sub[3] == "" || !(IsSecretKey(k) || credentialQueryKeys[k] || strings.HasSuffix(k, "key")) {
			return m
		}
		return sub[1] + sub[2] + "=***"
	})
}

// MaskEmails returns s with every e-mail address masked as the logs mask
// them: alice@example.com becomes a***@example.com. It is idempotent.
func MaskEmails(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	return emailAddress.ReplaceAllString(s, "${1}***@${2}")
}
