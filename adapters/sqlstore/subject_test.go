package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/siteline/outbox/migrations"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/storetest"
)

// The keyword search (DESIGN.md, "Keyword search"): the contract suite
// checks its answers on every database; these tests check the indexes behind
// it, which the suite cannot see.

// indexingStore is a SQLite Store whose Insert indexes the subjects before
// it returns, so that the suite finds rows through the trigram index: the
// background indexer waits a quarter of a second, longer than most of the
// suite's tests, which therefore find their rows above the index's mark.
type indexingStore struct{ *Notifications }

func (s indexingStore) Insert(ctx context.Context, ns []ports.Notification) ([]string, error) {
	ids, err := s.Notifications.Insert(ctx, ns)
	if err != nil {
		return ids, err
	}
	return ids, s.indexSubjects(ctx)
}

// TestContractSQLiteIndexed runs the suite with every row in the trigram
// index as soon as it is inserted.
func TestContractSQLiteIndexed(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T) storetest.Harness {
		s := newSQLiteStore(t)
		return storetest.Harness{Store: indexingStore{s.Notifications()}, Audit: s.Notifications()}
	})
}

// TestContractSQLiteKeywordScan runs the suite with no room for keyword
// candidates: every keyword that some subject may hold takes the scan.
func TestContractSQLiteKeywordScan(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T) storetest.Harness {
		s := newSQLiteStore(t)
		s.subjectQueryCap, s.subjectCountCap = 0, 0
		return storetest.Harness{Store: indexingStore{s.Notifications()}, Audit: s.Notifications()}
	})
}

func TestSubjectMatch(t *testing.T) {
	for _, tc := range []struct {
		text, want string
		ok         bool
	}{
		{"ab", "", false},
		{"é", "", false},
		{"éé", "", false}, // four bytes, two characters: no trigram
		{"a\xffb", "", false},
		{"abc", `"abc"`, true},
		{"Pump 7", `"Pum" AND "ump" AND "mp " AND "p 7"`, true},
		{"ababab", `"aba" AND "bab"`, true},
		{"abcABC", `"abc" AND "bcA" AND "cAB"`, true}, // ABC is abc to the index
		{`say "hi"`, `"say" AND "ay " AND "y """ AND " ""h" AND """hi" AND "hi"""`, true},
		{"Café", `"Caf" AND "afé"`, true},
		{"100%_", `"100" AND "00%" AND "0%_"`, true},
	} {
		got, ok := subjectMatch(tc.text)
		if got != tc.want || ok != tc.ok {
			t.Errorf("subjectMatch(%q) = %q, %v; want %q, %v", tc.text, got, ok, tc.want, tc.ok)
		}
	}
}

func TestASCIIFoldRegexp(t *testing.T) {
	for text, want := range map[string]string{
		"Pump 7":        `[pP][uU][mM][pP]\ 7`,
		"é É":           `é\ É`,
		`a.b*c\d`:       `[aA]\.[bB]\*[cC]\\[dD]`,
		`50%_[x]{2}|^$`: `50\%\_\[[xX]\]\{2\}\|\^\$`,
		"it's \"q\"":    `[iI][tT]\'[sS]\ \"[qQ]\"`,
	} {
		if got := asciiFoldRegexp(text); got != want {
			t.Errorf("asciiFoldRegexp(%q) = %q, want %q", text, got, want)
		}
	}
}

// subjectRows returns n rows created a millisecond apart whose subjects
// name equipment, a number and a condition, as central's are; every third
// is Delivered (and purgeable an hour after BaseTime), and one in five says
// "flooded".
func subjectRows(n int) []ports.Notification {
	equipment := []string{"Pump", "Tank", "Valve", "Boiler", "Fan"}
	conditions := []string{"pressure low", "level HIGH", "stopped", "door open", "flooded"}
	ns := make([]ports.Notification, n)
	for i := range ns {
		r := storetest.NewNotification(storetest.BaseTime.Add(time.Duration(i) * time.Millisecond))
		r.Subject = fmt.Sprintf("%s %d %s", equipment[i%len(equipment)], i%7, conditions[(i/5)%len(conditions)])
		if i%3 == 0 {
			r.Status, r.DeliveredAt = ports.StatusDelivered, r.CreatedAt
		}
		ns[i] = r
	}
	return ns
}

// stopIndexer stops the background indexer of s, so that a test decides
// when rows enter the index (mustIndexSubjects).
func stopIndexer(s *DB) { s.subjects.close() }

