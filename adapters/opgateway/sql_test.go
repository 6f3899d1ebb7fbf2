package opgateway_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/siteline/outbox/adapters/opgateway"
	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/ports"
)

// database is a real database the tests write to: its driver, the DSN the
// gateway reads through a reference, and a handle of the test's own.
type database struct {
	driver string
	dsn    string
	db     *sql.DB
	// ph returns the n-th placeholder (from 1).
	ph func(n int) string
}

func sqliteDatabase(t testing.TB) database {
	t.Helper()
	dsn := "file:" + filepath.Join(t.TempDir(), "plant.db") + "?_pragma=busy_timeout(5000)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return database{opgateway.DriverSQLite, dsn, db, func(int) string { return "?" }}
}

// postgresDatabase creates a database of its own on the shared server of
// OUTBOX_TEST_POSTGRES_DSN (so that its marker table is the test's alone)
// and drops it at the end; it skips without that server.
func postgresDatabase(t testing.TB) database {
	t.Helper()
	admin := os.Getenv("OUTBOX_TEST_POSTGRES_DSN")
	if admin == "" {
		t.Skip("OUTBOX_TEST_POSTGRES_DSN is not set")
	}
	adb, err := sql.Open("pgx", admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adb.Close() })
	name := "opgw_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	if _, err := adb.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	dsn := strings.Replace(admin, "/postgres?", "/"+name+"?", 1)
	if dsn == admin {
		t.Fatalf("cannot name another database in %s", admin)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Close()
		if _, err := adb.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return database{opgateway.DriverPostgres, dsn, db, func(n int) string { return fmt.Sprintf("$%d", n) }}
}

// connect returns a gateway with one connection, "plant", to d, its DSN
// read from a variable.
func (d database) connect(t testing.TB, exactlyOnce bool) *opgateway.Gateway {
	t.Helper()
	t.Setenv("OUTBOX_SECRET_PLANT_DSN", d.dsn)
	return newGateway(t, opgateway.Config{Connections: []opgateway.Connection{{
		Name: "plant", Driver: d.driver, DSN: "env:OUTBOX_SECRET_PLANT_DSN", ExactlyOnce: exactlyOnce,
	}}}, policy(t.TempDir()))
}

