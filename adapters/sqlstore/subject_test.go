package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
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
// for a keyword query of s, with sequential and plain index scans made
// unattractive (a small table is cheaper to scan).
func explainUsesTrigram(t *testing.T, s *DB, keyword string) bool {
	t.Helper()
	q := s.Notifications().listQuery(ports.Filter{Subject: keyword}, nil, 51, nil, false).String()
	return strings.Contains(pgPlan(t, s, q, "enable_seqscan", "enable_indexscan"), "notification_keys_trgm_idx")
}

// TestSubjectIndexPostgres checks that the keyword predicate is one the
// pg_trgm index serves, and that it holds for every ASCII character: each
// one alone, and each three in a row in the other case of their letters.
func TestSubjectIndexPostgres(t *testing.T) {
	s := newPostgresStore(t, postgresDSN(t))
	ctx := context.Background()
	if !explainUsesTrigram(t, s, "flooded") {
		t.Errorf("PostgreSQL cannot answer a keyword through notification_keys_trgm_idx")
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
		err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = 'notification_keys_trgm_idx'`, schema).Scan(&n)
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
