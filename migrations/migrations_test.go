package migrations

import (
	"io/fs"
	"strings"
	"testing"
)

func TestFS(t *testing.T) {
	for _, d := range Dialects {
		fsys, err := FS(d)
		if err != nil {
			t.Fatalf("FS(%q): %v", d, err)
		}
		ups, err := fs.Glob(fsys, "*.up.sql")
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
