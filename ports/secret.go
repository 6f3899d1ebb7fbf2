package ports

import "strings"

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
