// Package secretref resolves secret references: a setting written as
// env:NAME takes the value of an environment variable, file:PATH the
// content of a file (without its trailing newline), so that no secret needs
// to sit in a configuration file or in the database. Errors name the
// variable or the file, never a value.
//
// What a reference may read is a Policy. The references of the directory
// (channel settings and list targets, which admins change through the API)
// resolve only inside what the operator allowed in the configuration file:
// files inside the directories secrets.dirs names, variables whose names
// start with secrets.env_prefix. The configuration's own references (the
// site link's tokens, the admin's password) are the operator's and resolve
// under the policy Own, which limits nothing.
package secretref

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/siteline/outbox/ports"
)

// ErrUnresolvable marks a reference that cannot resolve until someone
// changes the configuration: an unset variable, a missing or unreadable
// file. Other failures (an I/O error) may pass.
var ErrUnresolvable = errors.New("secret reference cannot be resolved")

// ErrNotAllowed marks a reference its policy refuses: a file outside the
// allowed directories (after cleaning the path and after following its
// symbolic links), a variable without the allowed prefix. Like
// ErrUnresolvable, it lasts until the configuration or the reference
// changes.
var ErrNotAllowed = errors.New("secret reference not allowed")

// RefError is a reference refused or not resolved. Its Error names the
// reference as written and the rule it breaks, never what central found
// resolving it (the absolute path, where a symbolic link leads, a process
// id under /proc), since it reaches admins through the API and viewers
// through a notification's error; Detail adds those for the operator's
// start-up errors and logs. It wraps ErrNotAllowed or ErrUnresolvable.
type RefError struct {
	// Ref is the reference as written.
	Ref string
	// Rule says what is wrong, in the reference's own terms.
	Rule string
	// Found is what central found resolving it, or "".
	Found string
	kind  error
}

func (e *RefError) Error() string { return e.Ref + ": " + e.Rule + ": " + e.kind.Error() }

// Unwrap returns ErrNotAllowed or ErrUnresolvable.
func (e *RefError) Unwrap() error { return e.kind }

// Detail returns err's message with what central found resolving the
// reference when err holds a *RefError: for the operator, who may see
// central's paths (start-up setting errors, central's log), never for the
// API or a notification's error.
func Detail(err error) string {
	var re *RefError
	if errors.As(err, &re) && re.Found != "" {
		return err.Error() + " (" + re.Found + ")"
	}
	return err.Error()
}

// MaxFileBytes bounds the content of a file a reference reads: a secret is
// a password, a token or a key, never megabytes.
const MaxFileBytes = 1 << 20

// DefaultEnvPrefix is the prefix of the variables env: references of the
// directory may read unless the configuration says otherwise. No variable
// central reads for its own settings starts with it.
const DefaultEnvPrefix = "OUTBOX_SECRET_"

// Policy says what secret references may read, and where relative paths
// start. The zero Policy refuses every reference.
type Policy struct {
	// Base is the directory a relative file: path (and a relative entry
	// of Dirs) resolves against: the configuration file's directory.
	// Empty is the working directory.
	Base string
	// Dirs are the directories file: references may read, each with
	// everything below it. A path must be inside one of them once cleaned
	// (no .. leads out) and once its symbolic links are followed (no link
	// leads out). No Dirs: no file: reference resolves.
	Dirs []string
	// EnvPrefix is the prefix of the environment variables env:
	// references may read. Empty: no env: reference resolves (an empty
	// prefix never means every variable).
	EnvPrefix string
	// Unlimited lifts the limits of Dirs and EnvPrefix: any file and any
	// variable central can read. It is for the configuration's own
	// references, which only the operator writes (see Own).
	Unlimited bool
}

// Own is the policy of the configuration's own references: relative paths
// against base (the configuration file's directory; empty is the working
// directory), any file and variable.
func Own(base string) Policy { return Policy{Base: base, Unlimited: true} }

// Resolve returns v, or the value it refers to when it is a reference,
// reading whatever the process can read, relative paths against the working
// directory. It is for references an operator gives on the command line of
// a client (a token for the CLI); central uses a Policy.
func Resolve(v string) (string, error) { return Own("").Resolve(v) }

