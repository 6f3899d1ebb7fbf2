package pluginhost

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/siteline/outbox/ports"
)

// errUnresolvable marks a reference that cannot resolve until someone
// changes the configuration: an unset variable, a missing or unreadable
// file. Other failures (an I/O error) may pass.
var errUnresolvable = errors.New("secret reference cannot be resolved")

// resolve returns v, or the value it refers to when it is a reference:
// env:NAME reads an environment variable, file:/path a file (without its
// trailing newline). Errors name the variable or file, never a value.
func resolve(v string) (string, error) {
	if !ports.IsSecretRef(v) {
		return v, nil
	}
	if name, ok := strings.CutPrefix(v, "env:"); ok {
		s, ok := os.LookupEnv(name)
		if !ok {
			return "", fmt.Errorf("%w: environment variable %s is not set", errUnresolvable, name)
		}
		return s, nil
	}
	path := strings.TrimPrefix(v, "file:")
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrInvalid) {
			return "", fmt.Errorf("%w: read file %s: %v", errUnresolvable, path, err)
		}
		return "", fmt.Errorf("read secret file %s: %v", path, err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// resolveDelivery resolves, into fresh copies, the references among the
// targets and among the settings secret names (every setting when secret is
// nil: the plugin has no schema). A reference in a setting that is not
// secret is passed on as written: a channel setting such as "from" never
// reads central's environment or files.
func resolveDelivery(secret map[string]bool, settings map[string]string, targets []string) (map[string]string, []string, error) {
	s := make(map[string]string, len(settings))
	for k, v := range settings {
		if secret != nil && !secret[k] {
			s[k] = v
			continue
		}
		r, err := resolve(v)
		if err != nil {
			return nil, nil, fmt.Errorf("setting %s: %w", k, err)
		}
		s[k] = r
	}
	t := make([]string, len(targets))
	for i, v := range targets {
		r, err := resolve(v)
		if err != nil {
			return nil, nil, fmt.Errorf("target %d: %w", i+1, err)
		}
		t[i] = r
	}
	return s, t, nil
}
