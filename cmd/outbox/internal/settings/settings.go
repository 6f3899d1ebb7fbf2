// Package settings declares the settings of a command's configuration and
// loads them. Each setting is declared once, as a Setting: its YAML key, its
// environment variable, its flag, its one-line doc, and the field of the
// component's own configuration struct it sets (core.Config,
// sqlstore.Config, ...). Its default is that field's value in the Schema's
// defaults.
//
// Load builds a configuration from the defaults, a YAML file, the
// environment and the flags, each overriding the one before, then validates
// it. Every broken rule comes back as a *SettingError naming the setting's
// key and where its value came from (FILE:LINE, env NAME, flag -name).
// Components validate their own structs and report *ports.FieldError with
// their Go field names; Fields maps those to the settings' keys.
package settings

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Setting is one setting of a configuration C.
type Setting[C any] struct {
	// Key is the setting's YAML path: "outbox.claim_lease", "lists".
	Key string
	// Env is its environment variable; "" when only the file sets it.
	Env string
	// Flag is its flag name without the dash; "" when there is none.
	Flag string
	// Doc says in one line what it does; the flag's usage, and the line
	// configs/README.md must give the setting.
	Doc string
	// Bind returns a pointer to the field of c the setting sets. A scalar
	// setting binds a *string, *int, *uint32, *bool, *float64,
	// *time.Duration, *[]string or *[]netip.Prefix (IP addresses and CIDR
	// ranges) — the lists comma-separated in the environment and flags; any other
	// field is a record (a list of entries, a map, a struct of files) that
	// only the file sets, decoded by its yaml struct tags.
	Bind func(c *C) any
}

// Scalar reports whether the setting holds a single value (or a list of
// strings) rather than a record.
func (s Setting[C]) Scalar() bool {
	var c C
	switch s.Bind(&c).(type) {
	case *string, *int, *uint32, *bool, *float64, *time.Duration, *[]string, *[]netip.Prefix:
		return true
	}
	return false
}

// Default returns the setting's value in defaults, written as in a file:
// "" for an empty string, list or record.
func (s Setting[C]) Default(defaults C) string {
	switch p := s.Bind(&defaults).(type) {
	case *string:
		return *p
	case *int, *uint32:
		return fmt.Sprint(reflect.ValueOf(p).Elem().Interface())
	case *bool:
		return fmt.Sprint(*p)
	case *float64:
		return strconv.FormatFloat(*p, 'f', -1, 64)
	case *time.Duration:
		return FormatDuration(*p)
	case *[]string:
		return strings.Join(*p, ", ")
	case *[]netip.Prefix:
		items := make([]string, len(*p))
		for i, pr := range *p {
			items[i] = pr.String()
		}
		return strings.Join(items, ", ")
	}
	return ""
}

// FormatDuration writes d as an operator would: "10s", "5m", "8760h",
// "1h30m", without the zero units time.Duration.String adds.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// SettingError is one broken rule: the setting's key (its YAML path, e.g.
// store.driver or lists[1].type), what is wrong, and where the value came
// from when known (a file and line, an environment variable, a flag).
type SettingError struct {
	Key    string
	Msg    string
	Source string

	// Related is the key of another setting the rule depends on; its
	// source is shown when Key itself was not set.
	Related string
}

// Error implements error.
func (e *SettingError) Error() string {
	s := e.Key + ": " + e.Msg
	if e.Source != "" {
		s += " [" + e.Source + "]"
	}
	return s
}

// Rules collects SettingErrors.
type Rules []error

// Add adds a broken rule on key.
func (r *Rules) Add(key, format string, args ...any) {
	*r = append(*r, &SettingError{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// AddRelated adds a broken rule on key that another setting, related,
// brought in.
func (r *Rules) AddRelated(key, related, format string, args ...any) {
	*r = append(*r, &SettingError{Key: key, Msg: fmt.Sprintf(format, args...), Related: related})
}

// Err returns the rules joined, or nil.
func (r Rules) Err() error { return errors.Join(r...) }

// Unjoin returns the errors joined in err, or err alone.
func Unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, Unjoin(e)...)
		}
		return out
	}
	// Look through one layer of %w wrapping (as memdir's errors carry).
	if u := errors.Unwrap(err); u != nil {
		if _, ok := u.(interface{ Unwrap() []error }); ok {
			return Unjoin(u)
		}
	}
	return []error{err}
}

// goPaths returns, for each setting, the Go path within C of the field it
// binds ("Outbox.ClaimLease"), found by the field's address and type.
func goPaths[C any](list []Setting[C]) map[string]string {
	type field struct {
		addr uintptr
		typ  reflect.Type
	}
	var c C
	fields := map[field]string{}
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		if path != "" {
			fields[field{v.Addr().Pointer(), v.Type()}] = path
		}
		if v.Kind() != reflect.Struct {
			return
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			p := f.Name
			if path != "" {
				p = path + "." + f.Name
			}
			walk(v.Field(i), p)
		}
	}
	walk(reflect.ValueOf(&c).Elem(), "")
	out := map[string]string{}
	for _, s := range list {
		v := reflect.ValueOf(s.Bind(&c))
		if p, ok := fields[field{v.Pointer(), v.Type().Elem()}]; ok {
			out[p] = s.Key
		}
	}
	return out
}
