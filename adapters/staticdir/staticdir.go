// Package staticdir is a [ports.Directory] built once from configuration: the
// lists and channel settings of a configuration file. It never changes after
// New; the database-backed directory managed through the API replaces it
// later.
package staticdir

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/siteline/outbox/ports"
)

var _ ports.Directory = (*Directory)(nil)

// Directory resolves lists and channel settings from a fixed set. It is safe
// for concurrent use: nothing changes after New, and every lookup returns a
// copy.
type Directory struct {
	lists    map[string]ports.List
	channels map[string]ports.ChannelSettings
}

// FieldError is one broken rule of the configuration given to New. Field is a
// path into that configuration in the form lists[1].type or
// channels[0].retry.backoff (indexes start at 0), so that a caller reading a
// configuration file can point at the setting. It wraps ports.ErrInvalid.
type FieldError struct {
	Field string
	Msg   string
}

// Error implements error.
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// Unwrap returns ports.ErrInvalid.
func (e *FieldError) Unwrap() error { return ports.ErrInvalid }

// New checks lists and channels and builds a Directory from them. It refuses,
// with one *FieldError per broken rule (joined with errors.Join):
//   - a list with an empty name, or a name with leading or trailing spaces;
//   - two lists with the same name;
//   - a list without a type, or with a blank target;
//   - a channel without a type, or two channels with the same type;
//   - an unknown retry backoff, a negative retry setting or rate limit, and an
//     exponential max_interval below its interval;
//   - a secret setting (a key naming a password, secret, token, API key or
//     credential) whose value is not a reference (env:NAME or file:/path),
//     since secrets are never kept in clear.
//
// A list whose type has no channel settings is accepted: the core then uses
// the default retry policy and empty settings.
func New(lists []ports.List, channels []ports.ChannelSettings) (*Directory, error) {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}

	d := &Directory{
		lists:    make(map[string]ports.List, len(lists)),
		channels: make(map[string]ports.ChannelSettings, len(channels)),
	}
	firstList := map[string]int{}
	for i, l := range lists {
		at := fmt.Sprintf("lists[%d]", i)
		checkKey(bad, firstList, "lists", i, "name", l.Name, "every list needs a name", "list name")
		if strings.TrimSpace(l.Type) == "" {
			bad(at+".type", "empty (list %q needs a channel type such as email)", l.Name)
		}
		for k, t := range l.Targets {
			if strings.TrimSpace(t) == "" {
				bad(fmt.Sprintf("%s.targets[%d]", at, k), "empty target in list %q", l.Name)
			}
		}
		if _, dup := d.lists[l.Name]; !dup {
			d.lists[l.Name] = copyList(l)
		}
	}

	firstChannel := map[string]int{}
	for i, c := range channels {
		at := fmt.Sprintf("channels[%d]", i)
		checkKey(bad, firstChannel, "channels", i, "type", c.Type, "every channel needs a type such as email", "channel type")
		r := c.Retry
		switch r.Backoff {
		case "", ports.BackoffFixed, ports.BackoffExponential:
		default:
			bad(at+".retry.backoff", "unknown backoff %q (want %s or %s)", r.Backoff, ports.BackoffFixed, ports.BackoffExponential)
		}
		if r.MaxRetries < 0 {
			bad(at+".retry.max_retries", "must not be negative, got %d", r.MaxRetries)
		}
		if r.Interval < 0 {
			bad(at+".retry.interval", "must not be negative, got %s", r.Interval)
		}
		if r.MaxInterval < 0 {
			bad(at+".retry.max_interval", "must not be negative, got %s", r.MaxInterval)
		}
		if r.Backoff == ports.BackoffExponential && r.MaxInterval > 0 && r.Interval > 0 && r.MaxInterval < r.Interval {
			bad(at+".retry.max_interval", "%s is below retry.interval %s", r.MaxInterval, r.Interval)
		}
		if c.RateLimit < 0 || math.IsNaN(c.RateLimit) || math.IsInf(c.RateLimit, 0) {
			bad(at+".rate_limit", "must be a finite number of deliveries per second, 0 or more (0 means unlimited), got %v", c.RateLimit)
		}
		for _, k := range slices.Sorted(maps.Keys(c.Settings)) {
			if strings.TrimSpace(k) == "" {
				bad(at+".settings", "empty setting name")
				continue
			}
			if IsSecretKey(k) && c.Settings[k] != "" && !IsSecretRef(c.Settings[k]) {
				// The value is never repeated: it is a secret.
				bad(at+".settings."+k, "secret values must be references (env:NAME or file:/path), not clear text")
			}
		}
		if _, dup := d.channels[c.Type]; !dup {
			d.channels[c.Type] = copyChannel(c)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return d, nil
}

// List implements ports.Directory.
func (d *Directory) List(_ context.Context, name string) (ports.List, error) {
	l, ok := d.lists[name]
	if !ok {
		return ports.List{}, fmt.Errorf("list %q: %w", name, ports.ErrNotFound)
	}
	return copyList(l), nil
}

// ChannelSettings implements ports.Directory.
func (d *Directory) ChannelSettings(_ context.Context, typ string) (ports.ChannelSettings, error) {
	c, ok := d.channels[typ]
	if !ok {
		return ports.ChannelSettings{}, fmt.Errorf("channel settings for type %q: %w", typ, ports.ErrNotFound)
	}
	return copyChannel(c), nil
}

// checkKey checks the key field of entry i of a section (a list's name, a
// channel's type): not empty, no surrounding spaces, not a duplicate of an
// earlier entry, whose index first remembers.
func checkKey(bad func(field, format string, args ...any), first map[string]int,
	section string, i int, field, v, why, what string) {
	at := fmt.Sprintf("%s[%d].%s", section, i, field)
	switch {
	case strings.TrimSpace(v) == "":
		bad(at, "empty (%s)", why)
	case strings.TrimSpace(v) != v:
		bad(at, "%q has leading or trailing spaces", v)
	default:
		if j, dup := first[v]; dup {
			bad(at, "duplicate %s %q (also %s[%d])", what, v, section, j)
		} else {
			first[v] = i
		}
	}
}

// Lists returns the names of the configured lists, sorted.
func (d *Directory) Lists() []string { return slices.Sorted(maps.Keys(d.lists)) }

// Channels returns the configured channel types, sorted.
func (d *Directory) Channels() []string { return slices.Sorted(maps.Keys(d.channels)) }

// secretWords are the fragments of a setting name that mark its value as a
// secret.
var secretWords = []string{"password", "passwd", "secret", "token", "apikey", "api_key", "api-key", "credential", "private_key"}

// IsSecretKey reports whether a channel setting named key holds a secret
// (password, secret, token, API key, credential), ignoring case. A key naming
// an address (ending in url, uri or endpoint, as token_url) is not a secret.
func IsSecretKey(key string) bool {
	k := strings.ToLower(key)
	for _, s := range []string{"url", "uri", "endpoint"} {
		if strings.HasSuffix(k, s) {
			return false
		}
	}
	for _, w := range secretWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// IsSecretRef reports whether v is a secret reference a channel resolves
// itself: env:NAME or file:/path, with a non-empty name or path.
func IsSecretRef(v string) bool {
	for _, p := range []string{"env:", "file:"} {
		if rest, ok := strings.CutPrefix(v, p); ok && strings.TrimSpace(rest) != "" {
			return true
		}
	}
	return false
}

func copyList(l ports.List) ports.List {
	l.Targets = slices.Clone(l.Targets)
	return l
}

func copyChannel(c ports.ChannelSettings) ports.ChannelSettings {
	c.Settings = maps.Clone(c.Settings)
	return c
}
