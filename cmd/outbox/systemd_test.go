package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/core"
)

// systemdUnits are the units in configs/systemd, by the name systemd gives
// the unit verified (a template is verified as one of its instances).
var systemdUnits = map[string]string{
	"outbox-central.service": "outbox-central.service",
	"outbox-site@a.service":  "outbox-site@.service",
}

// TestSystemdUnitsVerify runs `systemd-analyze verify` on the units of
// configs/systemd, which needs no running systemd: every key must parse
// (verify prints a warning and exits 0 for a key it ignores, so any output
// fails the test), each ExecStart must name an executable (the binary the
// tests build stands for /usr/local/bin/outbox), and the units' exposure
// (systemd-analyze security --offline) must stay at most 2.0. It also holds
// central's unit to what its stop needs: KillMode=mixed, so that central
// stops its plugins itself after its drain, and a TimeoutStopSec above that
// drain.
func TestSystemdUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze is not installed; .ci/test.sh installs it (apt-get install systemd)")
		}
		t.Skip("systemd-analyze is not installed (apt-get install systemd): the units in configs/systemd are not verified")
	}
	bin := outboxBinary(t)
	dir := t.TempDir()
	for name, file := range systemdUnits {
		b, err := os.ReadFile(filepath.Join("..", "..", "configs", "systemd", file))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("ExecStart=/usr/local/bin/outbox ")) {
			t.Fatalf("%s: ExecStart does not run /usr/local/bin/outbox", file)
		}
		b = bytes.ReplaceAll(b, []byte("/usr/local/bin/outbox"), []byte(bin))
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "SYSTEMD_LOG_LEVEL=notice", "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0")
	for name, file := range systemdUnits {
		cmd := exec.Command(analyze, "verify", "--man=no", "./"+name)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", file, err, out)
		}

		cmd = exec.Command(analyze, "security", "--offline=true", "--threshold=20", "--no-pager", "./"+name)
		cmd.Dir, cmd.Env = dir, env
		out, err = cmd.CombinedOutput()
		overall := regexp.MustCompile(`Overall exposure level for \S+: [0-9.]+ \S+`).Find(out)
		if overall == nil && bytes.Contains(out, []byte("nrecognized option")) {
			t.Logf("this systemd-analyze has no offline security check: %s", out)
			continue
		}
		if err != nil || overall == nil {
			t.Errorf("systemd-analyze security %s (exposure above 2.0?): %v\n%s", file, err, out)
			continue
		}
		t.Logf("%s: %s", file, overall)
	}

	// Central's stop: deliveries wait for the plugins' answers up to
	// delivery_timeout plus a 5 s grace, then the host stops each plugin
	// within 5 s; the unit leaves 30 s more for the store and the logs.
	unit, err := os.ReadFile(filepath.Join("..", "..", "configs", "systemd", "outbox-central.service"))
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for line := range strings.Lines(string(unit)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && !strings.HasPrefix(k, "#") {
			settings[k] = v
		}
	}
	if settings["KillMode"] != "mixed" {
		t.Errorf("outbox-central.service: KillMode=%s, want mixed (central stops its plugins itself, after its drain)", settings["KillMode"])
	}
	stop, err := time.ParseDuration(settings["TimeoutStopSec"])
	if need := core.DefaultDeliveryTimeout + 5*time.Second + 5*time.Second + 30*time.Second; err != nil || stop < need {
		t.Errorf("outbox-central.service: TimeoutStopSec=%s, want at least %s to cover central's drain", settings["TimeoutStopSec"], need)
	}
}

// TestSystemdDocumentationIsInstalled: a file the units' Documentation=
// names is one the README's production steps install.
func TestSystemdDocumentationIsInstalled(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range systemdUnits {
		unit, err := os.ReadFile(filepath.Join("..", "..", "configs", "systemd", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)^Documentation=(.*)$`).FindAllStringSubmatch(string(unit), -1) {
			for _, doc := range strings.Fields(m[1]) {
				path, ok := strings.CutPrefix(doc, "file://")
				if ok && !regexp.MustCompile(`(?m)^install .*README\.md `+regexp.QuoteMeta(path)+`\b`).Match(readme) {
					t.Errorf("%s: Documentation=%s, which the README's install steps do not install", file, doc)
				}
			}
		}
	}
}
