package core

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// allowedDeps are the packages outside the standard library that the core
// may depend on, directly or through one another: the ports, and small pure
// helpers (bcrypt needs blowfish). Anything else — an adapter, SQL, a
// driver, gRPC, raft, go-plugin — makes TestCoreImportsOnlyPortsAndPureHelpers
// fail.
var allowedDeps = map[string]bool{
	"github.com/siteline/outbox/core":  true,
	"github.com/siteline/outbox/ports": true,
	"github.com/google/uuid":           true,
	"golang.org/x/crypto/bcrypt":       true,
	"golang.org/x/crypto/blowfish":     true,
}

// TestCoreImportsOnlyPortsAndPureHelpers keeps the hexagon's boundary: the
// core (without its tests) depends on nothing but the standard library and
// allowedDeps.
func TestCoreImportsOnlyPortsAndPureHelpers(t *testing.T) {
	// go test puts the go command of the toolchain that runs it on PATH.
	out, err := exec.Command("go", "list", "-deps",
		"-f", "{{if not .Standard}}{{.ImportPath}}{{end}}",
		"github.com/siteline/outbox/core/...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list -deps: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	var seen int
	for _, pkg := range strings.Fields(string(out)) {
		seen++
		if !allowedDeps[pkg] {
			t.Errorf("core depends on %s: the core imports only the standard library, ports and the pure helpers ARCHITECTURE.md names", pkg)
		}
	}
	if seen == 0 {
		t.Fatal("go list -deps listed no package outside the standard library, not even core itself")
	}
}
