package acceptance

import (
	"database/sql"
	"testing"

	"github.com/siteline/outbox/adapters/sqlstore"
)

// walMeter measures the write-ahead log PostgreSQL writes over a
// benchmark's timed part: how much the database writes per unit of work,
// index entries and full-page images included. Unlike the CPU figures the
// host's other load does not move it, so it shows a change in the
// database's work that a noisy host hides in the rates. It counts the whole
// server's log (autovacuum's, and any other database's writes), so it is
// read with nothing else running on that server.
type walMeter struct {
	db    *sql.DB // nil: not PostgreSQL, nothing to report
	start string
}

// startWAL reads the log's insert position on sc's server; on other
// databases it measures nothing.
func startWAL(b *testing.B, sc sqlstore.Config) walMeter {
	b.Helper()
	if sc.Driver != sqlstore.DriverPostgres {
		return walMeter{}
	}
	db, err := sql.Open("pgx", sc.DSN)
	if err != nil {
		b.Fatalf("open the WAL reading: %v", err)
	}
	b.Cleanup(func() { _ = db.Close() })
	m := walMeter{db: db}
	if err := db.QueryRow(`SELECT pg_current_wal_insert_lsn()::text`).Scan(&m.start); err != nil {
		b.Fatalf("read the WAL position: %v", err)
	}
	return m
}

// report adds the log written since startWAL per unit of work as the
// metric "wal-bytes/<unit>".
func (m walMeter) report(b *testing.B, n int, unit string) {
	b.Helper()
	if m.db == nil || n == 0 {
		return
	}
	var written float64
	if err := m.db.QueryRow(`SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)`, m.start).Scan(&written); err != nil {
		b.Fatalf("read the WAL position: %v", err)
	}
	b.ReportMetric(written/float64(n), "wal-bytes/"+unit)
}