// mustIndexSubjects runs the background indexer's work now.
func mustIndexSubjects(t *testing.T, s *DB) {
	t.Helper()
	if err := s.indexSubjects(context.Background()); err != nil {
		t.Fatalf("index subjects: %v", err)
	}
}

// ftsCheck runs FTS5's integrity check of the trigram index against the
// notifications table (rank 1 compares it with the content, which the
// index must hold entirely: index the rows above the mark first), and checks
// that the mark is the last rowid.
func ftsCheck(t *testing.T, s *DB) {
	t.Helper()
	ctx := context.Background()
	_, err := s.writer().ExecContext(ctx,
		`INSERT INTO notifications_subject (notifications_subject, rank) VALUES ('integrity-check', 1)`)
	if err != nil {
		t.Fatalf("the trigram index disagrees with the table: %v", err)
	}
	var mark, last int64
	if err := s.reader().QueryRowContext(ctx, `SELECT indexed, (SELECT coalesce(max(rowid), 0) FROM notifications) FROM notifications_subject_state`).Scan(&mark, &last); err != nil {
		t.Fatalf("read the mark: %v", err)
	}
	if mark != last {
		t.Errorf("the index's mark is %d, the last rowid %d", mark, last)
	}
}

// ftsRows counts the rows the trigram index finds for keyword.
func ftsRows(t *testing.T, s *DB, keyword string) int {
	t.Helper()
	match, ok := subjectMatch(keyword)
	if !ok {
		t.Fatalf("no index query for %q", keyword)
	}
	var n int
	err := s.reader().QueryRowContext(context.Background(),
		`SELECT COUNT(*) FROM notifications_subject WHERE notifications_subject MATCH ?`, match).Scan(&n)
	if err != nil {
		t.Fatalf("query the trigram index: %v", err)
	}
	return n
}

// mustCountSubject counts the rows whose subject holds keyword.
func mustCountSubject(t *testing.T, s *DB, keyword string) int64 {
	t.Helper()
	n, err := s.Notifications().Count(context.Background(), ports.Filter{Subject: keyword})
	if err != nil {
		t.Fatalf("Count(%q): %v", keyword, err)
	}
	return n
}

