package opgateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParamsDecode holds decodeParams, which walks the members of a valid
// object by hand, to the answers of the standard library's token stream
// (paramsByTokens): the same members, names and value bytes, in the same
// order, and an error exactly when the token stream gives one.
func FuzzParamsDecode(f *testing.F) {
	for _, s := range []string{`{"id":1,"q":"x"}`, ` { "a" : [1, {"b":"}"}] , "c\"d":"\\\"", "e":null } `,
		`{"id":1,"id":2}`, `{"\u0069d":1,"id":2}`, `[1]`, `{"a":1} x`, `{"a":}`, `{"a":1,}`, `{`, `"x"`, ``,
		`{"a":-1.5e3,"b":true,"c":false,"d":{"e":[[]]}}`, "{\"a\":\"\xff\"}", `{"a":"\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := decodeParams(raw)
		want, werr := paramsByTokens(raw)
		if (err == nil) != (werr == nil) {
			t.Fatalf("decodeParams(%q) = %v; the token stream: %v", raw, err, werr)
		}
		if err != nil {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("decodeParams(%q) = %d members, the token stream %d", raw, len(got), len(want))
		}
		for i := range got {
			if got[i].name != want[i].name || !bytes.Equal(got[i].value, want[i].value) {
				t.Fatalf("decodeParams(%q) member %d = %q: %s, the token stream %q: %s",
					raw, i, got[i].name, got[i].value, want[i].name, want[i].value)
			}
		}
	})
}

// TestParamsManyNames: a duplicate among many names is found, and many
// distinct names are not taken for one.
func TestParamsManyNames(t *testing.T) {
	var b strings.Builder
	b.WriteString("{")
	for i := range 2000 {
		fmt.Fprintf(&b, `"p%d":%d,`, i, i)
	}
	ok := b.String()[:b.Len()-1] + "}"
	if ps, err := decodeParams([]byte(ok)); err != nil || len(ps) != 2000 || ps[1999].name != "p1999" {
		t.Fatalf("2000 distinct names: %d params, %v", len(ps), err)
	}
	dup := b.String() + `"p1500":0}`
	if _, err := decodeParams([]byte(dup)); err == nil || !strings.Contains(err.Error(), `"p1500" twice`) {
		t.Fatalf("a name repeated after 2000 others: %v", err)
	}
}

// BenchmarkParamsDecode measures decodeParams on a call's usual params.
func BenchmarkParamsDecode(b *testing.B) {
	raw := json.RawMessage(`{"item":"valve","qty":2,"line":12345}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeParams(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// paramsByTokens is the reference: the members of raw read with the
// standard library's token stream.
func paramsByTokens(raw []byte) ([]param, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	if len(raw) > MaxParamsBytes || !utf8.Valid(raw) {
		return nil, errors.New("too long or not UTF-8")
	}
	// json.Valid counts the outer object toward the nesting limit of
	// 10,000, which the token stream's Decode of a member does not:
	// decodeParams takes json.Valid's answer.
	if !json.Valid(raw) {
		return nil, errors.New("not valid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	var out []param
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string)
		if seen[name] {
			return nil, errors.New("name " + strconv.Quote(name) + " twice")
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, param{name: name, value: v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("something after the object")
	}
	return out, nil
}