func (d database) exec(t testing.TB, q string) {
	t.Helper()
	if _, err := d.db.ExecContext(t.Context(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func (d database) count(t testing.TB, q string) int {
	t.Helper()
	var n int
	if err := d.db.QueryRowContext(t.Context(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func writeOp(sqlText, args string) ports.Operation {
	return ports.Operation{ID: uuid.Must(uuid.NewV7()).String(), Kind: ports.OpWrite, Target: "plant",
		Payload: ports.OpPayload{SQL: sqlText, Args: json.RawMessage(args)}}
}

var databases = []struct {
	name string
	open func(testing.TB) database
}{{"sqlite", sqliteDatabase}, {"postgres", postgresDatabase}}

func TestWriteAndClassify(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t)
			db.exec(t, `CREATE TABLE readings (id integer PRIMARY KEY, tag text NOT NULL, value double precision, ok boolean)`)
			g := db.connect(t, false)
			insert := fmt.Sprintf("INSERT INTO readings (id, tag, value, ok) VALUES (%s, %s, %s, %s)", db.ph(1), db.ph(2), db.ph(3), db.ph(4))

			op := writeOp(insert, `[1, "TT-101", 21.5, true]`)
			if err := g.Check(op); err != nil {
				t.Fatalf("Check: %v", err)
			}
			res := g.Attempt(t.Context(), op)
			if res.Outcome != ports.OutcomeSuccess || string(res.Answer) != `{"rows_affected":1}` {
				t.Fatalf("insert: %+v", res)
			}
			var tag string
			var value float64
			if err := db.db.QueryRowContext(t.Context(), "SELECT tag, value FROM readings WHERE id = 1").Scan(&tag, &value); err != nil || tag != "TT-101" || value != 21.5 {
				t.Fatalf("the row: %q %v %v", tag, value, err)
			}
			res = g.Attempt(t.Context(), writeOp(insert, `[2, "TT-102", null, null]`))
			if res.Outcome != ports.OutcomeSuccess {
				t.Fatalf("insert with nulls: %+v", res)
			}
			res = g.Attempt(t.Context(), writeOp("UPDATE readings SET value = value + 1 WHERE id >= "+db.ph(1), `[0]`))
			if res.Outcome != ports.OutcomeSuccess || string(res.Answer) != `{"rows_affected":2}` {
				t.Fatalf("update: %+v", res)
			}

			for _, c := range []struct {
				what, sql, args string
			}{
				{"unique violation", insert, `[1, "TT-101", 1, true]`},
				{"not null violation", insert, `[3, null, 1, true]`},
				{"missing table", "INSERT INTO no_such_table (id) VALUES (" + db.ph(1) + ")", `[1]`},
				{"syntax error", "INSERT INTO readings VALUES (", `[]`},
				{"too few args", insert, `[9]`},
			} {
				res := g.Attempt(t.Context(), writeOp(c.sql, c.args))
				if res.Outcome != ports.OutcomePermanent || res.Error == "" {
					t.Errorf("%s: %+v, want Permanent", c.what, res)
				}
			}
			if db.driver == opgateway.DriverPostgres { // SQLite ignores extra arguments
				res := g.Attempt(t.Context(), writeOp("INSERT INTO readings (id, tag) VALUES (9, 'x')", `[1]`))
				if res.Outcome != ports.OutcomePermanent {
					t.Errorf("too many args: %+v, want Permanent", res)
				}
			}
			if n := db.count(t, "SELECT count(*) FROM readings"); n != 2 {
				t.Errorf("%d rows after the failures, want 2", n)
			}
		})
	}
}

func TestWriteExactlyOnce(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			db := d.open(t)
			// No key: without exactly-once a repeat is applied again.
			db.exec(t, `CREATE TABLE counts (tag text NOT NULL)`)
			insert := "INSERT INTO counts (tag) VALUES (" + db.ph(1) + ")"

			plain := db.connect(t, false)
			op := writeOp(insert, `["plain"]`)
			plain.Attempt(t.Context(), op)
			plain.Attempt(t.Context(), op)
			if n := db.count(t, "SELECT count(*) FROM counts WHERE tag = 'plain'"); n != 2 {
				t.Fatalf("without exactly-once a repeated op applied %d times, want 2 (the control)", n)
			}

			once := db.connect(t, true)
			op = writeOp(insert, `["once"]`)
			first := once.Attempt(t.Context(), op)
			second := once.Attempt(t.Context(), op)
			if first.Outcome != ports.OutcomeSuccess || string(first.Answer) != `{"rows_affected":1}` {
				t.Fatalf("first attempt: %+v", first)
			}
			if second.Outcome != ports.OutcomeSuccess || string(second.Answer) != `{"rows_affected":0,"already_applied":true}` {
				t.Fatalf("second attempt: %+v", second)
			}
			if n := db.count(t, "SELECT count(*) FROM counts WHERE tag = 'once'"); n != 1 {
				t.Fatalf("exactly-once applied the op %d times", n)
			}
			if n := db.count(t, "SELECT count(*) FROM "+opgateway.MarkerTable); n != 1 {
				t.Fatalf("%d markers, want 1", n)
			}

			// A write that fails records nothing: its retry applies it.
			db.exec(t, `CREATE TABLE strict (v integer PRIMARY KEY)`)
			db.exec(t, `INSERT INTO strict VALUES (1)`)
			op = writeOp("INSERT INTO strict (v) VALUES ("+db.ph(1)+")", `[1]`)
			if res := once.Attempt(t.Context(), op); res.Outcome != ports.OutcomePermanent {
				t.Fatalf("conflicting write: %+v", res)
			}
			db.exec(t, `DELETE FROM strict`)
			if res := once.Attempt(t.Context(), op); res.Outcome != ports.OutcomeSuccess || string(res.Answer) != `{"rows_affected":1}` {
				t.Fatalf("the retry after the failure: %+v", res)
			}

			// Attempts of one op at once (two leaders' worth): applied once.
			op = writeOp(insert, `["race"]`)
			var wg sync.WaitGroup
			results := make([]ports.OpResult, 8)
			for i := range results {
				wg.Go(func() { results[i] = once.Attempt(t.Context(), op) })
			}
			wg.Wait()
			for i, r := range results {
				if r.Outcome != ports.OutcomeSuccess {
					t.Errorf("concurrent attempt %d: %+v", i, r)
				}
			}
			if n := db.count(t, "SELECT count(*) FROM counts WHERE tag = 'race'"); n != 1 {
				t.Fatalf("concurrent attempts applied the op %d times", n)
			}
		})
	}
}

func TestWriteConnectionFailuresAreTransient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	const password = "pw-c0ffee42"
	d := database{driver: opgateway.DriverPostgres,
		dsn: fmt.Sprintf("postgres://writer:%s@127.0.0.1:%d/plant?sslmode=disable&connect_timeout=5", password, port)}
	for _, exactlyOnce := range []bool{false, true} {
		g := d.connect(t, exactlyOnce)
		res := g.Attempt(t.Context(), writeOp("INSERT INTO t VALUES ($1)", `[1]`))
		if res.Outcome != ports.OutcomeTransient || !strings.Contains(res.Error, "refused") {
			t.Errorf("closed port (exactly-once %v): %+v", exactlyOnce, res)
		}
		if strings.Contains(res.Error, password) {
			t.Errorf("the error holds the password: %q", res.Error)
		}
	}

	// A DSN whose reference does not resolve: Transient, naming the
	// reference.
	g := newGateway(t, opgateway.Config{Connections: []opgateway.Connection{{
		Name: "plant", Driver: opgateway.DriverPostgres, DSN: "env:OUTBOX_SECRET_NO_SUCH_DSN"}}}, policy(t.TempDir()))
	res := g.Attempt(t.Context(), writeOp("INSERT INTO t VALUES ($1)", `[1]`))
	if res.Outcome != ports.OutcomeTransient || !strings.Contains(res.Error, "OUTBOX_SECRET_NO_SUCH_DSN") {
		t.Errorf("unresolvable DSN: %+v", res)
	}
}

