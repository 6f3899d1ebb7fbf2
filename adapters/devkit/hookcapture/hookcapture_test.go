package hookcapture

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func post(t *testing.T, url, contentType, body string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	for k, v := range header {
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
		req := httptest.NewRequest(http.MethodPut, "/hook", strings.NewReader("x"))
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

// FuzzHandler: any method, path, header and body from a loopback peer is
// kept within the bounds or refused, never a panic, and no value of a
// credential header is kept.
func FuzzHandler(f *testing.F) {
	f.Add("POST", "/hook?token=x", "Authorization", "Bearer x", []byte(`{"a":1}`))
	f.Add("GET", "/%zz", "Cookie", "s=1", []byte{})
	f.Add("PATCH", "/a/b?%%", "X-Api-Key", "k", []byte(strings.Repeat("b", 300)))
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
		case len(body) > 256 && (w.Code != http.StatusRequestEntityTooLarge || len(posts) != 0):
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
		}
	})
}
