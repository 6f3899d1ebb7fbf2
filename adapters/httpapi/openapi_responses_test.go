package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/uuid"

	"github.com/siteline/outbox/ports"
)

// servedOpenAPI is the OpenAPI document as a fresh server serves it,
// loaded and validated by kin-openapi.
func servedOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	e := newEnv(t)
	code, raw := e.do("", http.MethodGet, "/api/v1/openapi.json", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /api/v1/openapi.json: %d %s", code, raw)
	}
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		t.Fatalf("openapi.yaml does not load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	return doc
}

// TestOpenAPIIsValid: the served document loads and validates with a
// third-party OpenAPI library, and every operation has an operationId of
// its own.
func TestOpenAPIIsValid(t *testing.T) {
	doc := servedOpenAPI(t)
	seen := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			if op.OperationID == "" {
				t.Errorf("%s has no operationId in adapters/httpapi/web/openapi.yaml: add one (lowerCamelCase, e.g. getThroughput)", where)
				continue
			}
			if other, dup := seen[op.OperationID]; dup {
				t.Errorf("%s and %s share the operationId %q", where, other, op.OperationID)
			}
			seen[op.OperationID] = where
		}
	}
}

// wrongQueryProbe names the probe that sets the query parameters wrong.
const wrongQueryProbe = "with every query parameter set to a wrong value"

// probe is one request the responses test makes of every operation.
type probe struct {
	name string
	// applies says whether the probe fits op (method, has a body, …).
	applies func(method string, op *openapi3.Operation) bool
	// send makes the request on a fresh env; path has its parameters
	// filled in.
	send func(e *env, method, path string) (int, []byte)
}

// TestOpenAPIDocumentsEveryAnswer: each operation of the document is sent
// the requests an outsider can send (no credentials, a viewer's token, an
// admin's token and session, a malformed or oversize body, a cross-origin
// request, path and query values that are wrong), each on a fresh server,
// and every status the server answers with is among the operation's
// documented responses. The failure names the line to add.
func TestOpenAPIDocumentsEveryAnswer(t *testing.T) {
	doc := servedOpenAPI(t)
	hasBody := func(_ string, op *openapi3.Operation) bool { return op.RequestBody != nil }
	unsafe := func(method string, _ *openapi3.Operation) bool { return method != http.MethodGet }
	always := func(string, *openapi3.Operation) bool { return true }
	probes := []probe{
		probe{"without credentials", always, func(e *env, m, p string) (int, []byte) { return e.do("", m, p, map[string]any{}) }},
		probe{"with a viewer's token", always, func(e *env, m, p string) (int, []byte) {
			return e.do(ports.RoleViewer, m, p, map[string]any{})
		}},
		probe{"with an admin's token and an empty object", always, func(e *env, m, p string) (int, []byte) {
			return e.do(ports.RoleAdmin, m, p, map[string]any{})
		}},
		probe{"with an admin's session and an empty object", always, func(e *env, m, p string) (int, []byte) {
			return e.withCookie(e.sessionCookie(string(ports.RoleAdmin)), m, p, map[string]any{})
		}},
		probe{"with a malformed JSON body", hasBody, func(e *env, m, p string) (int, []byte) {
			return e.rawBody(m, p, "application/json", `{"name":`)
		}},
		probe{"with a body that is not JSON", hasBody, func(e *env, m, p string) (int, []byte) {
			return e.rawBody(m, p, "text/plain", "hello")
		}},
		probe{"with a body over the limit", hasBody, func(e *env, m, p string) (int, []byte) {
			return e.rawBody(m, p, "application/json", `{"name":"`+strings.Repeat("a", 2<<20)+`"}`)
		}},
		probe{"from another origin", unsafe, func(e *env, m, p string) (int, []byte) {
			req := e.request(m, p, map[string]any{})
			req.Header.Set("Authorization", "Bearer "+e.tokens[ports.RoleAdmin])
			req.Header.Set("Sec-Fetch-Site", "cross-site")
			req.Header.Set("Origin", "https://evil.example")
			return e.send(http.DefaultClient, req)
		}},
		probe{wrongQueryProbe, func(_ string, op *openapi3.Operation) bool {
			return len(queryParams(op)) > 0
		}, func(e *env, m, p string) (int, []byte) {
			return e.do(ports.RoleAdmin, m, p, nil)
		}},
	}

	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			// A subtest per operation, so that its servers stop with it.
			t.Run(method+" "+path, func(t *testing.T) { checkAnswers(t, path, method, item, op, probes) })
		}
	}
}

