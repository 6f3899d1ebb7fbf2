package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzSiteCallPages posts any form to the site-call actions (with the
// confirmation step) and asks for the site-call and site views with any
// query and path, through the real handler with an admin's session: never
// a 500, every redirect stays on this server, and no markup from the
// request reaches the page.
func FuzzSiteCallPages(f *testing.F) {
	f.Add(uint8(0), "scope=keys&key=plant-1%2F0194f0d2-7a3b-7c4d-8e5f-000000000042&return=%2Fsite-calls", "status=Parked", "plant-1")
	f.Add(uint8(1), "scope=filter&status=Parked&site=plant-1&kind=ExternalCall", "kind=write&q=x", "plant%2F1")
	f.Add(uint8(0), "scope=filter&status=Parked&confirm=yes&updated_to=2026-01-02T15%3A04%3A05Z&return=%2F%5Cevil", "from=bad", "")
	f.Add(uint8(1), "scope=keys&key=%25zz%2Fx&key=no-slash&key=%2F", "status=Lost", "<script>")
	f.Add(uint8(0), "scope=filter&kind=<script>&target=%3Cb%3E", "after=%3Cscript%3E&limit=99999", "x/y")
	s := newAPIFuzzServer(f)
	serve := func(t *testing.T, req *http.Request) *httptest.ResponseRecorder {
		req.RemoteAddr = "192.0.2.9:1234"
		req.AddCookie(&http.Cookie{Name: "outbox_session", Value: s.session})
		rec := httptest.NewRecorder()
		s.h.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s %s: %d %s", req.Method, req.URL, rec.Code, rec.Body)
		}
		if strings.Contains(rec.Body.String(), "<script>") {
			t.Fatalf("%s %s: a script reached the page", req.Method, req.URL)
		}
		return rec
	}
	f.Fuzz(func(t *testing.T, verb uint8, form, query, site string) {
		p := []string{"/site-calls/retry", "/site-calls/discard"}[int(verb)%2]
		req := httptest.NewRequest("POST", p, strings.NewReader(form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := serve(t, req)
		if loc := rec.Header().Get("Location"); loc != "" {
			if !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") || strings.ContainsAny(loc, "\\\t\r\n") {
				t.Fatalf("POST %s %q redirects off the server: %q", p, form, loc)
			}
		}
		req = httptest.NewRequest("GET", "/site-calls", nil)
		req.URL.RawQuery = query
		serve(t, req)
		for _, path := range []string{"/sites/", "/site-calls/x/"} {
			req = httptest.NewRequest("GET", "/sites", nil)
			req.URL.Path = path + site
			serve(t, req)
		}
	})
}
