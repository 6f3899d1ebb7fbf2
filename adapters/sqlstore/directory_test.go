package sqlstore

import (
	"io/fs"
	"testing"

	"github.com/siteline/outbox/migrations"
	"github.com/siteline/outbox/ports"
)

// checkDirectoryDown runs the down migration of 0002_directory on s, a
// migrated store holding a list: it drops the directory tables and leaves
// the notifications alone.
func checkDirectoryDown(t *testing.T, s *DB) {
	t.Helper()
	if err := s.Directory().PutList(t.Context(), ports.List{Name: "ops", Type: "email"}); err != nil {
		t.Fatalf("PutList: %v", err)
	}
	fsys, err := migrations.FS(s.driver)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReadFile(fsys, "0002_directory.tx.down.sql")
	if err != nil {
		t.Fatal(err)
	}
	for i, stmt := range splitStatements(string(b)) {
		if _, err := s.writer().ExecContext(t.Context(), stmt); err != nil {
			t.Fatalf("down statement %d: %v", i+1, err)
		}
	}
	if _, err := s.Directory().Lists(t.Context()); err == nil {
		t.Errorf("Lists after the down migration: no error, want the table gone")
	}
	if _, err := s.Directory().Channels(t.Context()); err == nil {
		t.Errorf("Channels after the down migration: no error, want the table gone")
	}
	if _, err := s.Notifications().Count(t.Context(), ports.Filter{}); err != nil {
		t.Errorf("Count after the down migration: %v", err)
	}
}

func TestDirectoryDownSQLite(t *testing.T) {
	t.Parallel()
	checkDirectoryDown(t, newSQLiteStore(t))
}

func TestDirectoryDownPostgres(t *testing.T) {
	t.Parallel()
	checkDirectoryDown(t, newPostgresStore(t, postgresDSN(t)))
}
