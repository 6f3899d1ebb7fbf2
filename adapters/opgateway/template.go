package opgateway

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// template is a parsed path template: literal parts and placeholders in
// turn, parts[0] literal, then name, literal, name, literal…
type template struct {
	parts []string
	names []string
}

// parseTemplate parses a method's path: it starts with "/", its literal
// parts are valid unescaped path text (no "?", "#", "%", space or control
// character), and each placeholder is {name} with name made of letters,
// digits and _, not starting with a digit, each name at most once.
func parseTemplate(path string) (template, error) {
	var t template
	switch {
	case path == "":
		return t, errors.New("empty: the method's path, such as /orders/{id}")
	case path[0] != '/':
		return t, errors.New("must start with /")
	case len(path) > maxPathBytes:
		return t, fmt.Errorf("is %d bytes, over the limit of %d", len(path), maxPathBytes)
	}
	rest := path
	for {
		open := strings.IndexByte(rest, '{')
		lit := rest
		if open >= 0 {
			lit = rest[:open]
		}
		if err := checkLiteral(lit); err != nil {
			return template{}, err
		}
		t.parts = append(t.parts, lit)
		if open < 0 {
			return t, nil
		}
		rest = rest[open+1:]
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return template{}, errors.New("a { is not closed")
		}
		name := rest[:end]
		if !isParamName(name) {
			return template{}, fmt.Errorf("placeholder {%s}: a name is letters, digits and _, not starting with a digit", name)
		}
		for _, n := range t.names {
			if n == name {
				return template{}, fmt.Errorf("placeholder {%s} appears twice", name)
			}
		}
		t.names = append(t.names, name)
		rest = rest[end+1:]
	}
}

func checkLiteral(s string) error {
	for _, c := range []byte(s) {
		switch {
		case c == '}':
			return errors.New("a } without its {")
		case c == '?' || c == '#':
			return errors.New("holds a query or a fragment: the call's parameters make the query")
		case c == '%':
			return errors.New("holds a %: write the path unescaped")
		case c <= ' ' || c == 0x7f:
			return errors.New("holds a space or a control character")
		case c >= 0x80:
			return errors.New("holds a byte outside ASCII")
		}
	}
	return nil
}

func isParamName(s string) bool {
	if s == "" || len(s) > MaxNameBytes {
		return false
	}
	for i, c := range []byte(s) {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// fill returns the escaped path with each placeholder replaced by its
// value, path-escaped (a "/" in a value is %2F: a value never adds a
// segment). values must hold every name; a value that is empty, "." or
// ".." is refused, since it would change which resource the path names.
func (t template) fill(values map[string]string) (string, error) {
	var b strings.Builder
	b.WriteString(t.parts[0])
	for i, name := range t.names {
		v, ok := values[name]
		switch {
		case !ok:
			return "", fmt.Errorf("path parameter %s is missing", name)
		case v == "" || v == "." || v == "..":
			return "", fmt.Errorf("path parameter %s is empty, \".\" or \"..\" (it would name another resource)", name)
		}
		b.WriteString(url.PathEscape(v))
		b.WriteString(t.parts[i+1])
	}
	return b.String(), nil
}
