package httpapi

import (
	"net/url"
	"strings"
	"testing"
)

// TestSafeNextStaysOnTheServer: what the login's next and the forms' return
// may hold. Browsers drop tabs and newlines and read \ as /, so those must
// never pass.
func TestSafeNextStaysOnTheServer(t *testing.T) {
	for next, want := range map[string]string{
		"/notifications?status=Parked": "/notifications?status=Parked",
		"/notifications/abc":           "/notifications/abc",
		"":                             "/fallback",
		"//evil.example/x":             "/fallback",
		"/\\evil.example":              "/fallback",
		"/\t/evil.example/":            "/fallback",
		"/\r\n/evil.example":           "/fallback",
		"https://evil.example/":        "/fallback",
		"javascript:alert(1)":          "/fallback",
		"evil.example":                 "/fallback",
		"/ /evil.example":              "/fallback",
		"/%2F%2Fevil.example":          "/fallback",
	} {
		if got := safeNext(next, "/fallback"); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", next, got, want)
		}
	}
}

// FuzzSafeNext: whatever comes in, what goes out is a path on this server
// as a browser reads it.
func FuzzSafeNext(f *testing.F) {
	for _, s := range []string{"/a", "//b", "/\t/c", "/\\d", "http://e", "/%09/f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, next string) {
		got := safeNext(next, "/")
		// A browser strips tabs and newlines and reads \ as /.
		seen := strings.NewReplacer("\t", "", "\n", "", "\r", "", "\\", "/").Replace(got)
		if !strings.HasPrefix(seen, "/") || strings.HasPrefix(seen, "//") {
			t.Fatalf("safeNext(%q) = %q, which a browser reads as %q", next, got, seen)
		}
		if u, err := url.Parse(seen); err != nil || u.Host != "" || u.Scheme != "" {
			t.Fatalf("safeNext(%q) = %q leaves the server (%v)", next, got, err)
		}
	})
}
