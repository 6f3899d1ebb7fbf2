package opgateway_test

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/opgateway"
	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/ports"
)

// received is what the test's server saw of one request.
type received struct {
	Method, Path, Query string
	Header              http.Header
	Body                []byte
}

// target is a real HTTP server on loopback that records every request
// and answers with respond (200 and the request's body as JSON when nil).
type target struct {
	*httptest.Server
	mu      sync.Mutex
	got     []received
	respond func(w http.ResponseWriter, r *http.Request)
}

func newTarget(t testing.TB, respond func(w http.ResponseWriter, r *http.Request)) *target {
	t.Helper()
	tg := &target{respond: respond}
	tg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		tg.mu.Lock()
		tg.got = append(tg.got, received{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Clone(), b})
		tg.mu.Unlock()
		if tg.respond != nil {
			tg.respond(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(tg.Close)
	return tg
}

func (tg *target) last(t testing.TB) received {
	t.Helper()
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if len(tg.got) == 0 {
		t.Fatal("the server received no request")
	}
	return tg.got[len(tg.got)-1]
}

func (tg *target) count() int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return len(tg.got)
}

var erpMethods = []opgateway.Method{
	{Name: "getOrder", Verb: "GET", Path: "/orders/{id}"},
	{Name: "findOrders", Verb: "GET", Path: "/orders"},
	{Name: "addLine", Verb: "POST", Path: "/orders/{id}/lines"},
	{Name: "putOrder", Verb: "PUT", Path: "/orders/{id}"},
	{Name: "patchOrder", Verb: "PATCH", Path: "/orders/{id}"},
	{Name: "deleteLine", Verb: "DELETE", Path: "/orders/{id}/lines/{line}"},
	{Name: "item", Verb: "GET", Path: "/items/v{version}-{sku}.json"},
}

// policy is the secretref policy of the tests: variables starting with
// OUTBOX_SECRET_ and files in dir.
func policy(dir string) secretref.Policy {
	return secretref.Policy{EnvPrefix: secretref.DefaultEnvPrefix, Dirs: []string{dir}}
}

func newGateway(t testing.TB, cfg opgateway.Config, p secretref.Policy) *opgateway.Gateway {
	t.Helper()
	g, err := opgateway.New(cfg, p, opgateway.Options{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = g.Close() })
	return g
}

func erp(url string) opgateway.System {
	return opgateway.System{Name: "erp", BaseURL: url + "/api/", Methods: erpMethods,
		Headers: map[string]string{"X-Plant": "north"}}
}

func callOp(method, params string) ports.Operation {
	return ports.Operation{ID: uuid.Must(uuid.NewV7()).String(), Kind: ports.OpCall, Target: "erp", Method: method,
		Payload: ports.OpPayload{Params: json.RawMessage(params)}}
}

func TestCallPlacesParamsByVerb(t *testing.T) {
	tg := newTarget(t, nil)
	g := newGateway(t, opgateway.Config{Systems: []opgateway.System{erp(tg.URL)}}, secretref.Policy{})
	for _, c := range []struct {
		method, params    string
		verb, path, query string
		body              string // "" means no body
	}{
		{"getOrder", `{"id":"a/b c?#..","status":"open","n":3,"tags":["x","y",null],"skip":null,"ok":true}`,
			"GET", "/api/orders/a%2Fb%20c%3F%23..", "n=3&ok=true&status=open&tags=x&tags=y", ""},
		{"findOrders", ``, "GET", "/api/orders", "", ""},
		{"findOrders", `{"q":"é&=+"}`, "GET", "/api/orders", "q=%C3%A9%26%3D%2B", ""},
		{"addLine", `{"qty":2,"id":5,"item":{"sku":"X-1","tags":[1,2]},"note":null}`,
			"POST", "/api/orders/5/lines", "", `{"qty":2,"item":{"sku":"X-1","tags":[1,2]},"note":null}`},
		{"addLine", `{"id":5}`, "POST", "/api/orders/5/lines", "", `{}`},
		{"putOrder", `{"id":"7","state":"closed"}`, "PUT", "/api/orders/7", "", `{"state":"closed"}`},
		{"patchOrder", `{"id":7.5,"state":"open"}`, "PATCH", "/api/orders/7.5", "", `{"state":"open"}`},
		{"deleteLine", `{"line":2,"id":true,"force":false}`, "DELETE", "/api/orders/true/lines/2", "force=false", ""},
		{"item", `{"sku":"A b","version":2}`, "GET", "/api/items/v2-A%20b.json", "", ""},
	} {
		op := callOp(c.method, c.params)
		if err := g.Check(op); err != nil {
			t.Fatalf("%s %s: Check: %v", c.method, c.params, err)
		}
		res := g.Attempt(t.Context(), op)
		if res.Outcome != ports.OutcomeSuccess || string(res.Answer) != `{"ok":true}` {
			t.Fatalf("%s %s: %+v", c.method, c.params, res)
		}
		got := tg.last(t)
		if got.Method != c.verb || got.Path != c.path || got.Query != c.query {
			t.Errorf("%s %s: sent %s %s ? %s, want %s %s ? %s", c.method, c.params, got.Method, got.Path, got.Query, c.verb, c.path, c.query)
		}
		if string(got.Body) != c.body {
			t.Errorf("%s %s: body %q, want %q", c.method, c.params, got.Body, c.body)
		}
		if ct := got.Header.Get("Content-Type"); (c.body != "") != (ct == "application/json") {
			t.Errorf("%s: Content-Type %q with body %q", c.method, ct, c.body)
		}
		if k := got.Header.Get("Idempotency-Key"); k != op.ID {
			t.Errorf("%s: Idempotency-Key %q, want the operation's id %q", c.method, k, op.ID)
		}
		if got.Header.Get("X-Plant") != "north" {
			t.Errorf("%s: the system's header is missing: %v", c.method, got.Header)
		}
	}
	// A repeated attempt of one operation carries the same key.
	op := callOp("findOrders", `{}`)
	g.Attempt(t.Context(), op)
	g.Attempt(t.Context(), op)
	tg.mu.Lock()
	a, b := tg.got[len(tg.got)-2], tg.got[len(tg.got)-1]
	tg.mu.Unlock()
	if a.Header.Get("Idempotency-Key") != op.ID || b.Header.Get("Idempotency-Key") != op.ID {
		t.Errorf("repeated attempts carry %q and %q, want %q twice", a.Header.Get("Idempotency-Key"), b.Header.Get("Idempotency-Key"), op.ID)
	}
}

func TestCallAuthKinds(t *testing.T) {
	dir := t.TempDir()
	const token, password, apiKey = "tok-4f9a1c77e2", "pw-9d3b0aa1", "key-1b2c3d4e5f"
	t.Setenv("OUTBOX_SECRET_ERP_TOKEN", token)
	t.Setenv("OUTBOX_SECRET_ERP_KEY", apiKey)
	if err := os.WriteFile(filepath.Join(dir, "erp-password"), []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The server echoes the request's headers in a failure, as a careless
	// one would: no error text may carry them.
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		auth := r.Header.Get("Authorization")
		_, cred, _ := strings.Cut(auth, " ")
		_, _ = io.WriteString(w, "refused: "+auth+" "+cred+" "+r.Header.Get("X-Api-Key"))
	})
	for _, c := range []struct {
		auth         opgateway.Auth
		header, want string
		secret       string
	}{
		{opgateway.Auth{Kind: "bearer", Token: "env:OUTBOX_SECRET_ERP_TOKEN"}, "Authorization", "Bearer " + token, token},
		{opgateway.Auth{Kind: "basic", User: "site-7", Password: "file:" + filepath.Join(dir, "erp-password")},
			"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("site-7:"+password)), password},
		{opgateway.Auth{Kind: "header", Header: "X-Api-Key", Value: "env:OUTBOX_SECRET_ERP_KEY"}, "X-Api-Key", apiKey, apiKey},
	} {
		sys := erp(tg.URL)
		sys.Auth = c.auth
		g := newGateway(t, opgateway.Config{Systems: []opgateway.System{sys}}, policy(dir))
		res := g.Attempt(t.Context(), callOp("findOrders", `{}`))
		if got := tg.last(t).Header.Get(c.header); got != c.want {
			t.Errorf("%s: %s = %q, want %q", c.auth.Kind, c.header, got, c.want)
		}
		if res.Outcome != ports.OutcomePermanent || !strings.Contains(res.Error, "HTTP 401") {
			t.Errorf("%s: %+v, want a Permanent 401", c.auth.Kind, res)
		}
		_, cred, _ := strings.Cut(c.want, " ")
		if strings.Contains(res.Error, c.secret) || strings.Contains(res.Error, c.want) || cred != "" && strings.Contains(res.Error, cred) {
			t.Errorf("%s: the error holds the secret: %q", c.auth.Kind, res.Error)
		}
	}

	// A reference the policy refuses stops New, naming the field, not a
	// value.
	sys := erp(tg.URL)
	sys.Auth = opgateway.Auth{Kind: "bearer", Token: "env:ERP_TOKEN"}
	_, err := opgateway.New(opgateway.Config{Systems: []opgateway.System{sys}}, policy(dir), opgateway.Options{})
	var fe *ports.FieldError
	if !errors.As(err, &fe) || fe.Field != "Systems[0].Auth.Token" || !errors.Is(err, ports.ErrInvalid) ||
		!strings.Contains(err.Error(), "env:ERP_TOKEN: only variables whose names start with OUTBOX_SECRET_") {
		t.Errorf("refused reference: %v", err)
	}
	// A reference that does not resolve (yet) is a Transient failure: the
	// operator may still provide it.
	sys.Auth = opgateway.Auth{Kind: "bearer", Token: "env:OUTBOX_SECRET_UNSET_TOKEN"}
	g := newGateway(t, opgateway.Config{Systems: []opgateway.System{sys}}, policy(dir))
	n := tg.count()
	res := g.Attempt(t.Context(), callOp("findOrders", `{}`))
	if res.Outcome != ports.OutcomeTransient || !strings.Contains(res.Error, "OUTBOX_SECRET_UNSET_TOKEN") || tg.count() != n {
		t.Errorf("unresolvable token: %+v (requests %d, before %d)", res, tg.count(), n)
	}
}

func TestCallClassification(t *testing.T) {
	date := time.Now().Add(90 * time.Second).UTC().Format(http.TimeFormat)
	for _, c := range []struct {
		status     int
		retryAfter string
		body       string
		outcome    ports.Outcome
		wantAfter  func(time.Duration) bool
		answer     string
	}{
		{200, "", `{"id": 5}`, ports.OutcomeSuccess, nil, `{"id": 5}`},
		{201, "", "created order 5", ports.OutcomeSuccess, nil, `"created order 5"`},
		{202, "", "\xff\xfe", ports.OutcomeSuccess, nil, "\"\uFFFD\""},
		{204, "", "", ports.OutcomeSuccess, nil, `null`},
		{301, "", "", ports.OutcomePermanent, nil, ""},
		{400, "", "bad order", ports.OutcomePermanent, nil, ""},
		{404, "5", "", ports.OutcomePermanent, func(d time.Duration) bool { return d == 0 }, ""},
		{409, "", "", ports.OutcomePermanent, nil, ""},
		{408, "", "", ports.OutcomeTransient, func(d time.Duration) bool { return d == 0 }, ""},
		{429, "7", "", ports.OutcomeTransient, func(d time.Duration) bool { return d == 7*time.Second }, ""},
		{500, "", "", ports.OutcomeTransient, nil, ""},
		{502, "99999999", "", ports.OutcomeTransient, func(d time.Duration) bool { return d == opgateway.MaxRetryAfter }, ""},
		{503, date, "", ports.OutcomeTransient, func(d time.Duration) bool { return d > 80*time.Second && d <= 90*time.Second }, ""},
		{504, "soon", "", ports.OutcomeTransient, func(d time.Duration) bool { return d == 0 }, ""},
	} {
		tg := newTarget(t, func(w http.ResponseWriter, _ *http.Request) {
			if c.retryAfter != "" {
				w.Header().Set("Retry-After", c.retryAfter)
			}
			if c.status == 301 {
				w.Header().Set("Location", "https://elsewhere.example/")
			}
			w.WriteHeader(c.status)
			_, _ = io.WriteString(w, c.body)
		})
		g := newGateway(t, opgateway.Config{Systems: []opgateway.System{erp(tg.URL)}}, secretref.Policy{})
		res := g.Attempt(t.Context(), callOp("getOrder", `{"id":1}`))
		if res.Outcome != c.outcome {
			t.Errorf("HTTP %d: outcome %s (%q), want %s", c.status, res.Outcome, res.Error, c.outcome)
		}
		if c.wantAfter != nil && !c.wantAfter(res.RetryAfter) {
			t.Errorf("HTTP %d Retry-After %q: RetryAfter %s", c.status, c.retryAfter, res.RetryAfter)
		}
		if c.outcome == ports.OutcomeSuccess && string(res.Answer) != c.answer {
			t.Errorf("HTTP %d: answer %s, want %s", c.status, res.Answer, c.answer)
		}
		if c.outcome != ports.OutcomeSuccess && !strings.Contains(res.Error, "GET /orders/{id}: HTTP ") {
			t.Errorf("HTTP %d: error %q", c.status, res.Error)
		}
		if tg.count() != 1 {
			t.Errorf("HTTP %d: %d requests, want 1 (no redirect followed)", c.status, tg.count())
		}
	}
}

func TestCallNetworkFailuresAreTransient(t *testing.T) {
	// A closed port: connection refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	g := newGateway(t, opgateway.Config{Systems: []opgateway.System{erp("http://" + addr)}}, secretref.Policy{})
	res := g.Attempt(t.Context(), callOp("findOrders", `{"secret_query":"q-77aa"}`))
	if res.Outcome != ports.OutcomeTransient || !strings.Contains(res.Error, "refused") {
		t.Errorf("closed port: %+v", res)
	}
	if strings.Contains(res.Error, "q-77aa") || strings.Contains(res.Error, addr) {
		t.Errorf("closed port: the error holds the URL: %q", res.Error)
	}

	// A server that does not answer within the system's timeout.
	release := make(chan struct{})
	tg := newTarget(t, func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	sys := erp(tg.URL)
	sys.Timeout = 200 * time.Millisecond
	g = newGateway(t, opgateway.Config{Systems: []opgateway.System{sys}}, secretref.Policy{})
	res = g.Attempt(t.Context(), callOp("findOrders", `{}`))
	if res.Outcome != ports.OutcomeTransient || !strings.Contains(res.Error, "timeout of 200ms") {
		t.Errorf("silent server: %+v", res)
	}
}

func TestCallAnswerBound(t *testing.T) {
	var size int
	tg := newTarget(t, func(w http.ResponseWriter, _ *http.Request) {
		// A JSON string of size bytes, quotes included.
		_, _ = io.WriteString(w, `"`+strings.Repeat("a", size-2)+`"`)
	})
	g := newGateway(t, opgateway.Config{Systems: []opgateway.System{erp(tg.URL)}}, secretref.Policy{})
	size = opgateway.MaxAnswerBytes
	res := g.Attempt(t.Context(), callOp("findOrders", `{}`))
	if res.Outcome != ports.OutcomeSuccess || len(res.Answer) != opgateway.MaxAnswerBytes {
		t.Errorf("answer of the bound: %s, %d bytes", res.Outcome, len(res.Answer))
	}
	size = opgateway.MaxAnswerBytes + 1
	res = g.Attempt(t.Context(), callOp("findOrders", `{}`))
	if res.Outcome != ports.OutcomeSuccess || string(res.Answer) != string(opgateway.AnswerDropped) {
		t.Errorf("answer over the bound: %s, %.100s", res.Outcome, res.Answer)
	}
}

func TestCheckCalls(t *testing.T) {
	g := newGateway(t, opgateway.Config{Systems: []opgateway.System{erp("https://erp.example")}}, secretref.Policy{})
	for _, c := range []struct {
		op   ports.Operation
		want string
	}{
		{ports.Operation{Kind: ports.OpCall, Target: "crm", Method: "getOrder"}, `no external system "crm"`},
		{ports.Operation{Kind: ports.OpCall, Target: "erp", Method: "nope"}, `has no method "nope"`},
		{ports.Operation{Kind: "Other", Target: "erp"}, `unknown operation kind`},
		{callOp("getOrder", `[1]`), "not a JSON object"},
		{callOp("getOrder", `{"id":1`), "not valid JSON"},
		{callOp("getOrder", `{"id":1} {}`), "after the JSON object"},
		{callOp("getOrder", "{\"id\":\"\xff\"}"), "not valid UTF-8"},
		{callOp("getOrder", `{"id":"`+strings.Repeat("a", opgateway.MaxParamsBytes)+`"}`), "over the limit"},
		{callOp("getOrder", `{"id":1,"id":2}`), `name "id" twice`},
		{callOp("getOrder", `{}`), "path parameter id is missing"},
		{callOp("getOrder", `{"id":null}`), `path parameter "id" must be`},
		{callOp("getOrder", `{"id":{"a":1}}`), `path parameter "id" must be`},
		{callOp("getOrder", `{"id":""}`), `is empty, "." or ".."`},
		{callOp("getOrder", `{"id":".."}`), `is empty, "." or ".."`},
		{callOp("findOrders", `{"filter":{"a":1}}`), `parameter "filter" of a GET`},
		{callOp("findOrders", `{"filter":[[1]]}`), `parameter "filter" of a GET`},
	} {
		err := g.Check(c.op)
		if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%s.%s %.60s) = %v, want ErrInvalid with %q", c.op.Target, c.op.Method, c.op.Payload.Params, err, c.want)
		}
	}
	if err := g.Check(callOp("addLine", `{"id":1,"item":{"deep":[{"x":null}]}}`)); err != nil {
		t.Errorf("a POST with an object param: %v", err)
	}
	if p, err := g.Policy(ports.OpCall, "erp"); err != nil || p != (ports.OpPolicy{MaxRetries: opgateway.DefaultMaxRetries, Interval: opgateway.DefaultRetryInterval}) {
		t.Errorf("Policy(erp) = %+v, %v", p, err)
	}
	if _, err := g.Policy(ports.OpWrite, "erp"); !errors.Is(err, ports.ErrInvalid) {
		t.Errorf("Policy of a write to a system: %v", err)
	}
	// An operation whose system left the configuration is retried, not
	// failed: the operator may define it again.
	if res := g.Attempt(t.Context(), ports.Operation{Kind: ports.OpCall, Target: "gone", Method: "x"}); res.Outcome != ports.OutcomeTransient {
		t.Errorf("attempt on an unknown system: %+v", res)
	}
}

