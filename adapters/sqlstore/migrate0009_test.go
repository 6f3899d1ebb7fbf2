package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/storetest"
)

// errStop interrupts a migration run in the tests, as a crash would.
var errStop = errors.New("stopped by the test")

// readsGoOn reads notifications and the audit log as the page and the
// dispatcher do, from a session of their own that gives up on a lock
// after a moment: it fails while the migration holds a lock that blocks
// reads.
func readsGoOn(ctx context.Context, db *DB) error {
	tx, err := db.reader().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	for _, q := range []string{`SET LOCAL lock_timeout = '500ms'`,
		`SELECT count(*) FROM notifications WHERE delivered_at IS NOT NULL`,
		`SELECT count(*) FROM notification_audit`} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// TestThroughputMigrationKeepsReadsGoingPostgres: on a database with rows
// and records of the release before, the throughput migration never holds
// a lock that blocks a read of notifications or of the audit log between
// two of its statements, and it fills the records that count with their
// rows' sites and types.
func TestThroughputMigrationKeepsReadsGoingPostgres(t *testing.T) {
	t.Parallel()
	db := postgresOpener(t)()
	before := migrateBefore0009(t, db)
	m, err := db.newMigrator()
	if err != nil {
		t.Fatal(err)
	}
	statements := 0
	m.ran = func(name string, i int) error {
		if name != "0009_throughput" {
			return nil
		}
		statements++
		if err := readsGoOn(t.Context(), db); err != nil {
			t.Errorf("after statement %d of %s, a read waits for the migration: %v", i, name, err)
		}
		return nil
	}
	if _, err := m.up(t.Context()); err != nil {
		t.Fatal(err)
	}
	if statements < 5 {
		t.Fatalf("0009 ran %d statements", statements)
	}
	checkBackfilled(t, db, before)
}

// TestThroughputMigrationRunsAgainAfterAStopPostgres: stopped after any of
// its statements (a crash, a deploy), the migration, which runs outside a
// transaction, is not recorded, and the next Migrate runs it again from
// its start to the end: the schema is whole and the store works.
func TestThroughputMigrationRunsAgainAfterAStopPostgres(t *testing.T) {
	t.Parallel()
	for stop := 1; ; stop++ {
		db := postgresOpener(t)()
		before := migrateBefore0009(t, db)
		m, err := db.newMigrator()
		if err != nil {
			t.Fatal(err)
		}
		m.ran = func(name string, i int) error {
			if name == "0009_throughput" && i == stop {
				return errStop
			}
			return nil
		}
		_, err = m.up(t.Context())
		if err == nil {
			if stop < 5 {
				t.Fatalf("0009 has %d statements", stop-1)
			}
			return // every statement was a stop point
		}
		if !errors.Is(err, errStop) {
			t.Fatalf("stopped after statement %d: %v", stop, err)
		}
		if err := db.Migrate(t.Context()); err != nil {
			t.Fatalf("Migrate after a stop after statement %d: %v", stop, err)
		}
		wantStatus(t, db, 1, 1, 1, 1, 1, 1, 1, 1, 2)
		checkBackfilled(t, db, before)
		var valid, n int
		if err := db.reader().QueryRowContext(t.Context(), `SELECT count(*), count(*) FILTER (WHERE i.indisvalid)
			FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace s ON s.oid = c.relnamespace
			WHERE s.nspname = current_schema() AND c.relname IN ('notifications_delivered_idx', 'notification_audit_failures_idx')`).
			Scan(&n, &valid); err != nil || n != 2 || valid != 2 {
			t.Errorf("stopped after statement %d, then migrated: %d of the 2 indexes, %d valid (%v)", stop, n, valid, err)
		}
		var stray int
		if err := db.reader().QueryRowContext(t.Context(), `SELECT count(*) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
			WHERE s.nspname = current_schema() AND c.relname = 'notifications_delivered_0009_idx'`).Scan(&stray); err != nil || stray != 0 {
			t.Errorf("stopped after statement %d, then migrated: the index built beside is left (%d, %v)", stop, stray, err)
		}
	}
}

// migrateBefore0009 applies the migrations up to 0008 as one group and
// writes, as the release before did, a delivered row and a row with a
// failed attempt and a parking, whose records carry no site nor type.
// It returns the site and type by notification id.
func migrateBefore0009(t *testing.T, db *DB) map[string][2]string {
	t.Helper()
	m, err := db.newMigrator()
	if err != nil {
		t.Fatal(err)
	}
	m.files = m.files[:len(m.files)-1]
	if m.files[len(m.files)-1].name != "0008_site_call_search" {
		t.Fatalf("the migration before the throughput's is %s", m.files[len(m.files)-1].name)
	}
	if _, err := m.up(t.Context()); err != nil {
		t.Fatal(err)
	}
	out := map[string][2]string{}
	for i, site := range []string{"site-a", "site-b"} {
		n := storetest.NewNotification(storetest.BaseTime.Add(time.Duration(i) * time.Minute))
		n.SourceSite, n.Type = site, []string{"email", "sms"}[i]
		n.Status, n.DeliveredAt = ports.StatusDelivered, n.CreatedAt.Add(time.Second)
		if site == "site-b" {
			n.Status, n.DeliveredAt = ports.StatusParked, time.Time{}
		}
		if _, err := db.writer().ExecContext(t.Context(), `INSERT INTO notifications
			(id, type, list, subject, status, source_site, created_at, updated_at, delivered_at)
			VALUES ($1, $2, 'ops', 's', $3, $4, $5, $5, $6)`,
			n.ID, n.Type, string(n.Status), n.SourceSite, n.CreatedAt, nullTime(n.DeliveredAt)); err != nil {
			t.Fatal(err)
		}
		for _, rec := range [][2]string{{"Attempted", "Retrying"}, {"Parked", "Parked"}, {"Delivered", "Delivered"}} {
			if (site == "site-a") != (rec[0] == "Delivered") {
				continue
			}
			if _, err := db.writer().ExecContext(t.Context(), `INSERT INTO notification_audit (notification_id, at, kind, actor, status)
				VALUES ($1, $2, $3, 'system', $4)`, n.ID, n.CreatedAt, rec[0], rec[1]); err != nil {
				t.Fatal(err)
			}
		}
		out[n.ID] = [2]string{n.SourceSite, n.Type}
	}
	return out
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// checkBackfilled checks that the records that count (failed attempts and
// parkings) carry their rows' sites and types after the migration.
func checkBackfilled(t *testing.T, db *DB, rows map[string][2]string) {
	t.Helper()
	r, err := db.reader().QueryContext(t.Context(), `SELECT notification_id::text, status, source_site, type FROM notification_audit`)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	counted := 0
	for r.Next() {
		var id, status, site, typ string
		if err := r.Scan(&id, &status, &site, &typ); err != nil {
			t.Fatal(err)
		}
		if status != "Retrying" && status != "Parked" {
			continue
		}
		counted++
		if want := rows[strings.ToLower(id)]; [2]string{site, typ} != want {
			t.Errorf("the %s record of %s carries %q, %q; want %q", status, id, site, typ, want)
		}
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	if counted != 2 {
		t.Errorf("%d records that count, want 2", counted)
	}
}
