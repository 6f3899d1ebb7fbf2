package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMigrateUpDownStatus drives `outbox migrate` through its three actions
// on a real database: status lists every migration as pending, up applies
// them, down without -yes only lists what it would drop (saying when that
// is every table), down -yes rolls the group back, and up applies it again.
func TestMigrateUpDownStatus(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "outbox.db")
	store := []string{"-store-driver", "sqlite", "-store-dsn", dsn, "-log-level", "error"}
	migrate := func(action string, extra ...string) string {
		t.Helper()
		args := append([]string{"migrate", action}, store...)
		code, stdout, stderr := runOutbox(append(args, extra...)...)
		if code != exitOK {
			t.Fatalf("outbox migrate %s: exit %d\n%s%s", action, code, stdout, stderr)
		}
		return stdout
	}
	lines := func(out, state string) int {
		n := 0
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[1] == state {
				n++
			}
		}
		return n
	}

	// status does not create a database (TestMigrateStatusAndDownDoNotCreate):
	// an empty file is an empty one.
	if err := os.WriteFile(dsn, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	all := lines(migrate("status"), "pending")
	if all < 5 {
		t.Fatalf("status of a new database lists %d pending migrations, want at least 5", all)
	}
	migrate("up")
	status := migrate("status")
	if got := lines(status, "applied"); got != all {
		t.Fatalf("after up, %d of %d applied:\n%s", got, all, status)
	}
	if !strings.Contains(status, "0001_init") {
		t.Fatalf("status does not name 0001_init:\n%s", status)
	}

	preview := migrate("down")
	if !strings.Contains(preview, "Nothing was changed") || !strings.Contains(preview, "0001_init") {
		t.Fatalf("down without -yes:\n%s", preview)
	}
	// The one group is every migration: the dry run says every table goes.
	if !strings.Contains(preview, "EVERY TABLE OF THE STORE would be dropped") {
		t.Fatalf("down without -yes does not say that it would drop every table:\n%s", preview)
	}
	if got := lines(migrate("status"), "applied"); got != all {
		t.Fatalf("down without -yes rolled back: %d of %d still applied", got, all)
	}

	down := migrate("down", "-yes")
	if strings.Count(down, "rolled back ") != all {
		t.Fatalf("down -yes rolled back:\n%s\nwant all %d (one group)", down, all)
	}
	if got := lines(migrate("status"), "pending"); got != all {
		t.Fatalf("after down -yes, %d of %d pending", got, all)
	}
	if out := migrate("down", "-yes"); !strings.Contains(out, "nothing to roll back") {
		t.Fatalf("down on an empty database: %q", out)
	}

	if code, out, errs := runOutbox(append([]string{"migrate"}, store...)...); code != exitOK { // no action: up
		t.Fatalf("outbox migrate: exit %d\n%s%s", code, out, errs)
	}
	if got := lines(migrate("status"), "applied"); got != all {
		t.Fatalf("migrate without an action applied %d of %d", got, all)
	}
	if _, err := os.Stat(dsn); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateNeedsNotCentralsOwnSecrets: migrate opens the store only, so
// central's own references (the admin's password, a site's token) need not
// resolve where it runs — an operator may run it without access to them —
// while central itself refuses to start with them unresolved, naming each.
func TestMigrateNeedsNotCentralsOwnSecrets(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "central.yaml")
	yaml := `store: {driver: sqlite, dsn: ` + filepath.Join(dir, "outbox.db") + `}
log: {level: error}
link:
  listen: 127.0.0.1:0
  sites: [{id: plant-1, token: 'env:OUTBOX_TEST_UNSET_SITE_TOKEN'}]
http:
  listen: 127.0.0.1:0
  admin: {name: root, password: 'env:OUTBOX_TEST_UNSET_ADMIN_PW'}
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := runOutbox("migrate", "up", "-config", file); code != exitOK {
		t.Fatalf("migrate up with central's secrets unset: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, stderr := runOutbox("migrate", "status", "-config", file)
	if code != exitOK || !strings.Contains(stdout, "0001_init") {
		t.Fatalf("migrate status with central's secrets unset: exit %d\n%s%s", code, stdout, stderr)
	}
	code, _, stderr = runOutbox("central", "-config", file)
	for _, want := range []string{"http.admin.password: ", "OUTBOX_TEST_UNSET_ADMIN_PW", "link.sites[0].token: ", "2 problems"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("central's refusal lacks %q:\n%s", want, stderr)
		}
	}
	if code != exitUsage {
		t.Errorf("central with its secrets unset: exit %d, want %d", code, exitUsage)
	}
}

// TestMigrateStatusAndDownDoNotCreate: status and down on an SQLite
// database that is not there say so and leave no file (nor its directory)
// behind; only up creates one.
func TestMigrateStatusAndDownDoNotCreate(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "nonexist", "lib")
	dsn := filepath.Join(t.TempDir(), "outbox.db")
	for _, tt := range []struct {
		args []string
		path string
	}{
		{[]string{"status", "-data-dir", dataDir}, filepath.Join(dataDir, "outbox.db")},
		{[]string{"down", "-data-dir", dataDir}, filepath.Join(dataDir, "outbox.db")},
		{[]string{"down", "-yes", "-store-dsn", "file:" + dsn + "?_pragma=busy_timeout(1000)"}, dsn},
		{[]string{"status", "-store-dsn", dsn}, dsn},
	} {
		args := append([]string{"migrate"}, tt.args...)
		code, stdout, stderr := runOutbox(append(args, "-store-driver", "sqlite", "-log-level", "error")...)
		want := "outbox migrate " + tt.args[0] + ": no database at " + tt.path + ` ("outbox migrate up" creates it)` + "\n"
		if code != exitFailure || stdout != "" || stderr != want {
			t.Errorf("outbox %q: exit %d, stdout %q, stderr %q; want 1 and %q", args, code, stdout, stderr, want)
		}
	}
	if _, err := os.Stat(filepath.Dir(dataDir)); !os.IsNotExist(err) {
		t.Errorf("status or down made %s: %v", filepath.Dir(dataDir), err)
	}
	if _, err := os.Stat(dsn); !os.IsNotExist(err) {
		t.Errorf("status or down made %s: %v", dsn, err)
	}
	if code, stdout, stderr := runOutbox("migrate", "up", "-store-driver", "sqlite", "-data-dir", dataDir, "-log-level", "error"); code != exitOK {
		t.Fatalf("outbox migrate up: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := runOutbox("migrate", "status", "-store-driver", "sqlite", "-data-dir", dataDir, "-log-level", "error"); code != exitOK || !strings.Contains(stdout, "applied") {
		t.Fatalf("outbox migrate status after up: exit %d\n%s%s", code, stdout, stderr)
	}
}
