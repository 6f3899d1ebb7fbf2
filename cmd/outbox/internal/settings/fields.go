package settings

import (
	"errors"
	"reflect"
	"regexp"
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

// RecordFields places the errors of a component's Validate whose struct
// the file sets as record settings (lists of entries decoded by their yaml
// tags): keys maps the struct's top-level Go field names to the record
// settings' keys ("Systems" → "external_systems"), and root is the
// struct's type. A *ports.FieldError on "Systems[0].Methods[1].Path" comes
// back as a *SettingError on "external_systems[0].methods[1].path", each
// Go field name written as its yaml tag; a name the type does not have is
// kept. In the message, a Go path from the root ("Systems[0]") and the name
// of a field beside the one in error ("AllowInsecure") are written as keys
// too. Other errors pass as they are.
func RecordFields(keys map[string]string, root reflect.Type, err error) error {
	if err == nil {
		return nil
	}
	var out []error
	for _, e := range Unjoin(err) {
		var fe *ports.FieldError
		if errors.As(e, &fe) {
			key, _ := yamlPath(keys, root, fe.Field)
			parent := ""
			if i := strings.LastIndexByte(fe.Field, '.'); i >= 0 {
				parent = fe.Field[:i+1]
			}
			msg := goPathWord.ReplaceAllStringFunc(fe.Msg, func(w string) string {
				if k, ok := yamlPath(keys, root, w); ok {
					return k
				}
				if k, ok := yamlPath(keys, root, parent+w); ok && parent != "" {
					return k
				}
				return w
			})
			e = &SettingError{Key: key, Msg: msg}
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

// goPathWord is a Go field path in a message: "AllowInsecure",
// "Systems[0]", "Systems[0].Methods[1].Path".
var goPathWord = regexp.MustCompile(`\b[A-Z][A-Za-z0-9]*(\[\d+\])?(\.[A-Z][A-Za-z0-9]*(\[\d+\])?)*`)

// yamlPath writes a Go field path within root as the file's keys, and
// reports whether every name in it is a field (the first one a key of
// keys).
func yamlPath(keys map[string]string, root reflect.Type, path string) (string, bool) {
	var b strings.Builder
	t, found := root, true
	for i, seg := range strings.Split(path, ".") {
		name, index, _ := strings.Cut(seg, "[")
		if index != "" {
			index = "[" + index
		}
		out := name
		for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map) {
			t = t.Elem()
		}
		if f, ok := fieldOf(t, name); ok {
			if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag != "" && tag != "-" {
				out = tag
			}
			t = f.Type
		} else {
			t, found = nil, false
		}
		if i == 0 {
			k, ok := keys[name]
			out, found = k, found && ok
		} else {
			b.WriteByte('.')
		}
		b.WriteString(out + index)
		if index != "" && t != nil {
			// The index steps into the element type.
			for t.Kind() == reflect.Pointer {
				t = t.Elem()
			}
			if t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Array {
				t = t.Elem()
			}
		}
	}
	return b.String(), found
}

// fieldOf returns t's field name when t is a struct that has it.
func fieldOf(t reflect.Type, name string) (reflect.StructField, bool) {
	if t == nil || t.Kind() != reflect.Struct {
		return reflect.StructField{}, false
	}
	return t.FieldByName(name)
}
