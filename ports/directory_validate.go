package ports

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// MaxDirectoryNameBytes bounds a list's name and a channel type, in bytes:
// the bound ingest puts on the list and type of a submission.
const MaxDirectoryNameBytes = 200

// FieldError is one broken rule of a List or ChannelSettings. Field is a path
// into the value, such as name, targets[1], retry.backoff or
// settings.password, so that a caller holding the value at a path of its own
// can point at the setting (see PrefixFields: lists[3].targets[1]). Msg says
// what is wrong; it never repeats a target or a setting's value. A FieldError
// wraps ErrInvalid.
type FieldError struct {
	Field string
	Msg   string
}

// Error implements error.
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap returns ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// PrefixFields returns err with prefix and a dot put before the Field of each
// *FieldError that err is or joins (as Validate returns them): with prefix
// "lists[3]", "targets[1]" becomes "lists[3].targets[1]". Other errors are
// kept as they are, and nil stays nil.
func PrefixFields(prefix string, err error) error {
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		if fe, ok := err.(*FieldError); ok {
			return &FieldError{Field: prefix + "." + fe.Field, Msg: fe.Msg}
		}
		return err
	}
	in := j.Unwrap()
	out := make([]error, 0, len(in))
	for _, e := range in {
		out = append(out, PrefixFields(prefix, e))
	}
	return errors.Join(out...)
}

// FieldErrors collects the broken rules of one value, as a Validate method
// returns them.
type FieldErrors []error

// Add adds a broken rule on field (its Go name, "Conns.Total" for a nested
// one).
func (fe *FieldErrors) Add(field, format string, args ...any) {
	*fe = append(*fe, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

// Nest adds the errors of a nested value's Validate, one by one, their
// fields put under field (PrefixFields).
func (fe *FieldErrors) Nest(field string, err error) {
	if err == nil {
		return
	}
	err = PrefixFields(field, err)
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		*fe = append(*fe, j.Unwrap()...)
		return
	}
	*fe = append(*fe, err)
}

// Err returns the rules joined, or nil.
func (fe FieldErrors) Err() error { return errors.Join(fe...) }

// checkName checks the key of a list or channel (its name, its type): not
// empty (why says what it is for), not "." or ".." (a path segment that
// URLs normalise away), no leading or trailing spaces, at most
// MaxDirectoryNameBytes bytes of UTF-8 text without NUL bytes.
func (fe *FieldErrors) checkName(field, v, why string) {
	switch {
	case strings.TrimSpace(v) == "":
		fe.Add(field, "empty (%s)", why)
	case v == "." || v == "..":
		fe.Add(field, "%q is not a name: URLs cannot name it", v)
	case !utf8.ValidString(v):
		fe.Add(field, "%q is not valid UTF-8", v)
	case strings.IndexByte(v, 0) >= 0:
		fe.Add(field, "%q holds a NUL byte", v)
	case strings.TrimSpace(v) != v:
		fe.Add(field, "%q has leading or trailing spaces", v)
	case len(v) > MaxDirectoryNameBytes:
		fe.Add(field, "is %d bytes, over the limit of %d", len(v), MaxDirectoryNameBytes)
	}
}

// Validate reports every rule l breaks, one *FieldError each (joined with
// errors.Join), or nil:
//   - the name is empty, is "." or "..", has leading or trailing spaces, is over
//     MaxDirectoryNameBytes bytes, is not UTF-8 or holds a NUL byte;
//   - the type (the channel type that delivers to the list) breaks the same
//     rules;
//   - a target is blank, not valid UTF-8 or holds a NUL byte, or starts like
//     a reference (env: or file:) but names nothing.
//
// A list without targets is valid, and so is a target that is a reference
// (env:NAME or file:/path). Messages never repeat a target: targets are
// addresses and URLs that may carry tokens.
func (l List) Validate() error {
	var fe FieldErrors
	fe.checkName("name", l.Name, "every list needs a name")
	fe.checkName("type", l.Type, fmt.Sprintf("list %q needs a channel type such as email", l.Name))
	for k, t := range l.Targets {
		at := fmt.Sprintf("targets[%d]", k)
		switch {
		case strings.TrimSpace(t) == "":
			fe.Add(at, "empty target in list %q", l.Name)
		case !utf8.ValidString(t):
			fe.Add(at, "target of list %q is not valid UTF-8", l.Name)
		case strings.IndexByte(t, 0) >= 0:
			fe.Add(at, "target of list %q holds a NUL byte", l.Name)
		case looksLikeRef(t) && !IsSecretRef(t):
			fe.Add(at, "reference in list %q names nothing (want env:NAME or file:/path)", l.Name)
		}
	}
	return fe.Err()
}

// Validate reports every rule c breaks, one *FieldError each (joined with
// errors.Join), or nil:
//   - the type is empty, is "." or "..", has leading or trailing spaces, is over
//     MaxDirectoryNameBytes bytes, is not UTF-8 or holds a NUL byte;
//   - the retry backoff is neither empty, fixed nor exponential; a retry
//     setting is negative; an interval is not a whole number of
//     milliseconds; an exponential max_interval is below its interval;
//   - the rate limit is negative, infinite or not a number;
//   - a setting has an empty name, or a name or value that is not UTF-8;
//   - a secret setting (IsSecretKey: a key naming a password, secret,
//     token, API key or credential) has a value that is neither empty nor a
//     reference (env:NAME or file:/path): secrets are never kept in clear.
//
// Messages never repeat a setting's value.
func (c ChannelSettings) Validate() error {
	var fe FieldErrors
	fe.checkName("type", c.Type, "every channel needs a type such as email")
	r := c.Retry
	switch r.Backoff {
	case "", BackoffFixed, BackoffExponential:
	default:
		fe.Add("retry.backoff", "unknown backoff %q (want %s or %s)", r.Backoff, BackoffFixed, BackoffExponential)
	}
	if r.MaxRetries < 0 {
		fe.Add("retry.max_retries", "must not be negative, got %d", r.MaxRetries)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"retry.interval", r.Interval}, {"retry.max_interval", r.MaxInterval}} {
		switch {
		case d.v < 0:
			fe.Add(d.field, "must not be negative, got %s", d.v)
		case d.v%time.Millisecond != 0:
			fe.Add(d.field, "%s is not a whole number of milliseconds", d.v)
		}
	}
	if r.Backoff == BackoffExponential && r.MaxInterval > 0 && r.Interval > 0 && r.MaxInterval < r.Interval {
		fe.Add("retry.max_interval", "%s is below retry.interval %s", r.MaxInterval, r.Interval)
	}
	if c.RateLimit < 0 || math.IsNaN(c.RateLimit) || math.IsInf(c.RateLimit, 0) {
		fe.Add("rate_limit", "must be a finite number of deliveries per second, 0 or more (0 means unlimited), got %v", c.RateLimit)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Settings)) {
		v := c.Settings[k]
		switch {
		case strings.TrimSpace(k) == "":
			fe.Add("settings", "empty setting name")
		case !utf8.ValidString(k):
			fe.Add("settings", "setting name %q is not valid UTF-8", k)
		case !utf8.ValidString(v):
			// The value is never repeated: it may be a secret.
			fe.Add("settings."+k, "value is not valid UTF-8")
		case IsSecretKey(k) && v != "" && !IsSecretRef(v):
			fe.Add("settings."+k, "secret values must be references (env:NAME or file:/path), not clear text")
		}
	}
	return fe.Err()
}