func TestCallOverTLSWithTheSystemsCA(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"tls":true}`)
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "plant-ca.pem"), ca, 0o600); err != nil {
		t.Fatal(err)
	}

	// The machine's authorities do not know the server's: Transient, the
	// operator may fix it.
	g := newGateway(t, opgateway.Config{Systems: []opgateway.System{erp(srv.URL)}}, secretref.Policy{})
	if res := g.Attempt(t.Context(), callOp("findOrders", `{}`)); res.Outcome != ports.OutcomeTransient ||
		!strings.Contains(res.Error, "unknown authority") {
		t.Errorf("without the CA: %+v", res)
	}
	// With the system's CA file (relative to the policy's base).
	sys := erp(srv.URL)
	sys.CAFile = "plant-ca.pem"
	g = newGateway(t, opgateway.Config{Systems: []opgateway.System{sys}}, secretref.Own(dir))
	if res := g.Attempt(t.Context(), callOp("findOrders", `{}`)); res.Outcome != ports.OutcomeSuccess || string(res.Answer) != `{"tls":true}` {
		t.Errorf("with the CA: %+v", res)
	}
	// A CA file that holds no certificate stops New.
	if err := os.WriteFile(filepath.Join(dir, "empty.pem"), []byte("nothing"), 0o600); err != nil {
		t.Fatal(err)
	}
	sys.CAFile = "empty.pem"
	_, err := opgateway.New(opgateway.Config{Systems: []opgateway.System{sys}}, secretref.Own(dir), opgateway.Options{})
	var fe *ports.FieldError
	if !errors.As(err, &fe) || fe.Field != "Systems[0].CAFile" {
		t.Errorf("an empty CA file: %v", err)
	}
}
