// Package secretref resolves secret references: a setting written as
// env:NAME takes the value of an environment variable, file:/path the
// content of a file (without its trailing newline), so that no secret needs
// to sit in a configuration file. Errors name the variable or the file,
// never a value.
package secretref

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/siteline/outbox/ports"
)

// ErrUnresolvable marks a reference that cannot resolve until someone
// changes the configuration: an unset variable, a missing or unreadable
// file. Other failures (an I/O error) may pass.
var ErrUnresolvable = errors.New("secret reference cannot be resolved")

// Resolve returns v, or the value it refers to when it is a reference:
// env:NAME reads an environment variable, file:/path a file (without its
// trailing newline). Errors name the variable or file, never a value.
func Resolve(v string) (string, error) {
	if !ports.IsSecretRef(v) {
		return v, nil
	}
	if name, ok := strings.CutPrefix(v, "env:"); ok {
		s, ok := os.LookupEnv(name)
		if !ok {
			return "", fmt.Errorf("%w: environment variable %s is not set", ErrUnresolvable, name)
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
			return "", fmt.Errorf("%w: read file %s: %v", ErrUnresolvable, path, err)
		}
		return "", fmt.Errorf("read secret file %s: %v", path, err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
