package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/siteline/outbox/adapters/httpapi/api"
)

// send asks path of the fuzz server's handler (a GET when body is nil)
// with the admin's token, or its session when session is set, and returns
// the status and the answer.
func (s apiFuzzServer) send(t *testing.T, method, path string, body []byte, session bool) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, path, r)
	if err != nil {
		t.Skip() // not a request a client can send
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if session {
		req.AddCookie(&http.Cookie{Name: "outbox_session", Value: s.session})
	} else {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	req.RemoteAddr = "192.0.2.1:1234"
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

// checkAnswer fails t when the status is not one of want, or an error
// answer is not the API's error body.
func checkAnswer(t *testing.T, what string, code int, body []byte, want ...int) {
	t.Helper()
	ok := false
	for _, w := range want {
		ok = ok || code == w
	}
	if !ok {
		t.Fatalf("%s: %d %s, want one of %v", what, code, body, want)
	}
	if code >= 400 {
		var eb api.ErrorBody
		if err := json.Unmarshal(body, &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
			t.Fatalf("%s: %d with a body that is not an API error: %s", what, code, body)
		}
	}
}

// FuzzCreateTokenBody sends arbitrary bodies to POST /tokens: each is a
// token made (201, its secret shown once), a clear refusal (400), a name
// taken (409) or too large (413), never a server error.
func FuzzCreateTokenBody(f *testing.F) {
	for _, seed := range []string{
		`{"name":"ci","role":"operator"}`,
		`{"name":"ci2","role":"viewer","expires_at":"2999-01-01T00:00:00Z"}`,
		`{"name":"old","role":"viewer","expires_at":"2001-01-01T00:00:00Z"}`,
		`{"name":"far","role":"admin","expires_at":"9999-12-31T23:59:59.999999999Z"}`,
		`{"name":"tz","role":"admin","expires_at":"2999-01-01T00:00:00+14:00"}`,
		`{"name":"x","role":"viewer","expires_at":null}`,
		`{"name":"x","role":"viewer","expires_at":"0001-01-01T00:00:00Z"}`,
		`{"name":"x","role":"viewer","expires_at":12}`,
		`{"name":"x","role":"root"}`,
		`{"name":"a b","role":"viewer"}`,
		`{"name":"x","role":"viewer","extra":1}`,
		`{}`, `[]`, `null`, ``, `{"name":"x"`, `{"name":"x","role":"viewer"} {}`,
	} {
		f.Add([]byte(seed))
	}
	fs := newAPIFuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		code, ans := fs.send(t, http.MethodPost, "/api/v1/tokens", body, false)
		checkAnswer(t, "POST /tokens", code, ans, http.StatusCreated, http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge)
		if code == http.StatusCreated {
			var ct api.CreatedToken
			if err := json.Unmarshal(ans, &ct); err != nil || !strings.HasPrefix(ct.Secret, "obx_"+ct.ID+"_") {
				t.Fatalf("201 without a token: %s", ans)
			}
		}
	})
}

// FuzzOwnTokenBody sends arbitrary bodies to POST /me/tokens with a
// session: a token of the account's own (201) or a clear refusal (400,
// 409, 413), never a server error; and with an API token, always 403
// before the body is read.
func FuzzOwnTokenBody(f *testing.F) {
	for _, seed := range []string{
		`{"expires_at":"2999-01-01T00:00:00Z"}`,
		`{"label":"laptop","expires_at":"2999-01-01T00:00:00Z"}`,
		`{"label":"","expires_at":"2001-01-01T00:00:00Z"}`,
		`{"label":"a b","expires_at":"2999-01-01T00:00:00Z"}`,
		`{"label":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx","expires_at":"2999-01-01T00:00:00Z"}`,
		`{"expires_at":null}`, `{"label":"cli"}`, `{"expires_at":"9999-12-31T23:59:59Z"}`,
		`{}`, `null`, ``, `{"expires_at":"now"}`, `{"expires_at":"2999-01-01T00:00:00Z","role":"admin"}`,
	} {
		f.Add([]byte(seed))
	}
	fs := newAPIFuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		code, ans := fs.send(t, http.MethodPost, "/api/v1/me/tokens", body, true)
		checkAnswer(t, "POST /me/tokens", code, ans, http.StatusCreated, http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge)
		if code == http.StatusCreated {
			var ct api.CreatedToken
			if err := json.Unmarshal(ans, &ct); err != nil || ct.Account != "admin" || ct.ExpiresAt == nil {
				t.Fatalf("201 without a bound, expiring token: %s", ans)
			}
		}
		code, ans = fs.send(t, http.MethodPost, "/api/v1/me/tokens", body, false)
		checkAnswer(t, "POST /me/tokens with a token", code, ans, http.StatusForbidden)
	})
}

// FuzzAuditQuery sends arbitrary query strings to GET /audit: a page (200)
// or a clear refusal (400), never a server error; a page's next cursor
// reads back.
func FuzzAuditQuery(f *testing.F) {
	for _, seed := range []string{
		"", "limit=1", "limit=200", "limit=201", "limit=0", "limit=-1", "limit=1e3", "after=1", "after=0", "after=-5",
		"after=9223372036854775807", "after=9223372036854775808", "after=01", "after=%00", "kind=list", "kind=LIST",
		"kind=plugin", "name=admin", "name=%00", "name=%ff", "kind=token&name=fuzz&limit=2&after=3", "after=1&after=2",
		"limit=%20%205", "q=x&&&=;",
	} {
		f.Add(seed)
	}
	fs := newAPIFuzzServer(f)
	f.Fuzz(func(t *testing.T, query string) {
		if strings.ContainsAny(query, "# \t\r\n") {
			t.Skip() // not one query string
		}
		code, ans := fs.send(t, http.MethodGet, "/api/v1/audit?"+query, nil, false)
		checkAnswer(t, "GET /audit?"+query, code, ans, http.StatusOK, http.StatusBadRequest)
		if code != http.StatusOK {
			return
		}
		var page api.AdminPage
		if err := json.Unmarshal(ans, &page); err != nil || page.Items == nil {
			t.Fatalf("200 without a page: %s", ans)
		}
		if page.Next != "" {
			code, ans = fs.send(t, http.MethodGet, "/api/v1/audit?after="+page.Next, nil, false)
			checkAnswer(t, "GET /audit after the next cursor", code, ans, http.StatusOK)
		}
	})
}
