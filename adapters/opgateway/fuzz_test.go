package opgateway

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// FuzzParams feeds a call's Params, which a script sends, to the decoding
// and placing of a GET and a POST: it never panics, a path parameter
// never adds a segment nor reaches the query, and a POST's body is a JSON
// object without the path's parameters.
func FuzzParams(f *testing.F) {
	for _, s := range []string{`{"id":1,"q":"x"}`, `{"id":"a/b?c#d","tags":["x",null,2]}`, `{"id":".."}`,
		`{"id":{"a":1}}`, `{"id":1,"id":2}`, `[1]`, `{"id":"\u0000"}`, "{\"id\":\"\xff\"}", ``, `{"id":1} x`} {
		f.Add([]byte(s))
	}
	get := &method{Method: Method{Verb: "GET"}, tmpl: mustTemplate(f, "/orders/{id}")}
	post := &method{Method: Method{Verb: "POST"}, tmpl: mustTemplate(f, "/orders/{id}/lines"), body: true}
	f.Fuzz(func(t *testing.T, params []byte) {
		if r, err := get.build(params); err == nil {
			u, perr := url.Parse("https://erp.example" + r.path + "?" + r.query.Encode())
			if perr != nil || u.Host != "erp.example" || strings.Count(r.path, "/") != 2 || strings.ContainsAny(r.path, "?#") {
				t.Fatalf("GET %q: path %q query %q", params, r.path, r.query.Encode())
			}
			if _, ok := r.query["id"]; ok {
				t.Fatalf("GET %q: the path parameter is in the query", params)
			}
		}
		if r, err := post.build(params); err == nil {
			var body map[string]json.RawMessage
			if err := json.Unmarshal(r.body, &body); err != nil {
				t.Fatalf("POST %q: body %q is not a JSON object: %v", params, r.body, err)
			}
			if _, ok := body["id"]; ok || strings.Count(r.path, "/") != 3 || len(r.query) != 0 {
				t.Fatalf("POST %q: path %q body %q", params, r.path, r.body)
			}
		}
	})
}

// FuzzArgs feeds a write's Args to their decoding: it never panics, and
// what it accepts is a bounded list of driver values.
func FuzzArgs(f *testing.F) {
	for _, s := range []string{`[1,-2.5,"x",true,null]`, `[1e400]`, `[99999999999999999999]`, `[[1]]`, `[{"a":1}]`,
		`[1,]`, `[] []`, ``, `["\ud800"]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		args, err := decodeArgs(raw)
		if err != nil {
			return
		}
		if len(args) > MaxArgs {
			t.Fatalf("%d args", len(args))
		}
		for i, a := range args {
			switch a.(type) {
			case nil, bool, string, int64, float64:
			default:
				t.Fatalf("args[%d] of %q is a %T", i, raw, a)
			}
		}
	})
}

// FuzzTemplate feeds a method's path and a parameter's value to the
// template: it never panics, and a filled path keeps the template's
// segments and the base URL's host.
func FuzzTemplate(f *testing.F) {
	f.Add("/orders/{id}", "5")
	f.Add("/a/{x}-{y}/b", "../..")
	f.Add("/{a}{b}", "?x=1#f")
	f.Add("/x/{id}", "@evil.example")
	f.Fuzz(func(t *testing.T, path, value string) {
		tm, err := parseTemplate(path)
		if err != nil {
			return
		}
		values := map[string]string{}
		for _, n := range tm.names {
			values[n] = value
		}
		filled, err := tm.fill(values)
		if err != nil {
			return
		}
		u, err := url.Parse("https://erp.example" + filled)
		if err != nil || u.Host != "erp.example" || u.RawQuery != "" || u.Fragment != "" ||
			strings.Count(filled, "/") != strings.Count(path, "/") {
			t.Fatalf("%q with %q: %q (%v)", path, value, filled, err)
		}
	})
}

func mustTemplate(f *testing.F, path string) template {
	tm, err := parseTemplate(path)
	if err != nil {
		f.Fatal(err)
	}
	return tm
}
