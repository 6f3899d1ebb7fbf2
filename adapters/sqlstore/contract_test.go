package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/siteline/outbox/adapters/sqlstore/sqlstoretest"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/accountstest"
	"github.com/siteline/outbox/ports/adminaudittest"
	"github.com/siteline/outbox/ports/directorytest"
	"github.com/siteline/outbox/ports/sitecallstest"
	"github.com/siteline/outbox/ports/storetest"
)

// Environment variables naming the servers the suite runs against.
const (
	envMSSQL = "OUTBOX_TEST_MSSQL_DSN"
)

// newSQLiteStore opens and migrates a store on a fresh file in t's temp dir.
func newSQLiteStore(t testing.TB) *DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox.db")
	s, err := Open(context.Background(), Config{Driver: DriverSQLite, DSN: path}, nil)
	if err != nil {
		t.Fatalf("open sqlite: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate sqlite: %v", err)
	}
	return s
}

// postgresDSN returns the server DSN, or skips t.
func postgresDSN(t testing.TB) string { return sqlstoretest.PostgresServer(t) }

// newPostgresSchema returns the DSN of a fresh schema on the server of dsn.
func newPostgresSchema(t testing.TB, dsn string) string { return sqlstoretest.PostgresSchema(t, dsn) }

// newPostgresStore opens and migrates a store on a fresh schema.
func newPostgresStore(t testing.TB, dsn string) *DB {
	t.Helper()
	s, err := Open(context.Background(), Config{Driver: DriverPostgres, DSN: newPostgresSchema(t, dsn)}, nil)
	if err != nil {
		t.Fatalf("open postgres: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate postgres: %v", err)
	}
	return s
}

func TestContractSQLite(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T) storetest.Harness {
		s := newSQLiteStore(t)
		n := s.Notifications()
		return storetest.Harness{Store: n, Audit: n}
	})
}

func TestContractPostgres(t *testing.T) {
	t.Parallel()
	dsn := postgresDSN(t)
	storetest.Exercise(t, func(t *testing.T) storetest.Harness {
		s := newPostgresStore(t, dsn)
		n := s.Notifications()
		return storetest.Harness{Store: n, Audit: n}
	})
}

// TestContractMSSQL runs the suite on the MS SQL server of
// OUTBOX_TEST_MSSQL_DSN, a fresh database per harness (the login must be
// allowed to create databases).
func TestContractMSSQL(t *testing.T) {
	t.Parallel()
	dsn := os.Getenv(envMSSQL)
	if dsn == "" {
		t.Skipf("set %s to a sqlserver:// URL whose login may create databases to run against MS SQL", envMSSQL)
	}
	storetest.Exercise(t, func(t *testing.T) storetest.Harness {
		s := newMSSQLStore(t, dsn)
		n := s.Notifications()
		return storetest.Harness{Store: n, Audit: n}
	})
}

func TestDirectoryContractSQLite(t *testing.T) {
	t.Parallel()
	directorytest.Exercise(t, func(t *testing.T) ports.DirectoryAdmin { return newSQLiteStore(t).Directory() })
}

func TestDirectoryContractPostgres(t *testing.T) {
	t.Parallel()
	dsn := postgresDSN(t)
	directorytest.Exercise(t, func(t *testing.T) ports.DirectoryAdmin { return newPostgresStore(t, dsn).Directory() })
}

// TestDirectoryContractMSSQL runs the directory suite on the MS SQL server of
// OUTBOX_TEST_MSSQL_DSN (see TestContractMSSQL).
func TestDirectoryContractMSSQL(t *testing.T) {
	t.Parallel()
	dsn := os.Getenv(envMSSQL)
	if dsn == "" {
		t.Skipf("set %s to a sqlserver:// URL whose login may create databases to run against MS SQL", envMSSQL)
	}
	directorytest.Exercise(t, func(t *testing.T) ports.DirectoryAdmin { return newMSSQLStore(t, dsn).Directory() })
}

func TestAccountContractSQLite(t *testing.T) {
	t.Parallel()
	accountstest.Exercise(t, func(t *testing.T) ports.AccountStore { return newSQLiteStore(t).Accounts() })
}

