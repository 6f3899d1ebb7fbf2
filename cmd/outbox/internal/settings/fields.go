package settings

import (
	"errors"
	"strings"
	"unicode"

	"github.com/siteline/outbox/ports"
)

// fieldError is a component's *ports.FieldError placed in the
// configuration: the Go path of the component's struct within C.
type fieldError struct {
	path string // "Outbox"
	fe   *ports.FieldError
}

func (e *fieldError) Error() string { return e.path + "." + e.fe.Error() }
func (e *fieldError) Unwrap() error { return e.fe }

// Fields places the errors a component's Validate returned: path is the
// Go path of the component's struct within the configuration ("Outbox"
// for Config.Outbox). Each *ports.FieldError it joins is reported on the
// key of the setting that binds its field, and the other fields of the
// same struct its message names (by their Go names) are written as their
// keys too (a nested field's siblings first); the first of those is the rule's related setting, whose
// source is shown when the field itself was not set. Other errors pass
// as they are.
func Fields(path string, err error) error {
	if err == nil {
		return nil
	}
	var out []error
	for _, e := range Unjoin(err) {
		var fe *ports.FieldError
		if errors.As(e, &fe) {
			e = &fieldError{path: path, fe: fe}
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

// place returns the error as a *SettingError on the keys of paths (Go path
// → key); a field no setting binds keeps its Go path.
func (e *fieldError) place(paths map[string]string) error {
	full := e.path + "." + e.fe.Field
	key, ok := paths[full]
	if !ok {
		key = full
	}
	se := &SettingError{Key: key}
	// Rewrite the Go names of the struct's other fields, whole words only:
	// a field's siblings first (for "Conns.Total", those of Conns), then
	// the component's own fields.
	name, parent := e.fe.Field, ""
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		parent, name = "."+name[:i], name[i+1:]
	}
	lookup := func(word string) (string, bool) {
		if k, ok := paths[e.path+parent+"."+word]; ok {
			return k, true
		}
		k, ok := paths[e.path+"."+word]
		return k, ok
	}
	var b strings.Builder
	msg := e.fe.Msg
	for i := 0; i < len(msg); {
		j := i
		for j < len(msg) && isIdent(rune(msg[j])) {
			j++
		}
		if j == i {
			b.WriteByte(msg[i])
			i++
			continue
		}
		word := msg[i:j]
		if k, ok := lookup(word); ok && word != name && unicode.IsUpper(rune(word[0])) {
			b.WriteString(k)
			if se.Related == "" {
				se.Related = k
			}
		} else {
			b.WriteString(word)
		}
		i = j
	}
	se.Msg = b.String()
	return se
}

func isIdent(r rune) bool {
	return r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}
