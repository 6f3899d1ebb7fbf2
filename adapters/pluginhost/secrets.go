package pluginhost

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/siteline/outbox/ports"
)

// errUnresolved marks a secret reference that could not be resolved.
var errUnresolved = errors.New("secret reference not resolved")

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
			return "", fmt.Errorf("%w: environment variable %s is not set", errUnresolved, name)
		}
		return s, nil
	}
	path := strings.TrimPrefix(v, "file:")
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", fmt.Errorf("%w: read file %s: %v", errUnresolved, path, err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// resolveDelivery resolves every reference among settings and targets into
// fresh copies.
func resolveDelivery(settings map[string]string, targets []string) (map[string]string, []string, error) {
	s := make(map[string]string, len(settings))
	for k, v := range settings {
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