func TestAccountContractPostgres(t *testing.T) {
	t.Parallel()
	dsn := postgresDSN(t)
	accountstest.Exercise(t, func(t *testing.T) ports.AccountStore { return newPostgresStore(t, dsn).Accounts() })
}

// TestAccountContractMSSQL runs the account suite on the MS SQL server of
// OUTBOX_TEST_MSSQL_DSN (see TestContractMSSQL).
func TestAccountContractMSSQL(t *testing.T) {
	t.Parallel()
	dsn := os.Getenv(envMSSQL)
	if dsn == "" {
		t.Skipf("set %s to a sqlserver:// URL whose login may create databases to run against MS SQL", envMSSQL)
	}
	accountstest.Exercise(t, func(t *testing.T) ports.AccountStore { return newMSSQLStore(t, dsn).Accounts() })
}

func TestAdminAuditContractSQLite(t *testing.T) {
	t.Parallel()
	adminaudittest.Exercise(t, func(t *testing.T) ports.AdminAudit { return newSQLiteStore(t).Accounts() })
}

func TestAdminAuditContractPostgres(t *testing.T) {
	t.Parallel()
	dsn := postgresDSN(t)
	adminaudittest.Exercise(t, func(t *testing.T) ports.AdminAudit { return newPostgresStore(t, dsn).Accounts() })
}

// TestAdminAuditContractMSSQL runs the admin audit suite on the MS SQL
// server of OUTBOX_TEST_MSSQL_DSN (see TestContractMSSQL).
func TestAdminAuditContractMSSQL(t *testing.T) {
	t.Parallel()
	dsn := os.Getenv(envMSSQL)
	if dsn == "" {
		t.Skipf("set %s to a sqlserver:// URL whose login may create databases to run against MS SQL", envMSSQL)
	}
	adminaudittest.Exercise(t, func(t *testing.T) ports.AdminAudit { return newMSSQLStore(t, dsn).Accounts() })
}

// newMSSQLStore creates a fresh database on the server of dsn, drops it when
// t ends, and opens and migrates a store on it.
func newMSSQLStore(t testing.TB, dsn string) *DB {
	t.Helper()
	admin, err := sql.Open("sqlserver", dsn)
	if err != nil {
		t.Fatalf("open %s: %v", envMSSQL, err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "outbox_t_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		_, err := admin.ExecContext(context.Background(),
			"ALTER DATABASE "+name+" SET SINGLE_USER WITH ROLLBACK IMMEDIATE; DROP DATABASE "+name)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("%s is not a URL: %v", envMSSQL, err)
	}
	q := u.Query()
	q.Set("database", name)
	u.RawQuery = q.Encode()
	s, err := Open(context.Background(), Config{Driver: DriverMSSQL, DSN: u.String()}, nil)
	if err != nil {
		t.Fatalf("open mssql: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate mssql: %v", err)
	}
	return s
}

func TestSiteCallContractSQLite(t *testing.T) {
	t.Parallel()
	sitecallstest.Exercise(t, func(t *testing.T) ports.SiteCallStore { return newSQLiteStore(t).SiteCalls() })
}

func TestSiteCallContractPostgres(t *testing.T) {
	t.Parallel()
	dsn := postgresDSN(t)
	sitecallstest.Exercise(t, func(t *testing.T) ports.SiteCallStore { return newPostgresStore(t, dsn).SiteCalls() })
}

// TestSiteCallContractMSSQL runs the site-call suite on the MS SQL server
// of OUTBOX_TEST_MSSQL_DSN (see TestContractMSSQL).
func TestSiteCallContractMSSQL(t *testing.T) {
	t.Parallel()
	dsn := os.Getenv(envMSSQL)
	if dsn == "" {
		t.Skipf("set %s to a sqlserver:// URL whose login may create databases to run against MS SQL", envMSSQL)
	}
	sitecallstest.Exercise(t, func(t *testing.T) ports.SiteCallStore { return newMSSQLStore(t, dsn).SiteCalls() })
}
