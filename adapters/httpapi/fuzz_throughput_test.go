package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzThroughputQuery sends any query string to GET /api/v1/throughput
// (with an admin's token) and to the dashboard that draws it (with an
// admin's session): a success or a clean 4xx, never a 500 or a panic, and
// no markup from the request reaches the page.
func FuzzThroughputQuery(f *testing.F) {
	for _, q := range []string{
		"window=1h&bucket=1m&by=site", "window=7d&by=type&type=email&site=plant-1", "window=31d&bucket=1h",
		"window=0s", "window=-1h", "window=99999999999999d", "bucket=1500ms", "bucket=1ns&window=1h",
		"end=2026-01-02T15:04:05Z", "end=0001-01-01", "end=9999-12-31T23:59:59Z&window=31d",
		"by=<script>", "site=<script>&by=site", "days=31&by=site", "days=0", "days=1e9", "type=%ff%fe",
	} {
		f.Add(q)
	}
	s := newAPIFuzzServer(f)
	f.Fuzz(func(t *testing.T, query string) {
		req := httptest.NewRequest("GET", "/api/v1/throughput", nil)
		req.URL.RawQuery = query
		req.Header.Set("Authorization", "Bearer "+s.token)
		rec := httptest.NewRecorder()
		s.h.ServeHTTP(rec, req)
		checkAPIAnswer(t, "GET /api/v1/throughput?"+query, rec)

		req = httptest.NewRequest("GET", "/dashboard", nil)
		req.URL.RawQuery = query
		req.RemoteAddr = "192.0.2.9:1234"
		req.AddCookie(&http.Cookie{Name: "outbox_session", Value: s.session})
		rec = httptest.NewRecorder()
		s.h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("GET /dashboard?%s: %d %s", query, rec.Code, rec.Body)
		}
		if strings.Contains(rec.Body.String(), "<script>") {
			t.Fatalf("GET /dashboard?%s: a script reached the page", query)
		}
	})
}
