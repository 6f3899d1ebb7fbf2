package secretref_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/ports"
)

// fixture is a configuration directory with an allowed secrets directory
// inside it, and a file outside that a reference must never reach.
type fixture struct {
	base    string // the configuration file's directory
	secrets string // base/secrets, the allowed directory
	outside string // a secret file elsewhere
	policy  secretref.Policy
}

const (
	insideValue  = "inside-value"
	outsideValue = "OUTSIDE-VALUE-never-read"
)

func newFixture(t testing.TB) fixture {
	t.Helper()
	root := t.TempDir()
	f := fixture{base: filepath.Join(root, "etc"), outside: filepath.Join(root, "elsewhere", "shadow")}
	f.secrets = filepath.Join(f.base, "secrets")
	for _, d := range []string{f.secrets, filepath.Join(f.secrets, "sub"), filepath.Dir(f.outside)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, v string) {
		if err := os.WriteFile(path, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(f.secrets, "token"), insideValue+"\n")
	write(filepath.Join(f.secrets, "sub", "key"), insideValue)
	write(f.outside, outsideValue)
	write(filepath.Join(f.base, "beside"), outsideValue) // in the config dir, not in secrets
	link := func(target, name string) {
		if err := os.Symlink(target, filepath.Join(f.secrets, name)); err != nil {
			t.Fatal(err)
		}
	}
	link(f.outside, "escape")                                 // absolute link out
	link("../beside", "escape-relative")                      // relative link out
	link(filepath.Dir(f.outside), "escape-dir")               // a directory link out
	link(filepath.Join(f.outside+"-missing"), "dangling-out") // a link out to nothing (yet)
	link("sub/key", "inner")                                  // a link that stays inside
	f.policy = secretref.Policy{Base: f.base, Dirs: []string{"secrets"}, EnvPrefix: secretref.DefaultEnvPrefix}
	return f
}

func TestPolicyAllowsWhatTheOperatorAllowed(t *testing.T) {
	f := newFixture(t)
	t.Setenv("OUTBOX_SECRET_HOOK", "from-env")
	for _, ref := range []string{
		"file:secrets/token",                        // relative to the configuration's directory
		"file:" + filepath.Join(f.secrets, "token"), // absolute
		"file:secrets/sub/../token",                 // .. that stays inside
		"file:secrets/inner",                        // a link that stays inside
		"file:./secrets/sub/key",
	} {
		if err := f.policy.Check(ref); err != nil {
			t.Errorf("Check(%s): %v", ref, err)
		}
		if v, err := f.policy.Resolve(ref); err != nil || v != insideValue {
			t.Errorf("Resolve(%s) = %q, %v", ref, v, err)
		}
	}
	if v, err := f.policy.Resolve("env:OUTBOX_SECRET_HOOK"); err != nil || v != "from-env" {
		t.Errorf("env: %q, %v", v, err)
	}
	// Not a reference: passed as it is.
	if v, err := f.policy.Resolve("ops@example.com"); err != nil || v != "ops@example.com" {
		t.Errorf("plain value: %q, %v", v, err)
	}
	// A file that is not there yet passes the check, and fails to resolve.
	if err := f.policy.Check("file:secrets/later"); err != nil {
		t.Errorf("Check of a missing file inside: %v", err)
	}
	if _, err := f.policy.Resolve("file:secrets/later"); !errors.Is(err, secretref.ErrUnresolvable) || errors.Is(err, secretref.ErrNotAllowed) {
		t.Errorf("Resolve of a missing file: %v, want ErrUnresolvable", err)
	}
	if _, err := f.policy.Resolve("env:OUTBOX_SECRET_UNSET"); !errors.Is(err, secretref.ErrUnresolvable) || !strings.Contains(err.Error(), "OUTBOX_SECRET_UNSET") {
		t.Errorf("unset variable: %v", err)
	}
}

// TestPolicyRefusesTheAttacker plays an admin who writes references to read
// what central can read: files elsewhere, through .., through links, and
// central's own settings in its environment.
func TestPolicyRefusesTheAttacker(t *testing.T) {
	f := newFixture(t)
	t.Setenv("OUTBOX_STORE_DSN", "postgres://outbox:"+outsideValue+"@db/outbox")
	t.Setenv("HOME_SECRET", outsideValue)
	for _, ref := range []string{
		"file:/etc/passwd",
		"file:" + f.outside,
		"file:../elsewhere/shadow",
		"file:beside", // the configuration's directory is not allowed by itself
		"file:secrets/../beside",
		"file:" + f.secrets + "/../beside",
		"file:secrets/escape",
		"file:secrets/escape-relative",
		"file:secrets/escape-dir/shadow",
		"file:secrets/dangling-out",
		"file:secrets/sub/../../beside",
		"file: secrets/token",
		"env:OUTBOX_STORE_DSN",
		"env:HOME_SECRET",
		"env:OUTBOX_SECRET", // the prefix is OUTBOX_SECRET_
		"env:OUTBOX_SECRET_X=Y",
		"env: OUTBOX_SECRET_X",
	} {
		err := f.policy.Check(ref)
		if !errors.Is(err, secretref.ErrNotAllowed) {
			t.Errorf("Check(%s) = %v, want ErrNotAllowed", ref, err)
			continue
		}
		if !strings.Contains(err.Error(), strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(ref, "env:"), "file:"))) {
			t.Errorf("Check(%s): %q does not name the reference", ref, err)
		}
		v, err := f.policy.Resolve(ref)
		if !errors.Is(err, secretref.ErrNotAllowed) || v != "" {
			t.Errorf("Resolve(%s) = %q, %v, want ErrNotAllowed", ref, v, err)
		}
		if err != nil && strings.Contains(err.Error(), outsideValue) {
			t.Errorf("Resolve(%s): the error holds the value: %v", ref, err)
		}
	}
	// No directories, no prefix: nothing at all.
	var none secretref.Policy
	for _, ref := range []string{"file:" + filepath.Join(f.secrets, "token"), "env:OUTBOX_SECRET_HOOK"} {
		if err := none.Check(ref); !errors.Is(err, secretref.ErrNotAllowed) {
			t.Errorf("zero policy allows %s: %v", ref, err)
		}
	}
}