// Check returns nil when v is not a reference or is one p allows, and an
// error wrapping ErrNotAllowed that names the reference and the rule
// otherwise. It reads no secret: it looks at names, paths and symbolic
// links only. A file that does not exist (yet) inside an allowed directory
// is allowed; resolving it fails until it is there.
func (p Policy) Check(v string) error {
	if !ports.IsSecretRef(v) {
		return nil
	}
	if name, ok := strings.CutPrefix(v, "env:"); ok {
		return p.checkEnv(v, name)
	}
	_, _, err := p.locate(v, strings.TrimPrefix(v, "file:"))
	return err
}

// Unresolved returns nil when v is not a reference or resolves with p, and
// otherwise an error whose text is Detail of the failure (for the
// operator: it may name central's paths), never a value. The value read is
// dropped: a start-up check that every reference resolves.
func (p Policy) Unresolved(v string) error {
	if _, err := p.Resolve(v); err != nil {
		return errors.New(Detail(err))
	}
	return nil
}

// Resolve returns v, or the value it refers to when it is a reference that
// p allows: env:NAME reads an environment variable, file:PATH a regular
// file of at most MaxFileBytes (without its trailing newline). A reference
// p refuses is an error wrapping ErrNotAllowed; an unset variable or a
// missing or unreadable file wraps ErrUnresolvable. Errors name the
// reference, never a value.
func (p Policy) Resolve(v string) (string, error) {
	if !ports.IsSecretRef(v) {
		return v, nil
	}
	if name, ok := strings.CutPrefix(v, "env:"); ok {
		if err := p.checkEnv(v, name); err != nil {
			return "", err
		}
		s, ok := os.LookupEnv(name)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set: %w", name, ErrUnresolvable)
		}
		return s, nil
	}
	path := strings.TrimPrefix(v, "file:")
	root, rel, err := p.locate(v, path)
	if err != nil {
		return "", err
	}
	var f *os.File
	if root == "" {
		f, err = os.Open(rel)
	} else {
		// Opened through os.Root: a symbolic link swapped in after the
		// check still cannot lead out of the directory. Non-blocking, so
		// that a FIFO is refused below instead of waiting for a writer.
		var r *os.Root
		if r, err = os.OpenRoot(root); err == nil {
			f, err = r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
			r.Close()
		}
	}
	if err != nil {
		if root != "" && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
			// A link changed since the check now leads out.
			return "", &RefError{Ref: v, Rule: "a symbolic link leads outside the directories secrets.dirs allows",
				Found: err.Error(), kind: ErrNotAllowed}
		}
		return "", fileError(path, err)
	}
	defer f.Close()
	if !p.Unlimited {
		info, err := f.Stat()
		if err != nil {
			return "", fileError(path, err)
		}
		if !info.Mode().IsRegular() {
			return "", fmt.Errorf("file %s is not a regular file: %w", path, ErrUnresolvable)
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return "", fileError(path, err)
	}
	if len(b) > MaxFileBytes {
		return "", fmt.Errorf("file %s is larger than %d bytes: %w", path, MaxFileBytes, ErrUnresolvable)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// fileError is the error of reading the file at path: ErrUnresolvable for
// what stays broken until someone acts (missing, unreadable, not a file).
func fileError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrInvalid) {
		return fmt.Errorf("read file %s: %v: %w", path, err, ErrUnresolvable)
	}
	return fmt.Errorf("read secret file %s: %v", path, err)
}

// checkEnv checks the variable name of the reference v.
func (p Policy) checkEnv(v, name string) error {
	if p.Unlimited {
		return nil
	}
	if !isVarName(name) {
		return fmt.Errorf("%s: %q is not an environment variable name (letters, digits and _): %w", v, name, ErrNotAllowed)
	}
	if p.EnvPrefix == "" {
		return fmt.Errorf("%s: no env: reference is allowed here (secrets.env_prefix is empty): %w", v, ErrNotAllowed)
	}
	if !strings.HasPrefix(name, p.EnvPrefix) {
		return fmt.Errorf("%s: only variables whose names start with %s may be read (secrets.env_prefix): %w", v, p.EnvPrefix, ErrNotAllowed)
	}
	return nil
}

func isVarName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// abs returns path made absolute against p.Base (or the working directory)
// and cleaned.
func (p Policy) abs(path string) (string, error) {
	if !filepath.IsAbs(path) {
		base := p.Base
		if base == "" {
			base = "."
		}
		path = filepath.Join(base, path)
	}
	a, err := filepath.Abs(path)
	if err != nil {
		return "", &RefError{Ref: "file:" + path, Rule: "the path cannot be made absolute", Found: err.Error(), kind: ErrUnresolvable}
	}
	return a, nil
}

