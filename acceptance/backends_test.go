package acceptance

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for creating test schemas

	"github.com/siteline/outbox/adapters/sqlstore"
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
	dsn := os.Getenv("OUTBOX_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("PostgreSQL tests need OUTBOX_TEST_POSTGRES_DSN (bash .ci/test.sh starts a server and sets it)")
	}
	return sqlstore.Config{Driver: "postgres", DSN: freshSchema(t, dsn)}
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
func open(t testing.TB, cfg sqlstore.Config) *sqlstore.Store {
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

// freshSchema creates an empty schema on the server of dsn, dropped when the
// test ends, and returns a DSN whose search_path is that schema.
func freshSchema(t testing.TB, dsn string) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "acc_" + hex.EncodeToString(b)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	if _, err := db.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		_, _ = db.Exec("DROP SCHEMA " + schema + " CASCADE")
		_ = db.Close()
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parse OUTBOX_TEST_POSTGRES_DSN: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