func TestPolicyRefusesWhatIsNoSecretFile(t *testing.T) {
	f := newFixture(t)
	fifo := filepath.Join(f.secrets, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	if _, err := f.policy.Resolve("file:secrets/fifo"); !errors.Is(err, secretref.ErrUnresolvable) {
		t.Errorf("a FIFO: %v, want ErrUnresolvable (and no hang)", err)
	}
	big := filepath.Join(f.secrets, "big")
	if err := os.WriteFile(big, make([]byte, secretref.MaxFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.policy.Resolve("file:secrets/big"); !errors.Is(err, secretref.ErrUnresolvable) {
		t.Errorf("a file over the bound: %v", err)
	}
	if _, err := f.policy.Resolve("file:secrets/sub"); !errors.Is(err, secretref.ErrUnresolvable) {
		t.Errorf("a directory: %v", err)
	}
}

// The configuration's own references read anything, relative paths against
// the configuration file's directory.
func TestOwnPolicy(t *testing.T) {
	f := newFixture(t)
	t.Setenv("ANY_NAME", "x")
	own := secretref.Own(f.base)
	for ref, want := range map[string]string{
		"file:beside": outsideValue, "file:secrets/token": insideValue, "file:../elsewhere/shadow": outsideValue,
		"env:ANY_NAME": "x",
	} {
		if err := own.Check(ref); err != nil {
			t.Errorf("Check(%s): %v", ref, err)
		}
		if v, err := own.Resolve(ref); err != nil || v != want {
			t.Errorf("Resolve(%s) = %q, %v", ref, v, err)
		}
	}
	t.Chdir(f.base)
	if v, err := secretref.Resolve("file:secrets/token"); err != nil || v != insideValue {
		t.Errorf("Resolve against the working directory: %q, %v", v, err)
	}
}

// FuzzPolicy checks that no reference reads a file outside the allowed
// directory or a variable without the prefix, that Resolve allows nothing
// Check refuses, and that no error repeats a value.
func FuzzPolicy(f *testing.F) {
	fx := newFixture(f)
	f.Setenv("OUTBOX_SECRET_OK", insideValue)
	f.Setenv("OUTBOX_STORE_DSN", outsideValue)
	for _, s := range []string{
		"file:secrets/token", "file:secrets/escape", "file:../elsewhere/shadow", "file:/etc/passwd",
		"file:secrets/sub/../../beside", "file:secrets//inner", "file:secrets/dangling-out", "file:secrets/escape-dir/shadow",
		"env:OUTBOX_SECRET_OK", "env:OUTBOX_STORE_DSN", "env:", "file:", "file:\x00", "env:OUTBOX_SECRET_\n",
		"plain", "", "file:secrets/./sub/./key", "file:" + fx.outside, "file:secrets/" + strings.Repeat("../", 20) + "etc/passwd",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		checkErr := fx.policy.Check(ref)
		v, err := fx.policy.Resolve(ref)
		if errors.Is(checkErr, secretref.ErrNotAllowed) && err == nil {
			t.Fatalf("Resolve(%q) succeeded where Check refused: %v", ref, checkErr)
		}
		if err == nil && strings.Contains(v, outsideValue) {
			t.Fatalf("Resolve(%q) read a value outside the policy", ref)
		}
		for _, e := range []error{checkErr, err} {
			if e == nil {
				continue
			}
			if msg := e.Error(); strings.Contains(msg, outsideValue) && !strings.Contains(ref, outsideValue) ||
				strings.Contains(msg, insideValue) && !strings.Contains(ref, insideValue) {
				t.Fatalf("error of %q repeats a value: %v", ref, e)
			}
		}
	})
}

func TestCheckListAndChannelNameTheField(t *testing.T) {
	f := newFixture(t)
	err := f.policy.CheckList(ports.List{Name: "ops", Type: "webhook",
		Targets: []string{"https://example.com/hook", "file:secrets/token", "file:/etc/passwd", "env:OUTBOX_STORE_DSN"}})
	if !errors.Is(err, ports.ErrInvalid) {
		t.Fatalf("CheckList: %v, want ErrInvalid", err)
	}
	for _, want := range []string{"targets[2]: file:/etc/passwd: ", "targets[3]: env:OUTBOX_STORE_DSN: ", "secrets.dirs", "secrets.env_prefix): secret reference not allowed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CheckList: %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "targets[0]") || strings.Contains(err.Error(), "targets[1]") {
		t.Errorf("CheckList refuses an allowed target: %v", err)
	}
	err = f.policy.CheckChannel(ports.ChannelSettings{Type: "email", Settings: map[string]string{
		"host": "smtp.example.com", "password": "env:OUTBOX_SECRET_SMTP", "client_secret": "file:/etc/shadow", "from": "env:HOME"}})
	for _, want := range []string{"settings.client_secret: file:/etc/shadow: ", "settings.from: ", "secret reference not allowed"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckChannel: %v lacks %q", err, want)
		}
	}
	if err := f.policy.CheckChannel(ports.ChannelSettings{Type: "email", Settings: map[string]string{"password": "env:OUTBOX_SECRET_SMTP"}}); err != nil {
		t.Errorf("CheckChannel refuses an allowed reference: %v", err)
	}
}

// TestRefusalsNameTheReferenceNotWhatCentralFound: a refusal's text, which
// the API shows admins and a notification's error shows viewers, names the
// reference as written and the rule, never the absolute path central
// resolved, where a link leads or central's process id; Detail, for the
// operator, adds them.
func TestRefusalsNameTheReferenceNotWhatCentralFound(t *testing.T) {
	f := newFixture(t)
	if err := os.Symlink("/proc/self/environ", filepath.Join(f.secrets, "self")); err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(f.base)
	for ref, found := range map[string]string{
		"file:secrets/escape":          f.outside,
		"file:secrets/escape-relative": filepath.Join(f.base, "beside"),
		"file:secrets/dangling-out":    f.outside + "-missing",
		"file:../elsewhere/shadow":     f.outside,
		"file:secrets/self":            "/proc/",
	} {
		for _, err := range []error{f.policy.Check(ref), func() error { _, err := f.policy.Resolve(ref); return err }()} {
			if !errors.Is(err, secretref.ErrNotAllowed) {
				t.Fatalf("%s: %v, want ErrNotAllowed", ref, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, ref+": ") || strings.Contains(msg, root) || strings.Contains(msg, "/proc/") {
				t.Errorf("%s: %q discloses what central found", ref, msg)
			}
			if d := secretref.Detail(err); !strings.Contains(d, found) || !strings.HasPrefix(d, msg) {
				t.Errorf("%s: Detail %q lacks %q", ref, d, found)
			}
		}
	}
}

// TestUnresolvedNamesWhatWasMissingAndDropsTheValue: a plain value and a
// reference that resolves are fine; a missing file or an unset variable is
// an error naming the reference and what was looked for, never a value.
func TestUnresolvedNamesWhatWasMissingAndDropsTheValue(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pw"), []byte("the-secret-value"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := secretref.Own(dir)
	for _, v := range []string{"plain", "file:pw"} {
		if err := p.Unresolved(v); err != nil {
			t.Errorf("Unresolved(%q) = %v, want nil", v, err)
		}
	}
	t.Setenv("OUTBOX_TEST_UNSET_FOR_UNRESOLVED", "")
	os.Unsetenv("OUTBOX_TEST_UNSET_FOR_UNRESOLVED")
	for v, want := range map[string]string{"file:missing": "read file missing", "env:OUTBOX_TEST_UNSET_FOR_UNRESOLVED": "not set"} {
		err := p.Unresolved(v)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "the-secret-value") {
			t.Errorf("Unresolved(%q) = %v, want an error naming %q", v, err, want)
		}
	}
}
