package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/storetest"
)

// PostgreSQL keeps the keys of the notifications, the columns no outcome
// changes, in notification_keys with the indexes that order and filter the
// lists (migration 0011; DESIGN.md, "Indexes"). The contract suite checks
// the lists' answers on every database; these tests check the table behind
// them on PostgreSQL: that its triggers keep it equal to the notifications,
// that the lists read its indexes, and the migrations to it and back.

// keyColumns are the columns notification_keys copies from the
// notifications, as texts (the creation time in Unix microseconds).
const keyColumns = `id::text, (extract(epoch FROM created_at) * 1000000)::bigint::text, list, type, subject`

// keyRows returns the keys that table (notifications or notification_keys)
// holds, as id → the other columns joined by "|".
func keyRows(t *testing.T, s *DB, table string) map[string]string {
	t.Helper()
	rows, err := s.writer().QueryContext(context.Background(), `SELECT `+keyColumns+` FROM `+table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := make(map[string]string)
	for rows.Next() {
		var id, created, list, typ, subject string
		if err := rows.Scan(&id, &created, &list, &typ, &subject); err != nil {
			t.Fatal(err)
		}
		out[id] = strings.Join([]string{created, list, typ, subject}, "|")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// keysInStep checks that notification_keys holds the keys of exactly the
// notifications, of which there are n.
func keysInStep(t *testing.T, s *DB, n int) {
	t.Helper()
	want, got := keyRows(t, s, "notifications"), keyRows(t, s, "notification_keys")
	if len(want) != n {
		t.Errorf("notifications holds %d rows, want %d", len(want), n)
	}
	if !maps.Equal(got, want) {
		t.Errorf("notification_keys holds %d rows for %d notifications:\n%v\nwant\n%v", len(got), len(want), got, want)
	}
}

// textPairs returns the rows of query, which selects two texts, as the
// first → the second.
func textPairs(t *testing.T, s *DB, query string) map[string]string {
	t.Helper()
	rows, err := s.writer().QueryContext(context.Background(), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := make(map[string]string)
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// keyVersions returns notification_keys as id → the transaction that
// wrote the row's version (xmin).
func keyVersions(t *testing.T, s *DB) map[string]string {
	t.Helper()
	return textPairs(t, s, `SELECT id::text, xmin::text FROM notification_keys`)
}

// pgIndexes returns the names of the indexes of table in the schema of s,
// sorted.
func pgIndexes(t *testing.T, s *DB, table string) []string {
	t.Helper()
	rows, err := s.writer().QueryContext(context.Background(),
		`SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = $1 ORDER BY indexname`, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		out = append(out, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// pgTableExists reports whether the schema of s has table.
func pgTableExists(t *testing.T, s *DB, table string) bool {
	t.Helper()
	var name sql.NullString
	if err := s.writer().QueryRowContext(context.Background(), `SELECT to_regclass($1)::text`, table).Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name.Valid
}

// pgPlan returns PostgreSQL's plan of query, on a connection of s with each
// of the planner settings off turned off (enable_seqscan, ...): a small
// table is cheaper to scan or sort, so a test turns off what it wants the
// planner to do without.
func pgPlan(t *testing.T, s *DB, query string, off ...string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := s.reader().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, setting := range off {
		if _, err := conn.ExecContext(ctx, "SET "+setting+" = off"); err != nil {
			t.Fatal(err)
		}
		defer func() { _, _ = conn.ExecContext(ctx, "RESET "+setting) }()
	}
	rows, err := conn.QueryContext(ctx, "EXPLAIN "+query)
	if err != nil {
		t.Fatalf("explain %s: %v", query, err)
	}
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan.String()
}

// keyedRows returns subjectRows(n), Pending, spread over three sites, lists
// and types.
func keyedRows(n int) []ports.Notification {
	rows := subjectRows(n)
	for i := range rows {
		rows[i].Status, rows[i].DeliveredAt = ports.StatusPending, time.Time{}
		rows[i].SourceSite = fmt.Sprintf("site-%d", i%3)
		rows[i].List = fmt.Sprintf("list-%d", i%3)
		rows[i].Type = []string{"email", "webhook", "slack"}[i%3]
	}
	return rows
}

// The indexes of each table at the latest migration.
var (
	notificationsIndexes = []string{"notifications_claim_pending_idx", "notifications_claim_retrying_idx",
		"notifications_delivered_idx", "notifications_pkey", "notifications_site_created_idx", "notifications_status_created_idx"}
	keysIndexes = []string{"notification_keys_created_idx", "notification_keys_list_created_idx", "notification_keys_pkey",
		"notification_keys_trgm_idx", "notification_keys_type_created_idx"}
	// movedIndexes are the notifications' indexes that 0011 moves.
	movedIndexes = []string{"notifications_created_idx", "notifications_list_created_idx", "notifications_type_created_idx"}
)

// TestKeyTablePostgres: the triggers of migration 0011 keep
// notification_keys equal to the notifications' keys through every way rows
// come and go or change (the COPY of a batch, the insert that skips stored
// ids, a purge, an update of a key by hand, TRUNCATE), and no recorded
// outcome touches it; the notifications keep only the indexes of what an
// outcome changes.
func TestKeyTablePostgres(t *testing.T) {
	s := newPostgresStore(t, postgresDSN(t))
	ctx := context.Background()
	if got := pgIndexes(t, s, "notifications"); !slices.Equal(got, notificationsIndexes) {
		t.Errorf("indexes of notifications = %v, want %v", got, notificationsIndexes)
	}
	if got := pgIndexes(t, s, "notification_keys"); !slices.Equal(got, keysIndexes) {
		t.Errorf("indexes of notification_keys = %v, want %v", got, keysIndexes)
	}

	rows := keyedRows(40)
	if _, err := s.Notifications().Insert(ctx, rows[:20]); err != nil { // one COPY
		t.Fatal(err)
	}
	// Stored ids among new ones: the insert that skips them.
	if ids, err := s.Notifications().Insert(ctx, rows[10:]); err != nil || len(ids) != 20 {
		t.Fatalf("Insert of 10 stored and 20 new rows = %d ids, %v; want 20", len(ids), err)
	}
	keysInStep(t, s, 40)

	// Outcomes: claimed and recorded, the keys untouched.
	before := keyVersions(t, s)
	claimed, err := s.Notifications().Claim(ctx, ports.ClaimRequest{Owner: "node/1", Now: storetest.BaseTime.Add(time.Hour), Lease: time.Minute, Limit: 40})
	if err != nil || len(claimed) != 40 {
		t.Fatalf("Claim = %d rows, %v; want 40", len(claimed), err)
	}
	var updates []ports.Update
	for _, r := range claimed {
		at := storetest.BaseTime.Add(time.Hour)
		updates = append(updates, ports.Update{ID: r.ID, Status: ports.StatusDelivered, LastAttemptAt: at, DeliveredAt: at, UpdatedAt: at,
			Records: []ports.AuditRecord{{NotificationID: r.ID, At: at, Kind: ports.AuditDelivered, Status: ports.StatusDelivered, Actor: ports.ActorSystem}}})
	}
	if lost, err := s.Notifications().Record(ctx, "node/1", updates); err != nil || len(lost) != 0 {
		t.Fatalf("Record = %v, %v", lost, err)
	}
	if after := keyVersions(t, s); !maps.Equal(after, before) {
		t.Errorf("recording outcomes wrote rows of notification_keys: versions %v, before %v", after, before)
	}
	if n, err := s.Notifications().Count(ctx, ports.Filter{Subject: "FLOODED", Statuses: []ports.Status{ports.StatusDelivered}}); err != nil || n != 5 {
		t.Errorf("Count(FLOODED, Delivered) = %d, %v; want 5", n, err)
	}

	// A purge of the delivered rows takes their keys with them.
	purged, err := s.Notifications().Purge(ctx, storetest.BaseTime.Add(2*time.Hour), 15)
	if err != nil || len(purged) != 15 {
		t.Fatalf("Purge = %d rows, %v; want 15", len(purged), err)
	}
	keysInStep(t, s, 25)

	// Nothing in the outbox writes a key; an update by hand is followed,
	// and the lists find the row by its new keys.
	var id string
	if err := s.writer().QueryRowContext(ctx, `SELECT id::text FROM notifications LIMIT 1`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	for _, set := range []string{`subject = 'Kettle boiling'`, `list = 'kitchen'`, `type = 'teams'`,
		`created_at = created_at + interval '1 day'`} {
		if _, err := s.writer().ExecContext(ctx, `UPDATE notifications SET `+set+` WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
		keysInStep(t, s, 25)
	}
	for _, f := range []ports.Filter{{Subject: "kettle"}, {List: "kitchen"}, {Type: "teams"},
		{CreatedFrom: storetest.BaseTime.Add(12 * time.Hour)}} {
		if p, err := s.Notifications().Query(ctx, f, ports.PageRequest{Limit: 10}); err != nil || len(p.Items) != 1 || !strings.EqualFold(p.Items[0].ID, id) {
			t.Errorf("Query(%+v) = %+v, %v; want the row of %s", f, p.Items, err, id)
		}
	}

	// An update of an id is followed too, and a temporary table of the
	// same name in the writer's session takes no row of it.
	conn, err := s.writer().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `CREATE TEMP TABLE notification_keys (id uuid, created_at timestamptz, `+
		`list text, type text, subject text)`); err != nil {
		t.Fatal(err)
	}
	moved := strings.ToLower(storetest.NewNotification(storetest.BaseTime).ID)
	if _, err := conn.ExecContext(ctx, `UPDATE notifications SET id = $1 WHERE id = $2`, moved, id); err != nil {
		t.Fatal(err)
	}
	fresh := storetest.NewNotification(storetest.BaseTime.Add(3 * time.Hour))
	if _, err := conn.ExecContext(ctx, `INSERT INTO notifications (id, subject, status, created_at) VALUES ($1, 'Mixer jammed', 'Pending', now())`,
		fresh.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `DROP TABLE pg_temp.notification_keys`); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	keysInStep(t, s, 26)

	if _, err := s.writer().ExecContext(ctx, `TRUNCATE notifications`); err != nil {
		t.Fatal(err)
	}
	keysInStep(t, s, 0)
	if _, err := s.Notifications().Insert(ctx, rows[:5]); err != nil { // the same ids again
		t.Fatalf("Insert after TRUNCATE: %v", err)
	}
	keysInStep(t, s, 5)
}

// TestListsReadTheKeysIndexesPostgres: each list PostgreSQL orders by
// creation time reads an index in that order, with no sort: the keys' for
// no filter or a list or type filter (in either order, past a cursor), the
// notifications' for statuses or a site (several statuses each in its range
// of the status index, merged: however few rows match, no list walks the
// keys' creation index to find them); and a count that names only keys
// reads the keys alone.
func TestListsReadTheKeysIndexesPostgres(t *testing.T) {
	s := newPostgresStore(t, postgresDSN(t))
	if _, err := s.Notifications().Insert(context.Background(), keyedRows(30)); err != nil {
		t.Fatal(err)
	}
	notes := s.Notifications()
	cur := &cursor{createdAt: storetest.BaseTime.Add(10 * time.Millisecond), id: storetest.NewNotification(storetest.BaseTime).ID}
	parked := []ports.Status{ports.StatusParked}
	for _, c := range []struct {
		name   string
		f      ports.Filter
		after  *cursor
		oldest bool
		index  string // or several, split by "|"
	}{
		{"all", ports.Filter{}, nil, false, "notification_keys_created_idx"},
		{"all past a cursor", ports.Filter{}, cur, false, "notification_keys_created_idx"},
		{"all oldest first past a cursor", ports.Filter{}, cur, true, "notification_keys_created_idx"},
		{"list", ports.Filter{List: "list-1"}, cur, false, "notification_keys_list_created_idx"},
		{"type", ports.Filter{Type: "email"}, nil, true, "notification_keys_type_created_idx"},
		{"site", ports.Filter{SourceSite: "site-2"}, cur, false, "notifications_site_created_idx"},
		{"two statuses", ports.Filter{Statuses: []ports.Status{ports.StatusPending, ports.StatusParked}}, cur, false, "notifications_status_created_idx"},
		{"stuck", ports.Filter{StuckBefore: storetest.BaseTime}, cur, true, "notifications_status_created_idx"},
		{"list and status", ports.Filter{List: "list-1", Statuses: parked}, nil, false, "notification_keys_list_created_idx"},
		{"created", ports.Filter{CreatedFrom: storetest.BaseTime, CreatedTo: storetest.BaseTime.Add(time.Hour)}, nil, false, "notification_keys_created_idx"},
		{"status", ports.Filter{Statuses: parked}, cur, false, "notifications_status_created_idx"},
		{"status and site", ports.Filter{Statuses: parked, SourceSite: "site-2"}, nil, false, "notifications_status_created_idx|notifications_site_created_idx"},
	} {
		q := notes.listQuery(c.f, c.after, 51, nil, c.oldest).String()
		plan := pgPlan(t, s, q, "enable_seqscan", "enable_sort", "enable_bitmapscan")
		read := slices.ContainsFunc(strings.Split(c.index, "|"), func(index string) bool { return strings.Contains(plan, index) })
		if !read || strings.Contains(plan, "Sort  (cost") { // a sort node, not a Merge Append's key
			t.Errorf("%s: the plan reads no %s in order:\n%s\n%s", c.name, c.index, q, plan)
		}
	}
	for _, f := range []ports.Filter{{List: "list-1"}, {Type: "email", CreatedFrom: storetest.BaseTime}, {Subject: "flooded"}} {
		q := notes.countQuery(f, nil).String()
		if plan := pgPlan(t, s, q, "enable_seqscan"); strings.Contains(plan, "on notifications ") {
			t.Errorf("count of %+v reads the notifications:\n%s\n%s", f, q, plan)
		}
	}
}

// previousRelease checks, on a schema at 0011, what a node of the release
// before 0011 runs that names 0010's table of subjects: its keyword search
// (here finding want rows with "flooded") and its background ANALYZE.
// notification_subjects is a view of the keys for them.
func previousRelease(t *testing.T, s *DB, want int) {
	t.Helper()
	ctx := context.Background()
	var n int
	if err := s.writer().QueryRowContext(ctx, `SELECT COUNT(*) FROM "notifications" AS "n" WHERE `+
		`("id" IN (SELECT "id" FROM "notification_subjects" WHERE "subject" ~ $1))`, asciiFoldRegexp("FLOODED")).Scan(&n); err != nil || n != want {
		t.Errorf("the previous release's keyword count = %d, %v; want %d", n, err, want)
	}
	if _, err := s.writer().ExecContext(ctx, "ANALYZE notifications, notification_subjects"); err != nil {
		t.Errorf("the previous release's ANALYZE: %v", err)
	}
}

// roleStore makes a login role of a random name with prefix, runs stmts
// as s's user (each a format of the schema of s and the role), and opens a
// store on dsn as that role. The role and what it owns go when the test
// ends.
func roleStore(t *testing.T, s *DB, dsn, prefix string, stmts ...string) (string, *DB) {
	t.Helper()
	ctx := context.Background()
	var b [6]byte
	_, _ = rand.Read(b[:])
	role := prefix + hex.EncodeToString(b[:])
	var schema string
	if err := s.writer().QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	if _, err := s.writer().ExecContext(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, stmt := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := s.writer().ExecContext(context.Background(), stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	for _, stmt := range stmts {
		stmt = fmt.Sprintf(stmt, schema, role)
		if _, err := s.writer().ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	app, err := Open(ctx, Config{Driver: DriverPostgres, DSN: u.String()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Close() })
	return role, app
}

// TestKeyTableOwnerPostgres: when a role other than the owner of the
// notifications runs the migration (a superuser, say), the owner keeps
// writing and reading: the keys' table and the view get the notifications'
// owner.
func TestKeyTableOwnerPostgres(t *testing.T) {
	ctx := context.Background()
	s, dsn := postgresAt(t, "0010_subject_table")
	role, app := roleStore(t, s, dsn, "outbox_own_", "GRANT USAGE, CREATE ON SCHEMA %[1]s TO %[2]s",
		`DO $$ DECLARE r record; BEGIN FOR r IN SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r' LOOP
		   EXECUTE format('ALTER TABLE %%I OWNER TO %[2]s', r.relname); END LOOP; END $$`)
	rows := subjectRows(30)
	if _, err := app.Notifications().Insert(ctx, rows[:15]); err != nil {
		t.Fatalf("Insert by the owner at 0010: %v", err)
	}
	if err := s.Migrate(ctx); err != nil { // as the server's superuser
		t.Fatalf("Migrate: %v", err)
	}
	for _, rel := range []string{"notification_keys", "notification_subjects"} {
		var owner string
		if err := s.writer().QueryRowContext(ctx, `SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = $1::regclass`, rel).Scan(&owner); err != nil || owner != role {
			t.Errorf("owner of %s = %q, %v; want %s, the notifications' owner", rel, owner, err, role)
		}
	}
	if _, err := app.Notifications().Insert(ctx, rows[15:]); err != nil {
		t.Errorf("Insert by the owner after 0011: %v", err)
	}
	if p, err := app.Notifications().Query(ctx, ports.Filter{}, ports.PageRequest{Limit: 50}); err != nil || len(p.Items) != 30 {
		t.Errorf("Query by the owner after 0011 = %d rows, %v; want 30", len(p.Items), err)
	}
	keysInStep(t, s, 30)
}

// postgresAt opens a store on a fresh PostgreSQL schema migrated up to the
// migration named last, and returns it with the schema's DSN.
func postgresAt(t *testing.T, last string) (*DB, string) {
	t.Helper()
	dsn := newPostgresSchema(t, postgresDSN(t))
	s, err := Open(context.Background(), Config{Driver: DriverPostgres, DSN: dsn}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	legacyMigrate(t, s, last)
	return s, dsn
}

// subjectsAt0010 returns 0010's notification_subjects as id → subject.
func subjectsAt0010(t *testing.T, s *DB) map[string]string {
	t.Helper()
	return textPairs(t, s, `SELECT id::text, subject FROM notification_subjects`)
}

// subjectsOf returns the subjects of ns as id → subject.
func subjectsOf(ns []ports.Notification) map[string]string {
	out := make(map[string]string, len(ns))
	for _, n := range ns {
		out[strings.ToLower(n.ID)] = n.Subject
	}
	return out
}

// TestKeyTableMigrationPostgres migrates a database of 0010 that holds
// notifications: 0011 copies their keys into notification_keys and moves
// the three indexes and the trigram index there, and a node of the
// previous release keeps its keyword search; rolled back, the indexes
// are on the notifications again and 0010's table of subjects is back,
// kept by 0010's triggers; migrated again, every key is back.
func TestKeyTableMigrationPostgres(t *testing.T) {
	ctx := context.Background()
	s, _ := postgresAt(t, "0010_subject_table")
	rows := keyedRows(30)
	if _, err := s.Notifications().Insert(ctx, rows[:29]); err != nil {
		t.Fatal(err)
	}

	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate from 0010: %v", err)
	}
	keysInStep(t, s, 29)
	previousRelease(t, s, 5)
	if got := pgIndexes(t, s, "notifications"); !slices.Equal(got, notificationsIndexes) {
		t.Errorf("after 0011, indexes of notifications = %v, want %v", got, notificationsIndexes)
	}
	if got := pgIndexes(t, s, "notification_keys"); !slices.Equal(got, keysIndexes) {
		t.Errorf("after 0011, indexes of notification_keys = %v, want %v", got, keysIndexes)
	}
	counts := func(when string, list2 int64) {
		t.Helper()
		if n, err := s.Notifications().Count(ctx, ports.Filter{List: "list-1", Subject: "FLOODED"}); err != nil || n != 1 {
			t.Errorf("Count(list-1, FLOODED) %s = %d, %v; want 1", when, n, err)
		}
		if n, err := s.Notifications().Count(ctx, ports.Filter{List: "list-2"}); err != nil || n != list2 {
			t.Errorf("Count(list-2) %s = %d, %v; want %d", when, n, err, list2)
		}
	}
	counts("after 0011", 9)

	down, err := s.MigrateDown(ctx)
	if err != nil || !slices.Equal(down, []string{"0011_key_table"}) {
		t.Fatalf("MigrateDown = %q, %v; want 0011", down, err)
	}
	if pgTableExists(t, s, "notification_keys") {
		t.Errorf("notification_keys after rolling 0011 back: still there")
	}
	if got, want := subjectsAt0010(t, s), subjectsOf(rows[:29]); !maps.Equal(got, want) {
		t.Errorf("notification_subjects after rolling 0011 back = %v, want %v", got, want)
	}
	if got, want := pgIndexes(t, s, "notification_subjects"), []string{"notification_subjects_pkey", "notification_subjects_trgm_idx"}; !slices.Equal(got, want) {
		t.Errorf("after rolling 0011 back, indexes of notification_subjects = %v, want %v", got, want)
	}
	want := slices.Sorted(slices.Values(append(slices.Clone(notificationsIndexes), movedIndexes...)))
	if got := pgIndexes(t, s, "notifications"); !slices.Equal(got, want) {
		t.Errorf("after rolling 0011 back, indexes of notifications = %v, want %v", got, want)
	}
	// 0010's triggers keep its table again; a row stored now is copied by
	// the next migration.
	if _, err := s.writer().ExecContext(ctx, `INSERT INTO notifications (id, subject, status, created_at, list) VALUES ($1, $2, 'Pending', $3, $4)`,
		rows[29].ID, rows[29].Subject, rows[29].CreatedAt, rows[29].List); err != nil {
		t.Fatal(err)
	}
	if got, want := subjectsAt0010(t, s), subjectsOf(rows); !maps.Equal(got, want) {
		t.Errorf("notification_subjects at 0010 after an insert = %v, want %v", got, want)
	}

	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after rolling 0011 back: %v", err)
	}
	keysInStep(t, s, 30)
	counts("after 0011 again", 10)
}

// TestKeyTableMigrationFrom0009Postgres migrates a database of 0009, before
// either table, in one group: the keys are copied and every index moved;
// rolled back, the notifications have their indexes, the trigram index
// among them, and neither table is left.
func TestKeyTableMigrationFrom0009Postgres(t *testing.T) {
	ctx := context.Background()
	s, _ := postgresAt(t, "0009_throughput")
	if _, err := s.Notifications().Insert(ctx, keyedRows(30)); err != nil {
		t.Fatal(err)
	}
	at0009 := pgIndexes(t, s, "notifications")
	if !slices.Contains(at0009, "notifications_subject_trgm_idx") {
		t.Fatalf("no trigram index on notifications at 0009: %v", at0009)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate from 0009: %v", err)
	}
	keysInStep(t, s, 30)
	if got := pgIndexes(t, s, "notification_keys"); !slices.Equal(got, keysIndexes) {
		t.Errorf("indexes of notification_keys = %v, want %v", got, keysIndexes)
	}
	if n, err := s.Notifications().Count(ctx, ports.Filter{Subject: "FLOODED"}); err != nil || n != 5 {
		t.Errorf("Count(FLOODED) after 0011 = %d, %v; want 5", n, err)
	}

	down, err := s.MigrateDown(ctx)
	if err != nil || !slices.Equal(down, []string{"0011_key_table", "0010_subject_table"}) {
		t.Fatalf("MigrateDown = %q, %v; want 0011 and 0010", down, err)
	}
	for _, table := range []string{"notification_keys", "notification_subjects"} {
		if pgTableExists(t, s, table) {
			t.Errorf("%s after rolling back to 0009: still there", table)
		}
	}
	if got := pgIndexes(t, s, "notifications"); !slices.Equal(got, at0009) {
		t.Errorf("indexes of notifications after rolling back to 0009 = %v, want %v", got, at0009)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	keysInStep(t, s, 30)
}

// TestKeyTableMigrationWaitsForWritersPostgres: a writer that began before
// the migration and commits while it waits for its lock has its keys
// copied, though the migration's transaction is REPEATABLE READ (whose
// snapshot is taken at its first statement that reads): from 0009, where
// 0010 takes the lock first, and from 0010, where 0011 does.
func TestKeyTableMigrationWaitsForWritersPostgres(t *testing.T) {
	for _, from := range []string{"0009_throughput", "0010_subject_table"} {
		t.Run(from, func(t *testing.T) {
			ctx := context.Background()
			s, dsn := postgresAt(t, from)

			writer, err := s.writer().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = writer.Rollback() }()
			row := storetest.NewNotification(storetest.BaseTime)
			if _, err := writer.ExecContext(ctx, `INSERT INTO notifications (id, subject, status, created_at) VALUES ($1, 'Pump flooded', 'Pending', now())`, row.ID); err != nil {
				t.Fatal(err)
			}

			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			q := u.Query()
			q.Set("default_transaction_isolation", "repeatable read")
			u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // pgx reads no '+' as a space
			m, err := Open(ctx, Config{Driver: DriverPostgres, DSN: u.String()}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Close() })
			migrated := make(chan error, 1)
			go func() { migrated <- m.Migrate(ctx) }()
			// The migration waits for the writer's lock on notifications.
			deadline := time.Now().Add(time.Minute)
			for {
				var waiting int
				if err := s.reader().QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_locks WHERE relation = 'notifications'::regclass AND NOT granted`).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
				if waiting > 0 {
					break
				}
				select {
				case err := <-migrated:
					t.Fatalf("Migrate ended while a writer of notifications was open: %v", err)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatal("the migration never waited for the writer's lock")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := writer.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := <-migrated; err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			keysInStep(t, s, 1)
		})
	}
}

// TestKeyTableGrantsPostgres: a role that reads and writes the
// notifications through grants (not their owner) keeps doing so across the
// migrations, which their owner runs: the table of keys gets the
// notifications' grants, and the triggers, which run with the writer's
// rights, write it.
func TestKeyTableGrantsPostgres(t *testing.T) {
	for _, from := range []string{"0009_throughput", "0010_subject_table"} {
		t.Run(from, func(t *testing.T) {
			ctx := context.Background()
			s, dsn := postgresAt(t, from)
			_, app := roleStore(t, s, dsn, "outbox_app_", "GRANT USAGE ON SCHEMA %[1]s TO %[2]s",
				"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %[1]s TO %[2]s")
			if err := s.Migrate(ctx); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			rows := subjectRows(30)
			if _, err := app.Notifications().Insert(ctx, rows); err != nil {
				t.Fatalf("Insert as a role with grants: %v", err)
			}
			if n, err := app.Notifications().Count(ctx, ports.Filter{Subject: "FLOODED"}); err != nil || n != 5 {
				t.Errorf("Count(FLOODED) as a role with grants = %d, %v; want 5", n, err)
			}
			if p, err := app.Notifications().Query(ctx, ports.Filter{}, ports.PageRequest{Limit: 50}); err != nil || len(p.Items) != 30 {
				t.Errorf("Query as a role with grants = %d rows, %v; want 30", len(p.Items), err)
			}
			previousRelease(t, app, 5)
			purged, err := app.Notifications().Purge(ctx, storetest.BaseTime.Add(time.Hour), 100)
			if err != nil || len(purged) != 10 {
				t.Fatalf("Purge as a role with grants = %d rows, %v; want the 10 delivered", len(purged), err)
			}
			keysInStep(t, s, 20)
		})
	}
}
