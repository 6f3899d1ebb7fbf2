package hookcapture

import (
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// post POSTs body to url with header (a "Host" entry sets the request's
// Host) and returns the response, its body read.
func post(t *testing.T, url, contentType, body string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestKeepsWhatItIsSentWithoutItsCredentials: a POST over real HTTP on
// loopback is answered 204 and kept with its method, path, headers and
// body; the values of credential headers and query parameters are hidden.
func TestKeepsWhatItIsSentWithoutItsCredentials(t *testing.T) {
	s, err := Start(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	resp := post(t, s.URL()+"/control-room?token=s3cr3t&room=3", "application/json", `{"subject":"Pump 3 stopped"}`,
		map[string]string{"Authorization": "Bearer s3cr3t", "X-Hub-Signature-256": "sha256=s3cr3t", "X-Request-Id": "r-1"})
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("HTTP %d, want 204", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p := s.Posts()[0]
	if p.Method != http.MethodPost || p.Path != "/control-room" || string(p.Body) != `{"subject":"Pump 3 stopped"}` || p.Clipped() {
		t.Errorf("kept %+v", p)
	}
	if p.Query != "room=3&token=(hidden)" {
		t.Errorf("query %q, want the token hidden", p.Query)
	}
	got := map[string]string{}
	for _, h := range p.Header {
		got[h.Name] = h.Value
	}
	for name, want := range map[string]string{"Authorization": Hidden, "X-Hub-Signature-256": Hidden, "X-Request-Id": "r-1", "Content-Type": "application/json"} {
		if got[name] != want {
			t.Errorf("header %s = %q, want %q", name, got[name], want)
		}
	}
	for _, h := range p.Header {
		if strings.Contains(h.Value, "s3cr3t") {
			t.Errorf("header %s keeps a credential", h.Name)
		}
	}
}

// TestBoundsWhatItKeeps: a body over MaxBodyBytes is refused with 413 and
// not kept, whether it announces its length or streams it; a body within
// the bound is kept clipped to KeepBodyBytes; only the newest Keep requests
// are kept.
func TestBoundsWhatItKeeps(t *testing.T) {
	s, err := Start(Config{MaxBodyBytes: 1000, KeepBodyBytes: 10, Keep: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if resp := post(t, s.URL()+"/big", "text/plain", strings.Repeat("x", 1001), nil); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a body of 1001 bytes: HTTP %d, want 413", resp.StatusCode)
	}
	// Chunked: no Content-Length to refuse up front.
	req, _ := http.NewRequest(http.MethodPost, s.URL()+"/streamed", io.MultiReader(strings.NewReader(strings.Repeat("y", 600)), strings.NewReader(strings.Repeat("y", 600))))
	req.ContentLength = -1
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a streamed body of 1200 bytes: HTTP %d, want 413", resp.StatusCode)
	}
	if n := len(s.Posts()); n != 0 {
		t.Fatalf("%d requests kept after refusals, want 0", n)
	}
	for _, path := range []string{"/1", "/2", "/3"} {
		if resp := post(t, s.URL()+path, "text/plain", strings.Repeat("z", 1000), nil); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("POST %s: HTTP %d", path, resp.StatusCode)
		}
	}
	posts := s.Posts()
	if len(posts) != 2 || posts[0].Path != "/2" || posts[1].Path != "/3" {
		t.Fatalf("kept %d requests, want /2 and /3", len(posts))
	}
	if p := posts[1]; len(p.Body) != 10 || p.Size != 1000 || !p.Clipped() {
		t.Errorf("kept body of %d bytes, size %d; want 10 of 1000", len(p.Body), p.Size)
	}
}

// TestAnswersLoopbackOnly: the receiver refuses to listen off loopback,
// and its handler refuses a peer that is not on loopback (as a request
// through a port forward or a proxy on another address would be).
func TestAnswersLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "example.com:80"} {
		if s, err := Start(Config{Addr: addr}); err == nil {
			_ = s.Close()
			t.Errorf("Start(%q) listened, want a refusal", addr)
		}
	}
	s := New(Config{})
	for _, peer := range []string{"192.0.2.7:4000", "[2001:db8::1]:4000", "garbage"} {
		req := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader("x"))
		req.RemoteAddr = peer
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		if w.Code != http.StatusForbidden {
			t.Errorf("peer %s: HTTP %d, want 403", peer, w.Code)
		}
	}
	for _, peer := range []string{"127.0.0.1:4000", "[::1]:4000", "[::ffff:127.0.0.1]:4000"} {
		req := httptest.NewRequest(http.MethodPut, "http://127.0.0.1:8090/hook", strings.NewReader("x"))
		req.RemoteAddr = peer
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		if w.Code != http.StatusNoContent {
			t.Errorf("peer %s: HTTP %d, want 204", peer, w.Code)
		}
	}
	if n := len(s.Posts()); n != 3 {
		t.Errorf("%d requests kept, want the 3 from loopback", n)
	}
}