// checkAnswers sends op every probe that applies to it, each on a fresh
// server, and fails naming every status it answers that its responses lack.
func checkAnswers(t *testing.T, path, method string, item *openapi3.PathItem, op *openapi3.Operation, probes []probe) {
	params := append(slices.Clone(item.Parameters), op.Parameters...)
	missing := map[int][]string{} // undocumented status: the probes that got it
	for _, pr := range probes {
		if !pr.applies(method, op) {
			continue
		}
		for _, variant := range pathVariants(path, params) {
			p := "/api/v1" + variant.path
			if pr.name == wrongQueryProbe {
				p += "?" + wrongQuery(op).Encode()
			}
			e := newEnv(t)
			code, got := pr.send(e, method, p)
			if code >= 500 {
				t.Errorf("%s %s %s%s: %d %s", method, path, pr.name, variant.note, code, got)
				continue
			}
			if op.Responses.Status(code) == nil {
				missing[code] = append(missing[code], pr.name+variant.note)
			}
		}
	}
	if len(missing) == 0 {
		return
	}
	var why, add []string
	for _, code := range slices.Sorted(maps.Keys(missing)) {
		why = append(why, fmt.Sprintf("%d %s", code, strings.Join(missing[code], ", ")))
		if code >= 400 {
			add = append(add, fmt.Sprintf("        \"%d\": {$ref: \"#/components/responses/Error\"}", code))
		} else {
			add = append(add, fmt.Sprintf("        \"%d\": {description: …}", code))
		}
	}
	t.Errorf("%s %s (%s) answers statuses its responses lack: %s.\nAdd under its responses in adapters/httpapi/web/openapi.yaml:\n%s",
		method, path, op.OperationID, strings.Join(why, "; "), strings.Join(add, "\n"))
}

// pathVariant is a path with its parameters filled in.
type pathVariant struct{ path, note string }

// pathVariants fills path's parameters with values that name nothing: a
// random UUID where the parameter is one, and also a value that is not a
// UUID there.
func pathVariants(path string, params openapi3.Parameters) []pathVariant {
	fill := func(bad bool) string {
		p := path
		for _, ref := range params {
			prm := ref.Value
			if prm == nil || prm.In != openapi3.ParameterInPath {
				continue
			}
			v := "nosuch"
			if s := prm.Schema; s != nil && s.Value != nil && s.Value.Format == "uuid" && !bad {
				v = uuid.NewString()
			}
			p = strings.ReplaceAll(p, "{"+prm.Name+"}", url.PathEscape(v))
		}
		return p
	}
	out := []pathVariant{{fill(false), ""}}
	if bad := fill(true); bad != out[0].path {
		out = append(out, pathVariant{bad, " and a path value that is not a UUID"})
	}
	return out
}

// queryParams are op's query parameters.
func queryParams(op *openapi3.Operation) []*openapi3.Parameter {
	var out []*openapi3.Parameter
	for _, ref := range op.Parameters {
		if ref.Value != nil && ref.Value.In == openapi3.ParameterInQuery {
			out = append(out, ref.Value)
		}
	}
	return out
}

// wrongQuery sets each of op's query parameters to a value its schema
// refuses where it can (a number out of range, a date that is not one, a
// value outside the enum), else to a keyword.
func wrongQuery(op *openapi3.Operation) url.Values {
	q := url.Values{}
	for _, p := range queryParams(op) {
		v := "zz-no-such-value"
		if p.Schema != nil && p.Schema.Value != nil {
			s := p.Schema.Value
			if s.Type.Is("array") && s.Items != nil && s.Items.Value != nil {
				s = s.Items.Value
			}
			switch {
			case s.Type.Is("integer"), s.Type.Is("number"):
				v = "-1"
			case s.Type.Is("boolean"):
				v = "maybe"
			case s.Format == "date-time":
				v = "yesterday"
			}
		}
		q.Set(p.Name, v)
	}
	return q
}

// rawBody sends body as it is with an admin's token.
func (e *env) rawBody(method, path, contentType, body string) (int, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, bytes.NewBufferString(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Authorization", "Bearer "+e.tokens[ports.RoleAdmin])
	return e.send(http.DefaultClient, req)
}
