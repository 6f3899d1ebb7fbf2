package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/siteline/outbox/adapters/httpapi"
	"github.com/siteline/outbox/adapters/httpapi/api"
	"github.com/siteline/outbox/adapters/memdir"
	"github.com/siteline/outbox/adapters/memstore"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// apiFuzzServer is the real handler over the real core and memory adapters,
// with an admin's API token and session: what the fuzz targets call, in
// process (no dispatcher runs; nothing is delivered).
type apiFuzzServer struct {
	h       http.Handler
	token   string
	session string
}

func newAPIFuzzServer(f *testing.F) apiFuzzServer {
	f.Helper()
	store := memstore.New()
	dir, err := memdir.New([]ports.List{{Name: "ok", Type: "email", Targets: []string{"ops@example.com"}}}, nil)
	if err != nil {
		f.Fatal(err)
	}
	svc, err := core.New(core.Config{}, core.Deps{Store: store, Audit: store, Directory: dir, Clock: ports.SystemClock{},
		Channels: ports.ChannelMap{}, SiteCalls: store})
	if err != nil {
		f.Fatal(err)
	}
	ops, err := core.NewOperators(store, ports.SystemClock{}, core.OperatorsConfig{BcryptCost: bcrypt.MinCost}, nil)
	if err != nil {
		f.Fatal(err)
	}
	editor, err := core.NewDirectoryEditor(dir, store, ports.SystemClock{}, core.DirectoryEditorConfig{}, nil)
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	if _, err := ops.PutUser(ctx, ports.UserRequest{Actor: ports.ActorSystem, Name: "admin", Role: ports.RoleAdmin, Password: password}); err != nil {
		f.Fatal(err)
	}
	token, _, err := ops.CreateToken(ctx, ports.TokenRequest{Actor: ports.ActorSystem, Name: "fuzz", Role: ports.RoleAdmin})
	if err != nil {
		f.Fatal(err)
	}
	sess, err := ops.Login(ctx, ports.LoginRequest{Name: "admin", Password: password, Client: "192.0.2.1"})
	if err != nil {
		f.Fatal(err)
	}
	// The rate of tokens of one's own is unbounded here: the targets fuzz
	// the decoders, and TestAViewerCannotMintTokensWithoutLimit the rate.
	s, err := httpapi.New(httpapi.Config{Outbox: svc, Directory: dir, Editor: editor, Operators: ops, SiteCalls: svc,
		OwnTokenRate: 1e9, OwnTokenBurst: 1 << 30})
	if err != nil {
		f.Fatal(err)
	}
	return apiFuzzServer{h: s.Handler(), token: token, session: sess.Secret}
}

// bodyRoutes are the API routes that read a JSON body.
var bodyRoutes = []struct{ method, path string }{
	{"POST", "/api/v1/login"},
	{"POST", "/api/v1/notifications/retry"},
	{"POST", "/api/v1/notifications/discard"},
	{"POST", "/api/v1/notifications/retry-now"},
	{"POST", "/api/v1/notifications/park"},
	{"PUT", "/api/v1/lists/fuzzed"},
	{"PUT", "/api/v1/channels/email"},
	{"PUT", "/api/v1/users/fuzzed"},
	{"POST", "/api/v1/tokens"},
	{"POST", "/api/v1/site-calls/retry"},
	{"POST", "/api/v1/site-calls/discard"},
}

// checkAPIAnswer fails unless rec is a clean answer: never a 500, and an
// error is the API's error body whose code stands for its status.
func checkAPIAnswer(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("%s: %d %s", what, rec.Code, rec.Body)
	}
	if rec.Code < 400 {
		return
	}
	var eb api.ErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
		t.Fatalf("%s: %d with a body that is no API error: %s", what, rec.Code, rec.Body)
	}
	if eb.Error.Code == api.CodeInternal {
		t.Fatalf("%s: internal error: %s", what, rec.Body)
	}
}

// FuzzAPIBodies sends any bytes as the JSON body of every API route that
// reads one, through the real handler with an admin's token: each answer is
// a success or a clean 4xx, never a 500 or a panic.
func FuzzAPIBodies(f *testing.F) {
	for i, seed := range []string{
		`{"name":"admin","password":"correct horse battery"}`,
		`{"ids":["0194f0d2-7a3b-7c4d-8e5f-000000000042"]}`,
		`{"filter":{"status":["Retrying"],"stuck":true,"updated_to":"2026-01-02T15:04:05Z"}}`,
		`{"filter":{"status":["Parked"],"from":"2026-01-02T00:00:00Z","q":"pump"},"all":false}`,
		`{"name":"fuzzed","type":"email","targets":["a@example.com","env:X"]}`,
		`{"type":"email","settings":{"host":"localhost","port":"25"},"retry":{"backoff":"exponential","max_retries":3,"interval_seconds":1e308},"rate_limit":-1}`,
		`{"role":"viewer","password":"long enough password"}`,
		`{"name":"made","role":"admin"}`,
		`{"keys":[{"site":"plant-1","id":"0194f0d2-7a3b-7c4d-8e5f-000000000042"}]}`,
		`{"filter":{"site":"plant-1","kind":"ExternalCall","status":["Parked"],"updated_to":"2026-01-02T15:04:05Z"}}`,
	} {
		f.Add(uint8(i), []byte(seed))
	}
	f.Add(uint8(0), []byte(`{"name":"admin","password":"x"} {}`))
	f.Add(uint8(1), []byte(`{"ids":null,"filter":{"status":"Parked"},"unknown":1}`))
	f.Add(uint8(3), []byte("\xff\xfe{"))
	s := newAPIFuzzServer(f)
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		r := bodyRoutes[int(route)%len(bodyRoutes)]
		req := httptest.NewRequest(r.method, r.path, strings.NewReader(string(body)))
		req.RemoteAddr = "192.0.2.9:1234"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+s.token)
		rec := httptest.NewRecorder()
		s.h.ServeHTTP(rec, req)
		checkAPIAnswer(t, r.method+" "+r.path, rec)
	})
}