// TestRefusesWhatAWebPageSends: any website the developer visits could
// make the browser post to the capture on loopback, directly (a form, a
// fetch: the browser adds Origin or Sec-Fetch-Site) or through a name of
// its own resolving to 127.0.0.1 (DNS rebinding: the Host is that name).
// Each is refused with 403 and nothing is kept; a channel's request (no
// Origin, a loopback Host or localhost) is kept.
func TestRefusesWhatAWebPageSends(t *testing.T) {
	s, err := Start(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	send := func(host string, header map[string]string) int {
		t.Helper()
		h := map[string]string{}
		maps.Copy(h, header)
		if host != "" {
			h["Host"] = host
		}
		return post(t, s.URL()+"/hook", "text/plain", "x", h).StatusCode
	}
	for name, c := range map[string]struct {
		host   string
		header map[string]string
	}{
		"a cross-origin fetch":     {header: map[string]string{"Origin": "https://evil.example"}},
		"a form from another site": {header: map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}},
		"a same-site request":      {header: map[string]string{"Sec-Fetch-Site": "same-site"}},
		"an opaque origin":         {header: map[string]string{"Origin": "null"}},
		"DNS rebinding":            {host: "rebind.evil.example:8090"},
		"a public address as Host": {host: "192.0.2.1"},
	} {
		if code := send(c.host, c.header); code != http.StatusForbidden {
			t.Errorf("%s: HTTP %d, want 403", name, code)
		}
	}
	if n := len(s.Posts()); n != 0 {
		t.Fatalf("%d requests kept from a web page, want none", n)
	}
	for _, host := range []string{"", "localhost:8090", "LOCALHOST", "127.0.0.1", "[::1]:8090"} {
		if code := send(host, nil); code != http.StatusNoContent {
			t.Errorf("Host %q: HTTP %d, want 204", host, code)
		}
	}
}

// TestHidesEveryCredential: the values of headers and query parameters
// named like any credential (HMAC, JWT, bearer, signatures included) are
// hidden, and so are a path's long opaque segments, such as the secret of a
// Slack webhook URL; plain names and short segments stay.
func TestHidesEveryCredential(t *testing.T) {
	s := New(Config{})
	const secret = "Zq9xK2mP7vR4tY8w"
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/services/T0A1B2C3D/B0Z9Y8X7W/"+secret+"xJ3k/v2/control-room?"+
		"hmac="+secret+"&jwt="+secret+"&x-amz-signature="+secret+"&bearer="+secret+"&sign="+secret+"&room=3", strings.NewReader("x"))
	req.RemoteAddr = "127.0.0.1:4000"
	for _, name := range []string{"X-Hmac-Sha256", "X-Jwt-Assertion", "X-Bearer", "X-Signed-Payload", "Ce-Signature", "X-Hub-Signature-256", "Proxy-Authorization", "X-Nonce"} {
		req.Header.Set(name, secret)
	}
	req.Header.Set("X-Request-Id", "r-1")
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusNoContent {
		t.Fatalf("HTTP %d", w.Code)
	}
	p := s.Posts()[0]
	if want := "/services/T0A1B2C3D/B0Z9Y8X7W/(hidden)/v2/control-room"; p.Path != want {
		t.Errorf("path %q, want %q", p.Path, want)
	}
	if want := "bearer=(hidden)&hmac=(hidden)&jwt=(hidden)&room=3&sign=(hidden)&x-amz-signature=(hidden)"; p.Query != want {
		t.Errorf("query %q, want %q", p.Query, want)
	}
	for _, h := range p.Header {
		if strings.Contains(h.Value, secret) {
			t.Errorf("header %s shows its credential", h.Name)
		}
		if h.Name == "X-Request-Id" && h.Value != "r-1" {
			t.Errorf("X-Request-Id = %q, want it shown", h.Value)
		}
	}
}

// FuzzHandler: any method, path, header and body from a loopback peer is
// kept within the bounds or refused, never a panic, and no value of a
// credential header is kept.
func FuzzHandler(f *testing.F) {
	f.Add("POST", "/hook?token=x", "Authorization", "Bearer x", []byte(`{"a":1}`))
	f.Add("GET", "/%zz", "Cookie", "s=1", []byte{})
	f.Add("PATCH", "/a/b?%%", "X-Api-Key", "k", []byte(strings.Repeat("b", 300)))
	f.Add("POST", "/services/T1/B2/abcdefghij0123456789?hmac=x&room=1", "X-Jwt", "j", []byte{})
	f.Fuzz(func(t *testing.T, method, target, name, value string, body []byte) {
		s := New(Config{MaxBodyBytes: 256, KeepBodyBytes: 16, Keep: 4})
		req, err := http.NewRequest(method, "http://127.0.0.1"+target, strings.NewReader(string(body)))
		if err != nil {
			return
		}
		req.RemoteAddr = "127.0.0.1:1"
		req.Header.Set(name, value)
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		posts := s.Posts()
		switch {
		case len(body) > 256 && (w.Code == http.StatusNoContent || len(posts) != 0): // 413, or 403 for a bad Host
			t.Fatalf("a body of %d bytes: HTTP %d, %d kept", len(body), w.Code, len(posts))
		case w.Code == http.StatusNoContent && len(posts) != 1:
			t.Fatalf("204 but %d kept", len(posts))
		}
		for _, p := range posts {
			if len(p.Body) > 16 {
				t.Fatalf("kept %d bytes of body", len(p.Body))
			}
			for _, h := range p.Header {
				if IsSecretName(h.Name) && h.Value != Hidden {
					t.Fatalf("header %s kept its value", h.Name)
				}
			}
			if p.Query != Hidden {
				q, err := url.ParseQuery(p.Query)
				if err != nil {
					t.Fatalf("kept query %q does not parse: %v", p.Query, err)
				}
				for k, vs := range q {
					for _, v := range vs {
						if IsSecretName(k) && v != Hidden {
							t.Fatalf("query parameter %s kept its value %q", k, v)
						}
					}
				}
			}
			for _, seg := range strings.Split(p.Path, "/") {
				if opaque(seg) {
					t.Fatalf("path segment %q kept", seg)
				}
			}
		}
	})
}
