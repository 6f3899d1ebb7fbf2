package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzNotificationsPage asks for the Notifications list with any query
// (the filter, its times as the page shows them, the sort order, paging)
// through the real handler with an admin's session: never a 500, and no
// markup from the query reaches the page.
func FuzzNotificationsPage(f *testing.F) {
	for _, q := range []string{
		"status=Parked&site=plant-1&list=ok&type=email&from=2026-01-02+15%3A04%3A05&to=2026-01-02+15%3A04&order=oldest",
		"order=newest&limit=2&after=m1.MjAyNi0wMS0wMlQwMDowMDowMFp8YQ",
		"order=%3Cscript%3E", "from=2026-01-02+25%3A61", "to=2026-01-02T15%3A04%3A05.123456789", "order=" + strings.Repeat("x", 300),
		"q=%3Cscript%3E&site=%3Cscript%3E",
	} {
		f.Add(q)
	}
	s := newAPIFuzzServer(f)
	f.Fuzz(func(t *testing.T, query string) {
		req := httptest.NewRequest("GET", "/notifications", nil)
		req.URL.RawQuery = query
		req.RemoteAddr = "192.0.2.9:1234"
		req.AddCookie(&http.Cookie{Name: "outbox_session", Value: s.session})
		rec := httptest.NewRecorder()
		s.h.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("GET /notifications?%s: %d %s", query, rec.Code, rec.Body)
		}
		if strings.Contains(rec.Body.String(), "<script>") {
			t.Fatalf("GET /notifications?%s: a script reached the page", query)
		}
	})
}
