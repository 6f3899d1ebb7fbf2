package acceptance

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/adapters/sqlstore/sqlstoretest"
)

// backend opens fresh, migrated stores of one database kind.
type backend struct {
	name string
	// config returns the settings of a new, empty database (a temp file, or
	// a fresh PostgreSQL schema); every store opened with them shares it.
	config func(t testing.TB) sqlstore.Config
}

var sqliteBackend = backend{name: "sqlite", config: func(t testing.TB) sqlstore.Config {
	return sqlstore.Config{Driver: "sqlite", DSN: filepath.Join(t.TempDir(), "outbox.db")}
}}

var postgresBackend = backend{name: "postgres", config: func(t testing.TB) sqlstore.Config {
	return sqlstore.Config{Driver: "postgres", DSN: sqlstoretest.PostgresSchema(t, sqlstoretest.PostgresServer(t))}
}}

// backends are the databases every acceptance test runs on.
var backends = []backend{sqliteBackend, postgresBackend}

// eachBackend runs f once per backend as a subtest.
func eachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b) })
	}
}

// open opens and migrates a store with cfg, closed when the test ends.
func open(t testing.TB, cfg sqlstore.Config) *sqlstore.DB {
	t.Helper()
	ctx := context.Background()
	s, err := sqlstore.Open(ctx, cfg, nil)
	if err != nil {
		t.Fatalf("open %s store: %v", cfg.Driver, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate %s store: %v", cfg.Driver, err)
	}
	return s
}