func TestWriteTimeoutIsTransient(t *testing.T) {
	db := postgresDatabase(t)
	t.Setenv("OUTBOX_SECRET_PLANT_DSN", db.dsn)
	g := newGateway(t, opgateway.Config{Connections: []opgateway.Connection{{
		Name: "plant", Driver: db.driver, DSN: "env:OUTBOX_SECRET_PLANT_DSN", Timeout: 300 * time.Millisecond,
	}}}, policy(t.TempDir()))
	res := g.Attempt(t.Context(), writeOp("SELECT pg_sleep(30)", ``))
	if res.Outcome != ports.OutcomeTransient || !strings.Contains(res.Error, "timeout of 300ms") {
		t.Errorf("slow write: %+v", res)
	}
}

func TestCheckWrites(t *testing.T) {
	g := newGateway(t, opgateway.Config{Connections: []opgateway.Connection{{
		Name: "plant", Driver: opgateway.DriverSQLite, DSN: "env:OUTBOX_SECRET_X"}}}, secretref.Own(""))
	many := "[" + strings.Repeat("1,", opgateway.MaxArgs) + "1]"
	for _, c := range []struct {
		op   ports.Operation
		want string
	}{
		{ports.Operation{Kind: ports.OpWrite, Target: "other", Payload: ports.OpPayload{SQL: "SELECT 1"}}, `no database connection "other"`},
		{writeOp(" \n", ``), "SQL is empty"},
		{writeOp("SELECT 1\x00", ``), "NUL"},
		{writeOp("SELECT '\xff'", ``), "SQL is not valid UTF-8"},
		{writeOp(strings.Repeat("x", opgateway.MaxSQLBytes+1), ``), "over the limit"},
		{writeOp("SELECT ?", `{"a":1}`), "not a JSON array"},
		{writeOp("SELECT ?", `[{"a":1}]`), "args[0] is an object or an array"},
		{writeOp("SELECT ?", `[1,[2]]`), "args[1] is an object or an array"},
		{writeOp("SELECT ?", `[1] 2`), "after the JSON array"},
		{writeOp("SELECT ?", `[1,`), "not valid JSON"},
		{writeOp("SELECT ?", "[\"\xff\"]"), "args are not valid UTF-8"},
		{writeOp("SELECT ?", `[99999999999999999999]`), "outside the range of a 64-bit integer"},
		{writeOp("SELECT ?", `[1e999]`), "outside the range of a 64-bit float"},
		{writeOp("SELECT ?", many), "more than 1000 values"},
	} {
		err := g.Check(c.op)
		if !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Check(%.40q, %.40s) = %v, want ErrInvalid with %q", c.op.Payload.SQL, c.op.Payload.Args, err, c.want)
		}
	}
	once := newGateway(t, opgateway.Config{Connections: []opgateway.Connection{{
		Name: "plant", Driver: opgateway.DriverSQLite, DSN: "env:OUTBOX_SECRET_X", ExactlyOnce: true}}}, secretref.Own(""))
	long := writeOp("SELECT 1", ``)
	long.ID = strings.Repeat("a", 65)
	if err := once.Check(long); !errors.Is(err, ports.ErrInvalid) || !strings.Contains(err.Error(), "over 64 bytes") {
		t.Errorf("a long id in exactly-once mode: %v", err)
	}
	if err := g.Check(long); err != nil {
		t.Errorf("a long id without exactly-once: %v", err)
	}
	if err := g.Check(writeOp("SELECT ?", `[1, -2.5, 1e3, "x", true, null]`)); err != nil {
		t.Errorf("scalar args: %v", err)
	}
	if p, err := g.Policy(ports.OpWrite, "plant"); err != nil || p.MaxRetries != opgateway.DefaultMaxRetries || p.Interval != opgateway.DefaultRetryInterval {
		t.Errorf("Policy(plant) = %+v, %v", p, err)
	}
}

func TestWriteSQLiteBusyIsTransient(t *testing.T) {
	db := sqliteDatabase(t)
	db.exec(t, `CREATE TABLE counts (tag text NOT NULL)`)
	// The test holds the write lock; the gateway's DSN waits for none.
	conn, err := db.db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	db.dsn = strings.TrimSuffix(db.dsn, "?_pragma=busy_timeout(5000)")
	g := db.connect(t, true)
	res := g.Attempt(t.Context(), writeOp("INSERT INTO counts (tag) VALUES (?)", `["x"]`))
	if res.Outcome != ports.OutcomeTransient || !strings.Contains(res.Error, "locked") {
		t.Errorf("a locked database: %+v", res)
	}
	if _, err := conn.ExecContext(t.Context(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if res := g.Attempt(t.Context(), writeOp("INSERT INTO counts (tag) VALUES (?)", `["x"]`)); res.Outcome != ports.OutcomeSuccess {
		t.Errorf("once unlocked: %+v", res)
	}
}
