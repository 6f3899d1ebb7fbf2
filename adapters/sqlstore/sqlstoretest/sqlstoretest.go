// Package sqlstoretest hands tests throwaway PostgreSQL schemas, for the SQL
// store's own tests and for every test built on a real store (acceptance).
package sqlstoretest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// EnvPostgres names the variable holding the URL of the PostgreSQL server the
// tests may use (.ci/test.sh starts one and sets it).
const EnvPostgres = "OUTBOX_TEST_POSTGRES_DSN"

// PostgresServer returns the URL in EnvPostgres, or skips tb with a message
// naming the variable.
func PostgresServer(tb testing.TB) string {
	tb.Helper()
	dsn := os.Getenv(EnvPostgres)
	if dsn == "" {
		tb.Skipf("set %s to a PostgreSQL URL (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable) to run against PostgreSQL; bash .ci/test.sh starts a server and sets it", EnvPostgres)
	}
	return dsn
}

// PostgresSchema creates a fresh, empty schema on the server of dsn, drops it
// when tb ends, and returns dsn with search_path set to it: every store opened
// with the result shares that schema and nothing else.
//
// It first installs the pg_trgm extension in the public schema when the
// database lacks it (see installTrigram), so that no throwaway schema owns it.
func PostgresSchema(tb testing.TB, dsn string) string {
	tb.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		tb.Fatalf("parse %s: %v", EnvPostgres, err)
	}
	admin := stdlib.OpenDB(*cfg)
	tb.Cleanup(func() { _ = admin.Close() })
	trigramOnce.Do(func() { installTrigram(admin) })
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(context.Background(), "CREATE SCHEMA "+schema); err != nil {
		tb.Fatalf("create schema: %v", err)
	}
	tb.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("%s is not a URL: %v", EnvPostgres, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// trigramOnce installs pg_trgm once per test binary.
var trigramOnce sync.Once

// installTrigram installs pg_trgm in the public schema of the test database
// unless it is there already. The store's migration 0004 would otherwise
// install it in the first schema it migrates, one of the throwaway schemas:
// dropping that schema (CASCADE) would drop the extension, and with it the
// keyword index of every other schema, maybe while another test is
// migrating. Failures are ignored: two test binaries may race (the loser
// finds the extension on its second try), and without pg_trgm the
// migration goes without the index.
func installTrigram(db *sql.DB) {
	for range 2 {
		if _, err := db.ExecContext(context.Background(), "CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public"); err == nil {
			return
		}
	}
}
