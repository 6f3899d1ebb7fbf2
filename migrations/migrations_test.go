package migrations

import (
	"io/fs"
	"slices"
	"strings"
	"testing"
)

func TestFS(t *testing.T) {
	for _, d := range Dialects {
		fsys, err := FS(d)
		if err != nil {
			t.Fatalf("FS(%q): %v", d, err)
		}
		ups, err := fs.Glob(fsys, "*.tx.up.sql")
		if err != nil || len(ups) == 0 {
			t.Fatalf("FS(%q) holds no up migration (%v)", d, err)
		}
		for _, up := range ups {
			down := strings.TrimSuffix(up, ".up.sql") + ".down.sql"
			if _, err := fs.Stat(fsys, down); err != nil {
				t.Errorf("%s: %s has no %s", d, up, down)
			}
		}
	}
	if _, err := FS("oracle"); err == nil || !strings.Contains(err.Error(), "sqlite, postgres, mssql") {
		t.Errorf("FS(oracle) = %v, want an error naming the dialects", err)
	}
}

// TestSameVersions: every dialect has the same migrations, in the same order.
func TestSameVersions(t *testing.T) {
	want := []string{"0001_init", "0002_directory", "0003_accounts", "0004_subject_search", "0005_admin_audit", "0006_target_states", "0007_site_calls", "0008_site_call_search", "0009_throughput", "0010_subject_table", "0011_key_table"}
	for _, d := range Dialects {
		fsys, err := FS(d)
		if err != nil {
			t.Fatal(err)
		}
		all, err := fs.Glob(fsys, "*.sql")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, name := range all {
			if up, ok := strings.CutSuffix(name, ".tx.up.sql"); ok {
				got = append(got, up)
			} else if !strings.HasSuffix(name, ".tx.down.sql") {
				t.Errorf("%s: %s is neither a .tx.up.sql nor a .tx.down.sql file", d, name)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s migrations = %q, want %q", d, got, want)
		}
	}
}