// locate checks the file reference v (its path as written) and returns how
// to open it: the root directory to open it in and its path relative to
// it, or, for an unlimited policy, root "" and the absolute path.
func (p Policy) locate(v, path string) (root, rel string, err error) {
	if strings.IndexByte(path, 0) >= 0 || strings.TrimSpace(path) != path {
		return "", "", fmt.Errorf("%q: a file path with a NUL byte or leading or trailing spaces: %w", v, ErrNotAllowed)
	}
	abs, err := p.abs(path)
	if err != nil {
		return "", "", err
	}
	if p.Unlimited {
		return "", abs, nil
	}
	dirs, err := p.dirs()
	if err != nil {
		return "", "", err
	}
	if len(dirs) == 0 {
		return "", "", fmt.Errorf("%s: no file: reference is allowed here (secrets.dirs is empty): %w", v, ErrNotAllowed)
	}
	if _, ok := within(dirs, abs); !ok {
		return "", "", &RefError{Ref: v, Rule: "outside the directories secrets.dirs allows (" + strings.Join(p.Dirs, ", ") + ")",
			Found: "the path is " + abs + "; secrets.dirs is " + strings.Join(dirs, ", "), kind: ErrNotAllowed}
	}
	real, err := evalExisting(abs)
	if err != nil {
		return "", "", fileError(path, err)
	}
	var reals []string
	for _, d := range dirs {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			reals = append(reals, r)
		}
	}
	i, ok := within(reals, real)
	if !ok {
		return "", "", &RefError{Ref: v, Rule: "a symbolic link leads outside the directories secrets.dirs allows (" + strings.Join(p.Dirs, ", ") + ")",
			Found: "it leads to " + real, kind: ErrNotAllowed}
	}
	rel, err = filepath.Rel(reals[i], real)
	if err != nil {
		return "", "", &RefError{Ref: v, Rule: "the path cannot be placed inside secrets.dirs", Found: err.Error(), kind: ErrNotAllowed}
	}
	return reals[i], rel, nil
}

// dirs returns p.Dirs absolute and cleaned.
func (p Policy) dirs() ([]string, error) {
	out := make([]string, 0, len(p.Dirs))
	for _, d := range p.Dirs {
		a, err := p.abs(d)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// within returns the index of the directory of dirs that holds path (both
// absolute and clean), if any.
func within(dirs []string, path string) (int, bool) {
	for i, d := range dirs {
		rel, err := filepath.Rel(d, path)
		if err != nil {
			continue
		}
		if rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel) {
			return i, true
		}
	}
	return 0, false
}

// evalExisting follows the symbolic links of the absolute, clean path as
// far as it exists, including a link whose target is missing; what does not
// exist (yet) is appended as written, and cannot be a link.
func evalExisting(path string) (string, error) { return evalDepth(path, 0) }

func evalDepth(path string, depth int) (string, error) {
	real, err := filepath.EvalSymlinks(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return real, err
	}
	parent := filepath.Dir(path)
	if parent == path || depth > 40 {
		return "", err
	}
	rp, err := evalDepth(parent, depth+1)
	if err != nil {
		return "", err
	}
	p := filepath.Join(rp, filepath.Base(path))
	if info, err := os.Lstat(p); err == nil && info.Mode()&fs.ModeSymlink != 0 {
		// A link to something missing: where it points is what counts.
		target, err := os.Readlink(p)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(rp, target)
		}
		return evalDepth(filepath.Clean(target), depth+1)
	}
	return p, nil
}

// CheckList checks every target of l that is a reference, and returns a
// *ports.FieldError (field targets[i], wrapping ports.ErrInvalid) for each
// one p refuses, joined, or nil.
func (p Policy) CheckList(l ports.List) error {
	var errs []error
	for i, t := range l.Targets {
		if err := p.Check(t); err != nil {
			errs = append(errs, &ports.FieldError{Field: fmt.Sprintf("targets[%d]", i), Msg: err.Error()})
		}
	}
	return errors.Join(errs...)
}

// CheckChannel checks every setting of c that is a reference, secret or
// not, and returns a *ports.FieldError (field settings.KEY) for each one p
// refuses, joined, or nil.
func (p Policy) CheckChannel(c ports.ChannelSettings) error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(c.Settings)) {
		if err := p.Check(c.Settings[k]); err != nil {
			errs = append(errs, &ports.FieldError{Field: "settings." + k, Msg: err.Error()})
		}
	}
	return errors.Join(errs...)
}