// FuzzAPIQuery sends any query string to the list and count routes of
// notifications and site calls (the filter, the paging, the keyset cursor)
// and any id to the detail routes and a site's.
func FuzzAPIQuery(f *testing.F) {
	for _, q := range []string{
		"status=Parked,pending&site=plant-1&from=2026-01-02&to=2026-01-02T15:04&stuck=yes&q=pump",
		"limit=5&after=m1.MjAyNi0wMS0wMlQwMDowMDowMFp8YQ",
		"limit=0&after=%00", "updated_from=not-a-time", "status=Nope", "stuck=maybe", "kind=write&target=erp&q=%80",
		"order=oldest&status=Retrying&limit=3", "order=%E2%80%AE" + strings.Repeat("x", 60),
	} {
		f.Add(q, "0194f0d2-7a3b-7c4d-8e5f-000000000042")
	}
	s := newAPIFuzzServer(f)
	f.Fuzz(func(t *testing.T, query, id string) {
		for _, path := range []string{"/api/v1/notifications", "/api/v1/notifications/count", "/api/v1/site-calls", "/api/v1/site-calls/count"} {
			req := httptest.NewRequest("GET", path, nil)
			req.URL.RawQuery = query
			req.Header.Set("Authorization", "Bearer "+s.token)
			rec := httptest.NewRecorder()
			s.h.ServeHTTP(rec, req)
			checkAPIAnswer(t, "GET "+path+"?"+query, rec)
		}
		req := httptest.NewRequest("GET", "/api/v1/notifications/x", nil)
		req.URL.Path = "/api/v1/notifications/" + strings.ReplaceAll(id, "/", "")
		req.Header.Set("Authorization", "Bearer "+s.token)
		rec := httptest.NewRecorder()
		s.h.ServeHTTP(rec, req)
		checkAPIAnswer(t, "GET "+req.URL.Path, rec)
		for _, path := range []string{"/api/v1/site-calls/" + url.PathEscape(id) + "/" + url.PathEscape(id), "/api/v1/sites/" + url.PathEscape(id)} {
			req := httptest.NewRequest("GET", "/api/v1/sites", nil)
			req.URL.RawPath, req.URL.Path = path, path
			if p, err := url.PathUnescape(path); err == nil {
				req.URL.Path = p
			}
			req.Header.Set("Authorization", "Bearer "+s.token)
			rec := httptest.NewRecorder()
			s.h.ServeHTTP(rec, req)
			checkAPIAnswer(t, "GET "+path, rec)
		}
	})
}

// FuzzPageForms posts any form to the page's login and to the bulk actions
// (with the confirmation step), through the real handler with an admin's
// session: never a 500, and every redirect stays on this server (the
// login's next and the forms' return are the caller's).
func FuzzPageForms(f *testing.F) {
	paths := []string{"/login", "/notifications/retry", "/notifications/discard"}
	f.Add(uint8(0), "name=admin&password=correct+horse+battery&next=%2Fnotifications%3Fstatus%3DParked")
	f.Add(uint8(0), "name=admin&password=wrong&next=%2F%2Fevil.example")
	f.Add(uint8(1), "scope=filter&status=Parked&site=plant-1&return=%2Fnotifications")
	f.Add(uint8(2), "scope=filter&status=Parked&confirm=yes&updated_to=2026-01-02T15%3A04%3A05Z&return=%2F%5Cevil")
	f.Add(uint8(1), "scope=ids&id=0194f0d2-7a3b-7c4d-8e5f-000000000042&id=x&return=https%3A%2F%2Fevil")
	f.Add(uint8(2), "scope=filter&stuck=true&from=bad")
	f.Add(uint8(1), "%zz=1&;")
	s := newAPIFuzzServer(f)
	f.Fuzz(func(t *testing.T, path uint8, form string) {
		p := paths[int(path)%len(paths)]
		req := httptest.NewRequest("POST", p, strings.NewReader(form))
		req.RemoteAddr = "192.0.2.9:1234"
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(&http.Cookie{Name: "outbox_session", Value: s.session})
		rec := httptest.NewRecorder()
		s.h.ServeHTTP(rec, req)
		if rec.Code >= 500 && rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("POST %s %q: %d %s", p, form, rec.Code, rec.Body)
		}
		if loc := rec.Header().Get("Location"); loc != "" {
			if !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") || strings.ContainsAny(loc, "\\\t\r\n") {
				t.Fatalf("POST %s %q redirects off the server: %q", p, form, loc)
			}
		}
	})
}

// FuzzFlashCookie sends any flash cookie with a page request: the page
// renders, and the message shown is bounded.
func FuzzFlashCookie(f *testing.F) {
	f.Add("Retried+3+notifications.")
	f.Add("%3Cscript%3Ealert(1)%3C%2Fscript%3E")
	f.Add("%zz")
	f.Add(strings.Repeat("x", 600))
	s := newAPIFuzzServer(f)
	f.Fuzz(func(t *testing.T, value string) {
		req := httptest.NewRequest("GET", "/lists", nil)
		req.Header.Set("Cookie", "outbox_session="+s.session+"; outbox_flash="+value)
		rec := httptest.NewRecorder()
		s.h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("flash %q: %d %s", value, rec.Code, rec.Body)
		}
		if strings.Contains(rec.Body.String(), "<script>") {
			t.Fatalf("flash %q: a script reached the page", value)
		}
	})
}
