package opgateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds on an operation's payload, checked before anything is committed.
const (
	// MaxParamsBytes bounds a call's Params, a JSON object.
	MaxParamsBytes = 64 << 10
	// MaxSQLBytes bounds a write's SQL text.
	MaxSQLBytes = 64 << 10
	// MaxArgsBytes bounds a write's Args, a JSON array, and MaxArgs the
	// number of its elements.
	MaxArgsBytes = 64 << 10
	MaxArgs      = 1000
)

// param is one member of a call's Params, in the order given.
type param struct {
	name  string
	value json.RawMessage
}

// decodeParams reads a call's Params: a JSON object of at most
// MaxParamsBytes of valid UTF-8, each member name once. Empty params are
// an empty object.
//
// It runs twice on every call (the check before the commit, the attempt),
// so it validates with json.Valid and then walks the members of the valid
// object by hand: the standard library's token stream, which keeps member
// order, cost 2 µs and 46 allocations for three members, a tenth of all
// that a busy site leader allocated. FuzzParamsDecode holds it to the
// token stream's answers.
func decodeParams(raw json.RawMessage) ([]param, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	if len(raw) > MaxParamsBytes {
		return nil, fmt.Errorf("params are %d bytes, over the limit of %d", len(raw), MaxParamsBytes)
	}
	if !utf8.Valid(raw) {
		return nil, errors.New("params are not valid UTF-8")
	}
	i := skipSpace(raw, 0)
	if raw[i] != '{' {
		return nil, errors.New("params are not a JSON object")
	}
	if !json.Valid(raw) {
		return nil, paramsSyntaxError(raw)
	}
	var out []param
	var seen map[string]bool // once there are more than a few names
	for i = skipSpace(raw, i+1); raw[i] != '}'; i = skipSpace(raw, i) {
		if raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
		end := stringEnd(raw, i)
		name, err := unquote(raw[i:end])
		if err != nil {
			return nil, fmt.Errorf("params are not valid JSON: %w", err)
		}
		if twice(out, &seen, name) {
			return nil, fmt.Errorf("params name %s twice", strconv.Quote(name))
		}
		i = skipSpace(raw, skipSpace(raw, end)+1) // past the colon
		end = valueEnd(raw, i)
		// The value is a piece of raw, not a copy: callers use it while
		// raw lives.
		out = append(out, param{name: name, value: raw[i:end:end]})
		i = end
	}
	return out, nil
}

// twice reports whether name is among the params read so far: a look
// through them while they are few, a map once they are more.
func twice(ps []param, seen *map[string]bool, name string) bool {
	const few = 16
	if len(ps) < few {
		for _, p := range ps {
			if p.name == name {
				return true
			}
		}
		return false
	}
	if *seen == nil {
		*seen = make(map[string]bool, 2*len(ps))
		for _, p := range ps {
			(*seen)[p.name] = true
		}
	}
	if (*seen)[name] {
		return true
	}
	(*seen)[name] = true
	return false
}

// paramsSyntaxError says why params that open an object are not valid
// JSON.
func paramsSyntaxError(raw []byte) error {
	var v json.RawMessage
	if json.NewDecoder(bytes.NewReader(raw)).Decode(&v) == nil {
		return errors.New("params hold something after the JSON object")
	}
	err := json.Unmarshal(raw, &v)
	return fmt.Errorf("params are not valid JSON: %w", err)
}

// The helpers below walk JSON that json.Valid accepted: every string is
// closed, every bracket matched, so they need not check for the end of
// the input.

// skipSpace returns the index of the first byte at or after i that is not
// JSON white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string that opens at i.
func stringEnd(b []byte, i int) int {
	for i++; b[i] != '"'; i++ {
		if b[i] == '\\' {
			i++
		}
	}
	return i + 1
}

// valueEnd returns the index just past the value that starts at i.
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for {
			switch b[i] {
			case '"':
				i = stringEnd(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
	}
	for i < len(b) && !strings.ContainsRune(", \t\n\r}]", rune(b[i])) {
		i++
	}
	return i
}

// unquote returns the text of a JSON string: its bytes between the quotes
// when it has no escape, else the decoded text.
func unquote(q []byte) (string, error) {
	if bytes.IndexByte(q, '\\') < 0 {
		return string(q[1 : len(q)-1]), nil
	}
	var s string
	err := json.Unmarshal(q, &s)
	return s, err
}

// scalarText returns the text a scalar JSON value has in a path or a
// query: a string's value, a number's JSON text, true or false. ok is
// false for null, and err is set for an object or an array.
func scalarText(v json.RawMessage) (text string, ok bool, err error) {
	switch v[0] {
	case '"':
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return "", false, err
		}
		return s, true, nil
	case 'n':
		return "", false, nil
	case '{', '[':
		return "", false, errors.New("an object or an array has no text form")
	}
	return string(v), true, nil
}

// queryValues returns the values a parameter puts in a query: one for a
// scalar, one per element for an array of scalars, none for null (and for
// a null element).
func queryValues(v json.RawMessage) ([]string, error) {
	if v[0] != '[' {
		s, ok, err := scalarText(v)
		if err != nil || !ok {
			return nil, err
		}
		return []string{s}, nil
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(v, &elems); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(elems))
	for _, e := range elems {
		s, ok, err := scalarText(e)
		if err != nil {
			return nil, errors.New("an array of objects or arrays has no query form")
		}
		if ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// decodeArgs reads a write's Args: a JSON array of at most MaxArgs
// scalars, at most MaxArgsBytes of valid UTF-8, into driver values: a
// string is a string, true and false a bool, null nil, a number written
// without fraction or exponent an int64 (refused outside its range), any
// other number a float64. Empty args are no arguments.
func decodeArgs(raw json.RawMessage) ([]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	if len(raw) > MaxArgsBytes {
		return nil, fmt.Errorf("args are %d bytes, over the limit of %d", len(raw), MaxArgsBytes)
	}
	if !utf8.Valid(raw) {
		return nil, errors.New("args are not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return nil, errors.New("args are not a JSON array")
	}
	out := []any{}
	for dec.More() {
		if len(out) == MaxArgs {
			return nil, fmt.Errorf("args hold more than %d values", MaxArgs)
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("args are not valid JSON: %w", err)
		}
		switch v := tok.(type) {
		case json.Delim:
			return nil, fmt.Errorf("args[%d] is an object or an array: args are strings, numbers, booleans and nulls", len(out))
		case json.Number:
			n, err := number(v)
			if err != nil {
				return nil, fmt.Errorf("args[%d]: %w", len(out), err)
			}
			out = append(out, n)
		default: // string, bool, nil
			out = append(out, v)
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("args are not valid JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("args hold something after the JSON array")
	}
	return out, nil
}

func number(n json.Number) (any, error) {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("the integer %.40s is outside the range of a 64-bit integer", s)
		}
		return i, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, fmt.Errorf("the number %.40s is outside the range of a 64-bit float", s)
	}
	return f, nil
}