// TestSubjectIndexFollowsWritesSQLite inserts from concurrent callers,
// repeats rows, rolls a group back and purges rows both in the index and
// above its mark, and checks that the index holds exactly the table's rows
// once the indexer has run, and that searches find the rows either way.
func TestSubjectIndexFollowsWritesSQLite(t *testing.T) {
	s := newSQLiteStore(t)
	stopIndexer(s)
	ctx := context.Background()
	ns := subjectRows(900)
	var wg sync.WaitGroup
	for c := range 6 {
		wg.Go(func() {
			part := ns[c*100 : (c+1)*100]
			if _, err := s.Notifications().Insert(ctx, part); err != nil {
				t.Errorf("insert: %v", err)
			}
			if got, err := s.Notifications().Insert(ctx, part[:10]); err != nil || len(got) != 0 {
				t.Errorf("insert again = %v, %v; want nothing inserted", got, err)
			}
		})
	}
	wg.Wait()
	mustIndexSubjects(t, s)
	ftsCheck(t, s)
	if n := ftsRows(t, s, "flooded"); n != 120 {
		t.Errorf("the index finds %d flooded rows, want 120", n)
	}

	// Rows a failed group inserted leave no trace.
	errBoom := errors.New("boom")
	err := s.group.do(ctx, func(ctx context.Context, c conn) error {
		if err := insertRows(ctx, s, c, ns[600:700]); err != nil {
			return err
		}
		if _, err := c.ExecContext(ctx, sqliteSubjectIndexTail); err != nil {
			return err
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("failing group = %v, want boom", err)
	}
	ftsCheck(t, s)

	// 300 rows above the mark, found all the same.
	if _, err := s.Notifications().Insert(ctx, ns[600:]); err != nil {
		t.Fatal(err)
	}
	if n := ftsRows(t, s, "flooded"); n != 120 {
		t.Errorf("the index finds %d flooded rows before the indexer runs, want 120", n)
	}
	if n := mustCountSubject(t, s, "FLOODED"); n != 180 {
		t.Errorf("Count(FLOODED) = %d, want 180 (60 above the mark)", n)
	}

	// The purge takes Delivered rows below and above the mark.
	purged, err := s.Notifications().Purge(ctx, storetest.BaseTime.Add(time.Hour), 1000)
	if err != nil || len(purged) != 300 {
		t.Fatalf("Purge = %d rows, %v; want the 300 Delivered", len(purged), err)
	}
	if n := mustCountSubject(t, s, "FLOODED"); n != 120 {
		t.Errorf("Count(FLOODED) after the purge = %d, want 120", n)
	}
	mustIndexSubjects(t, s)
	ftsCheck(t, s)
	if n := ftsRows(t, s, "flooded"); n != 120 {
		t.Errorf("after the purge the index finds %d flooded rows, want 120", n)
	}
}

// TestSubjectMarkFollowsTheTopSQLite purges the newest rows, whose rowids
// SQLite then gives to the next rows: the mark must come down with them, or
// those rows would be neither in the index nor above its mark.
func TestSubjectMarkFollowsTheTopSQLite(t *testing.T) {
	s := newSQLiteStore(t)
	stopIndexer(s)
	ctx := context.Background()
	ns := subjectRows(40)
	for i := range ns {
		ns[i].Status, ns[i].DeliveredAt = ports.StatusPending, time.Time{}
		if i >= 30 {
			ns[i].Status, ns[i].DeliveredAt = ports.StatusDelivered, ns[i].CreatedAt
		}
	}
	if _, err := s.Notifications().Insert(ctx, ns[:40]); err != nil {
		t.Fatal(err)
	}
	mustIndexSubjects(t, s)
	if purged, err := s.Notifications().Purge(ctx, storetest.BaseTime.Add(time.Hour), 100); err != nil || len(purged) != 10 {
		t.Fatalf("Purge = %d rows, %v; want the newest 10", len(purged), err)
	}
	ftsCheck(t, s) // the mark came down to the last row left
	later := subjectRows(50)[40:]
	for i := range later {
		later[i].Subject = "Reactor 9 flooded"
	}
	if _, err := s.Notifications().Insert(ctx, later); err != nil {
		t.Fatal(err)
	}
	if n := mustCountSubject(t, s, "reactor 9"); n != 10 {
		t.Errorf("Count(reactor 9) above the mark = %d, want 10", n)
	}
	mustIndexSubjects(t, s)
	ftsCheck(t, s)
	if n := mustCountSubject(t, s, "reactor 9"); n != 10 {
		t.Errorf("Count(reactor 9) in the index = %d, want 10", n)
	}
}

// TestSubjectIndexerRunsSQLite checks that the background indexer indexes
// inserted rows without being asked.
func TestSubjectIndexerRunsSQLite(t *testing.T) {
	s := newSQLiteStore(t)
	ctx := context.Background()
	if _, err := s.Notifications().Insert(ctx, subjectRows(100)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for ftsRows(t, s, "flooded") != 20 {
		if time.Now().After(deadline) {
			t.Fatalf("the background indexer has not indexed the rows after 10 s")
		}
		<-poll.C
	}
	ftsCheck(t, s)
}

// TestSubjectPlansAgreeSQLite checks that the scan and the candidates, read
// from above the index's mark or from the index, give the same pages and
// counts, and that Query and Count take the path their caps say.
func TestSubjectPlansAgreeSQLite(t *testing.T) {
	s := newSQLiteStore(t)
	stopIndexer(s)
	ctx := context.Background()
	if _, err := s.Notifications().Insert(ctx, subjectRows(700)); err != nil {
		t.Fatal(err)
	}
	keywords := []string{"flooded", "pump 3", "VALVE 4 DOOR", "pressure", "p", "5 l", "nothing like it", "pump 3 x"}
	type answer struct {
		ids   []string
		next  string
		count int64
	}
	ask := func(keyword string, status bool) answer {
		t.Helper()
		f := ports.Filter{Subject: keyword}
		if status {
			f.Statuses = []ports.Status{ports.StatusDelivered}
		}
		p, err := s.Notifications().Query(ctx, f, ports.PageRequest{Limit: 25})
		if err != nil {
			t.Fatalf("Query %q: %v", keyword, err)
		}
		n, err := s.Notifications().Count(ctx, f)
		if err != nil {
			t.Fatalf("Count %q: %v", keyword, err)
		}
		var ids []string
		for _, r := range p.Items {
			ids = append(ids, r.ID)
		}
		return answer{ids, p.Next, n}
	}
	answers := func() map[string]answer {
		out := map[string]answer{}
		for _, kw := range keywords {
			for _, status := range []bool{false, true} {
				s.subjectQueryCap, s.subjectCountCap = 0, 0
				scan := ask(kw, status)
				s.subjectQueryCap, s.subjectCountCap = 1_000_000, 1_000_000
				cands := ask(kw, status)
				if !slices.Equal(scan.ids, cands.ids) || scan.next != cands.next || scan.count != cands.count {
					t.Errorf("%q (status filter %v): scan %d rows, next %q, count %d; candidates %d rows, next %q, count %d",
						kw, status, len(scan.ids), scan.next, scan.count, len(cands.ids), cands.next, cands.count)
				}
				out[fmt.Sprint(kw, status)] = cands
			}
		}
		return out
	}
	above := answers()
	mustIndexSubjects(t, s)
	indexed := answers()
	for k, a := range above {
		b := indexed[k]
		if !slices.Equal(a.ids, b.ids) || a.next != b.next || a.count != b.count {
			t.Errorf("%s: above the mark %d rows, count %d; in the index %d rows, count %d", k, len(a.ids), a.count, len(b.ids), b.count)
		}
	}

	// The caps choose the path: "flooded" has 140 candidates.
	s.subjectQueryCap, s.subjectCountCap = 140, 140
	if c, err := s.Notifications().subjectRowids(ctx, "flooded"); err != nil || c == nil || len(c.rowids) != 140 {
		t.Errorf("subjectRowids(flooded) under a cap of 140 = %v, %v; want 140 candidates", c, err)
	}
	if c, n, err := s.Notifications().subjectCount(ctx, "flooded"); err != nil || c == nil || n != 140 {
		t.Errorf("subjectCount(flooded) under a cap of 140 = %v, %d, %v; want the index query and 140", c, n, err)
	}
	s.subjectQueryCap, s.subjectCountCap = 139, 139
	if c, err := s.Notifications().subjectRowids(ctx, "flooded"); err != nil || c != nil {
		t.Errorf("subjectRowids(flooded) over a cap of 139 = %v, %v; want the scan (nil)", c, err)
	}
	if c, _, err := s.Notifications().subjectCount(ctx, "flooded"); err != nil || c != nil {
		t.Errorf("subjectCount(flooded) over a cap of 139 = %v, %v; want the scan (nil)", c, err)
	}
	for _, short := range []string{"fl", "é", "éé"} {
		if c, err := s.Notifications().subjectRowids(ctx, short); err != nil || c != nil {
			t.Errorf("subjectRowids(%q) = %v, %v; want the scan (nil): no trigram", short, c, err)
		}
	}
	if c, err := s.Notifications().subjectRowids(ctx, "zzz"); err != nil || c == nil || len(c.rowids) != 0 {
		t.Errorf("subjectRowids(zzz) = %v, %v; want no candidate", c, err)
	}
}

// TestSubjectBackfillSQLite applies 0004 to a database that holds rows
// already (undone by its down migration first) and checks that the backfill
// indexed them, and that rows inserted later are indexed too.
func TestSubjectBackfillSQLite(t *testing.T) {
	s := newSQLiteStore(t)
	ctx := context.Background()
	ns := subjectRows(300)
	if _, err := s.Notifications().Insert(ctx, ns[:200]); err != nil {
		t.Fatal(err)
	}
	fsys, err := migrations.FS(DriverSQLite)
	if err != nil {
		t.Fatal(err)
	}
	down, err := fs.ReadFile(fsys, "0004_subject_search.tx.down.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range append(splitStatements(string(down)), `DELETE FROM `+migrationsTable+` WHERE name = '0004'`) {
		if _, err := s.writer().ExecContext(ctx, stmt); err != nil {
			t.Fatalf("undo 0004: %s: %v", stmt, err)
		}
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate over 200 rows: %v", err)
	}
	wantMigrations(t, s)
	ftsCheck(t, s)
	if n := ftsRows(t, s, "flooded"); n != 40 {
		t.Errorf("after the backfill the index finds %d flooded rows, want 40", n)
	}
	if _, err := s.Notifications().Insert(ctx, ns[200:]); err != nil {
		t.Fatal(err)
	}
	mustIndexSubjects(t, s)
	ftsCheck(t, s)
	if n := ftsRows(t, s, "flooded"); n != 60 {
		t.Errorf("after more inserts the index finds %d flooded rows, want 60", n)
	}
	if n := mustCountSubject(t, s, "Flooded"); n != 60 {
		t.Errorf("Count(Flooded) = %d, want 60", n)
	}
}

// explainUsesTrigram reports whether PostgreSQL would read the trigram index
// for a keyword query of s, with sequential scans made unattractive (a small
// table is cheaper to scan).
func explainUsesTrigram(t *testing.T, s *DB, keyword string) bool {
	t.Helper()
	q := s.Notifications().listQuery(ports.Filter{Subject: keyword}, nil, 51, nil, false).String()
	ctx := context.Background()
	conn, err := s.reader().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.ExecContext(ctx, "RESET enable_seqscan") }()
	if _, err := conn.ExecContext(ctx, "SET enable_indexscan = off"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.ExecContext(ctx, "RESET enable_indexscan") }()
	rows, err := conn.QueryContext(ctx, "EXPLAIN "+q)
	if err != nil {
		t.Fatalf("explain: %v", err)
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
	return strings.Contains(plan.String(), "notification_subjects_trgm_idx")
}

// TestSubjectIndexPostgres checks that the keyword predicate is one the
// pg_trgm index serves, and that it holds for every ASCII character: each
// one alone, and each three in a row in the other case of their letters.
func TestSubjectIndexPostgres(t *testing.T) {
	s := newPostgresStore(t, postgresDSN(t))
	ctx := context.Background()
	if !explainUsesTrigram(t, s, "flooded") {
		t.Errorf("PostgreSQL cannot answer a keyword through notification_subjects_trgm_idx")
	}
	var ascii []byte
	for c := byte(1); c < 128; c++ {
		ascii = append(ascii, c)
	}
	n := storetest.NewNotification(storetest.BaseTime)
	n.Subject = string(ascii)
	other := storetest.NewNotification(storetest.BaseTime.Add(time.Second))
	other.Subject = "nothing to see"
	if _, err := s.Notifications().Insert(ctx, []ports.Notification{n, other}); err != nil {
		t.Fatal(err)
	}
	swap := func(b []byte) string {
		out := slices.Clone(b)
		for i, c := range out {
			switch {
			case 'a' <= c && c <= 'z':
				out[i] = c - 'a' + 'A'
			case 'A' <= c && c <= 'Z':
				out[i] = c - 'A' + 'a'
			}
		}
		return string(out)
	}
	for i := range ascii {
		keywords := []string{string(ascii[i : i+1])}
		if i+3 <= len(ascii) {
			keywords = append(keywords, swap(ascii[i:i+3]))
		}
		for _, kw := range keywords {
			p, err := s.Notifications().Query(ctx, ports.Filter{Subject: kw}, ports.PageRequest{Limit: 10})
			if err != nil {
				t.Fatalf("Query %q: %v", kw, err)
			}
			want := []string{n.ID}
			if strings.Contains("nothing to see", strings.ToLower(kw)) {
				want = []string{other.ID, n.ID}
			}
			var got []string
			for _, r := range p.Items {
				got = append(got, r.ID)
			}
			if !slices.Equal(got, want) {
				t.Errorf("Query %q = %v, want %v", kw, got, want)
			}
		}
	}
}

// TestSubjectMigrationWithoutTrigramPostgres migrates, in a database of its
// own where pg_trgm is not installed, as a user who may not install it: the
// migration succeeds without the index and the keyword search still answers.
// Then a user who may install it migrates another schema of that database,
// which gets the extension and the index; and the first user migrates a
// third schema, without the index, as the extension's schema is closed to it.
func TestSubjectMigrationWithoutTrigramPostgres(t *testing.T) {
	server := postgresDSN(t)
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(server)
	if err != nil {
		t.Fatal(err)
	}
	admin := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = admin.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	dbName, role := "outbox_t_"+suffix, "outbox_t_"+suffix
	for _, stmt := range []string{"CREATE DATABASE " + dbName, "CREATE ROLE " + role + " LOGIN"} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		for _, stmt := range []string{"DROP DATABASE IF EXISTS " + dbName + " WITH (FORCE)", "DROP ROLE IF EXISTS " + role} {
			if _, err := admin.ExecContext(context.Background(), stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	dsn := func(user, schema string) string {
		u, err := url.Parse(server)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.User(user)
		u.Path = "/" + dbName
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	super := cfg.User
	db, err := sql.Open("pgx", dsn(super, "public"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, stmt := range []string{"CREATE SCHEMA app AUTHORIZATION " + role, "CREATE SCHEMA app2", "CREATE SCHEMA app3 AUTHORIZATION " + role} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	open := func(user, schema string) *DB {
		s, err := Open(ctx, Config{Driver: DriverPostgres, DSN: dsn(user, schema)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		if err := s.Migrate(ctx); err != nil {
			t.Fatalf("Migrate as %s: %v", user, err)
		}
		wantMigrations(t, s)
		return s
	}
	hasIndex := func(schema string) bool {
		var n int
		err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = 'notification_subjects_trgm_idx'`, schema).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	plain := open(role, "app")
	if hasIndex("app") {
		t.Errorf("a user who may not install pg_trgm got the trigram index")
	}
	rows := subjectRows(50)
	if _, err := plain.Notifications().Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if n, err := plain.Notifications().Count(ctx, ports.Filter{Subject: "FLOODED"}); err != nil || n != 10 {
		t.Errorf("Count(FLOODED) without the index = %d, %v; want 10", n, err)
	}

	full := open(super, "app2")
	if !hasIndex("app2") {
		t.Errorf("a user who may install pg_trgm got no trigram index")
	}
	if !explainUsesTrigram(t, full, "flooded") {
		t.Errorf("PostgreSQL cannot answer a keyword through the index the migration made")
	}

	// pg_trgm is now installed, in app2, which the first user may not use.
	open(role, "app3")
	if hasIndex("app3") {
		t.Errorf("a user who may not use the schema of pg_trgm got the trigram index")
	}
}

// TestLikeEscapeFold: MS SQL's pattern brackets the cases of ASCII letters,
// escapes LIKE's wildcards, and leaves the bytes of other characters whole.
func TestLikeEscapeFold(t *testing.T) {
	for text, want := range map[string]string{
		"Pump":     "[pP][uU][mM][pP]",
		"café 5%_": "[cC][aA][fF]é 5\\%\\_",
		"[x]\\":    "\\[[xX]]\\\\",
	} {
		if got := likeEscapeFold(text); got != want {
			t.Errorf("likeEscapeFold(%q) = %q, want %q", text, got, want)
		}
	}
}

// subjectTable returns notification_subjects of s as id → subject, and as
// id → the transaction that wrote the row's version (xmin).
func subjectTable(t *testing.T, s *DB) (subjects, writers map[string]string) {
	t.Helper()
	rows, err := s.writer().QueryContext(context.Background(), `SELECT id::text, subject, xmin::text FROM notification_subjects`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	subjects, writers = make(map[string]string), make(map[string]string)
	for rows.Next() {
		var id, subject, xmin string
		if err := rows.Scan(&id, &subject, &xmin); err != nil {
			t.Fatal(err)
		}
		subjects[id], writers[id] = subject, xmin
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return subjects, writers
}

// wantSubjects checks that notification_subjects holds exactly the subjects
// of want (id → subject).
func wantSubjects(t *testing.T, s *DB, want map[string]string) {
	t.Helper()
	got, _ := subjectTable(t, s)
	if !maps.Equal(got, want) {
		t.Errorf("notification_subjects holds %d rows, want %d: %v, want %v", len(got), len(want), got, want)
	}
}

// TestSubjectTablePostgres: on PostgreSQL the keyword search reads
// notification_subjects, which the triggers of migration 0010 keep equal to
// the notifications' ids and subjects through every way rows come and go
// (the COPY of a batch, the insert that skips stored ids, a purge, an
// update of a subject, TRUNCATE), and which no recorded outcome touches:
// the trigram index is on that table, not on the notifications.
func TestSubjectTablePostgres(t *testing.T) {
	s := newPostgresStore(t, postgresDSN(t))
	ctx := context.Background()
	var gin int
	if err := s.writer().QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_indexes WHERE schemaname = current_schema() `+
		`AND tablename = 'notifications' AND indexdef LIKE '%USING gin%'`).Scan(&gin); err != nil || gin != 0 {
		t.Errorf("GIN indexes on notifications = %d, %v; want 0 (the trigram index is on notification_subjects)", gin, err)
	}
	if !explainUsesTrigram(t, s, "flooded") {
		t.Errorf("PostgreSQL cannot answer a keyword through notification_subjects_trgm_idx")
	}

	want := make(map[string]string)
	rows := subjectRows(40)
	for i := range rows {
		rows[i].Status, rows[i].DeliveredAt = ports.StatusPending, time.Time{}
	}
	if _, err := s.Notifications().Insert(ctx, rows[:20]); err != nil { // one COPY
		t.Fatal(err)
	}
	// Stored ids among new ones: the insert that skips them.
	if ids, err := s.Notifications().Insert(ctx, rows[10:]); err != nil || len(ids) != 20 {
		t.Fatalf("Insert of 10 stored and 20 new rows = %d ids, %v; want 20", len(ids), err)
	}
	for _, r := range rows {
		want[strings.ToLower(r.ID)] = r.Subject
	}
	wantSubjects(t, s, want)

	// Outcomes: claimed and recorded, the subjects' table untouched.
	_, before := subjectTable(t, s)
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
	if _, after := subjectTable(t, s); !maps.Equal(after, before) {
		t.Errorf("recording outcomes wrote rows of notification_subjects: versions %v, before %v", after, before)
	}
	if n, err := s.Notifications().Count(ctx, ports.Filter{Subject: "FLOODED", Statuses: []ports.Status{ports.StatusDelivered}}); err != nil || n != 5 {
		t.Errorf("Count(FLOODED, Delivered) = %d, %v; want 5", n, err)
	}

	// A purge of the delivered rows takes their subjects with them.
	purged, err := s.Notifications().Purge(ctx, storetest.BaseTime.Add(2*time.Hour), 15)
	if err != nil || len(purged) != 15 {
		t.Fatalf("Purge = %d rows, %v; want 15", len(purged), err)
	}
	for _, id := range purged {
		delete(want, strings.ToLower(id))
	}
	wantSubjects(t, s, want)

	// Nothing in the outbox writes a subject; an update by hand is followed.
	var id string
	for id = range want {
		break
	}
	if _, err := s.writer().ExecContext(ctx, `UPDATE notifications SET subject = 'Kettle boiling' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	want[id] = "Kettle boiling"
	wantSubjects(t, s, want)
	if p, err := s.Notifications().Query(ctx, ports.Filter{Subject: "kettle"}, ports.PageRequest{Limit: 10}); err != nil || len(p.Items) != 1 || !strings.EqualFold(p.Items[0].ID, id) {
		t.Errorf("Query(kettle) = %+v, %v; want the row of %s", p.Items, err, id)
	}

	// An update of an id is followed too, and a temporary table of the
	// same name in the writer's session takes no row of it.
	conn, err := s.writer().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `CREATE TEMP TABLE notification_subjects (id uuid, subject text)`); err != nil {
		t.Fatal(err)
	}
	moved := strings.ToLower(storetest.NewNotification(storetest.BaseTime).ID)
	if _, err := conn.ExecContext(ctx, `UPDATE notifications SET id = $1 WHERE id = $2`, moved, id); err != nil {
		t.Fatal(err)
	}
	fresh := storetest.NewNotification(storetest.BaseTime.Add(3 * time.Hour))
	fresh.Subject = "Mixer jammed"
	if _, err := conn.ExecContext(ctx, `INSERT INTO notifications (id, subject, status, created_at) VALUES ($1, $2, 'Pending', now())`,
		fresh.ID, fresh.Subject); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, `DROP TABLE pg_temp.notification_subjects`); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
	want[moved] = want[id]
	delete(want, id)
	want[strings.ToLower(fresh.ID)] = fresh.Subject
	wantSubjects(t, s, want)

	if _, err := s.writer().ExecContext(ctx, `TRUNCATE notifications`); err != nil {
		t.Fatal(err)
	}
	wantSubjects(t, s, map[string]string{})
	if _, err := s.Notifications().Insert(ctx, rows[:5]); err != nil { // the same ids again
		t.Fatalf("Insert after TRUNCATE: %v", err)
	}
	clear(want)
	for _, r := range rows[:5] {
		want[strings.ToLower(r.ID)] = r.Subject
	}
	wantSubjects(t, s, want)
}

// postgresAt0009 opens a store on a fresh PostgreSQL schema migrated up to
// 0009, the last migration before the table of subjects, and returns it
// with the schema's DSN.
func postgresAt0009(t *testing.T) (*DB, string) {
	t.Helper()
	dsn := newPostgresSchema(t, postgresDSN(t))
	s, err := Open(context.Background(), Config{Driver: DriverPostgres, DSN: dsn}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	legacyMigrate(t, s, "0009_throughput")
	return s, dsn
}

// TestSubjectTableMigrationPostgres migrates a database of 0009 that holds
// notifications: 0010 copies their subjects into notification_subjects and
// moves the trigram index there; rolled back, the index is on the
// notifications again and the table is gone; migrated again, every subject
// is back.
func TestSubjectTableMigrationPostgres(t *testing.T) {
	ctx := context.Background()
	s, _ := postgresAt0009(t)
	rows := subjectRows(30)
	if _, err := s.Notifications().Insert(ctx, rows); err != nil {
		t.Fatal(err)
	}
	want := make(map[string]string)
	for _, r := range rows {
		want[strings.ToLower(r.ID)] = r.Subject
	}
	index := func(name string) bool {
		var n int
		if err := s.writer().QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_indexes WHERE schemaname = current_schema() AND indexname = $1`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	if !index("notifications_subject_trgm_idx") {
		t.Fatal("no trigram index on notifications at 0009")
	}

	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate from 0009: %v", err)
	}
	wantSubjects(t, s, want)
	if index("notifications_subject_trgm_idx") || !index("notification_subjects_trgm_idx") {
		t.Errorf("after 0010: trigram index on notifications %v, on notification_subjects %v; want false, true",
			index("notifications_subject_trgm_idx"), index("notification_subjects_trgm_idx"))
	}
	if n, err := s.Notifications().Count(ctx, ports.Filter{Subject: "FLOODED"}); err != nil || n != 5 {
		t.Errorf("Count(FLOODED) after 0010 = %d, %v; want 5", n, err)
	}

	down, err := s.MigrateDown(ctx)
	if err != nil || !slices.Equal(down, []string{"0010_subject_table"}) {
		t.Fatalf("MigrateDown = %q, %v; want 0010", down, err)
	}
	var table sql.NullString
	if err := s.writer().QueryRowContext(ctx, `SELECT to_regclass('notification_subjects')::text`).Scan(&table); err != nil || table.Valid {
		t.Errorf("notification_subjects after rolling 0010 back: %v, %v; want gone", table, err)
	}
	if !index("notifications_subject_trgm_idx") {
		t.Errorf("rolling 0010 back left no trigram index on notifications")
	}
	// A row stored meanwhile, with no trigger to copy it, is copied by the
	// next migration.
	extra := storetest.NewNotification(storetest.BaseTime.Add(time.Hour))
	extra.Subject = "Chiller flooded"
	if _, err := s.Notifications().Insert(ctx, []ports.Notification{extra}); err != nil {
		t.Fatal(err)
	}
	want[strings.ToLower(extra.ID)] = extra.Subject
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after rolling 0010 back: %v", err)
	}
	wantSubjects(t, s, want)
	if n, err := s.Notifications().Count(ctx, ports.Filter{Subject: "FLOODED"}); err != nil || n != 6 {
		t.Errorf("Count(FLOODED) after 0010 again = %d, %v; want 6", n, err)
	}
}

// TestSubjectTableMigrationWaitsForWritersPostgres: a writer that began
// before migration 0010 and commits while it waits for its lock has its row
// copied, though the migration's transaction is REPEATABLE READ (the
// server's default here), whose snapshot is taken at its first statement
// that reads.
func TestSubjectTableMigrationWaitsForWritersPostgres(t *testing.T) {
	ctx := context.Background()
	s, dsn := postgresAt0009(t)

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
	wantSubjects(t, s, map[string]string{strings.ToLower(row.ID): "Pump flooded"})
}

// TestSubjectTableGrantsPostgres: a role that reads and writes the
// notifications through grants (not their owner) keeps doing so across
// migration 0010, which its owner runs: the table of subjects gets the
// notifications' grants, and the triggers, which run with the writer's
// rights, write it.
func TestSubjectTableGrantsPostgres(t *testing.T) {
	ctx := context.Background()
	s, dsn := postgresAt0009(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	role := "outbox_app_" + hex.EncodeToString(b[:])
	var schema string
	if err := s.writer().QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		"CREATE ROLE " + role + " LOGIN",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + role,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schema + " TO " + role,
	} {
		if _, err := s.writer().ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		for _, stmt := range []string{"DROP OWNED BY " + role, "DROP ROLE " + role} {
			if _, err := s.writer().ExecContext(context.Background(), stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
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
	rows := subjectRows(30)
	if _, err := app.Notifications().Insert(ctx, rows); err != nil {
		t.Fatalf("Insert as a role with grants: %v", err)
	}
	if n, err := app.Notifications().Count(ctx, ports.Filter{Subject: "FLOODED"}); err != nil || n != 5 {
		t.Errorf("Count(FLOODED) as a role with grants = %d, %v; want 5", n, err)
	}
	purged, err := app.Notifications().Purge(ctx, storetest.BaseTime.Add(time.Hour), 100)
	if err != nil || len(purged) != 10 {
		t.Fatalf("Purge as a role with grants = %d rows, %v; want the 10 delivered", len(purged), err)
	}
	want := make(map[string]string)
	for _, r := range rows {
		if !slices.ContainsFunc(purged, func(id string) bool { return strings.EqualFold(id, r.ID) }) {
			want[strings.ToLower(r.ID)] = r.Subject
		}
	}
	wantSubjects(t, s, want)
}
