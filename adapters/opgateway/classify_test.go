package opgateway

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	mssql "github.com/microsoft/go-mssqldb"

	"github.com/siteline/outbox/ports"
)

// The real errors of PostgreSQL and SQLite are classified in sql_test.go;
// these are the codes no test server produces on demand (deadlocks,
// serialization failures, shutdowns) and MS SQL, which has no server here.
func TestClassifySQLByCode(t *testing.T) {
	for _, c := range []struct {
		err  error
		want ports.Outcome
	}{
		{&pgconn.PgError{Code: "40P01", Message: "deadlock detected"}, ports.OutcomeTransient},
		{&pgconn.PgError{Code: "40001", Message: "could not serialize access"}, ports.OutcomeTransient},
		{&pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}, ports.OutcomeTransient},
		{&pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}, ports.OutcomeTransient},
		{&pgconn.PgError{Code: "08006", Message: "connection failure"}, ports.OutcomeTransient},
		{&pgconn.PgError{Code: "53300", Message: "too many connections"}, ports.OutcomeTransient},
		{&pgconn.PgError{Code: "XX000", Message: "internal error"}, ports.OutcomeTransient},
		{&pgconn.PgError{Code: "23505", Message: "duplicate key"}, ports.OutcomePermanent},
		{&pgconn.PgError{Code: "23503", Message: "foreign key"}, ports.OutcomePermanent},
		{&pgconn.PgError{Code: "42601", Message: "syntax error"}, ports.OutcomePermanent},
		{&pgconn.PgError{Code: "42P01", Message: "relation does not exist"}, ports.OutcomePermanent},
		{&pgconn.PgError{Code: "22P02", Message: "invalid input syntax for type integer"}, ports.OutcomePermanent},
		{fmt.Errorf("exec: %w", mssql.Error{Number: 1205, Message: "deadlock victim"}), ports.OutcomeTransient},
		{mssql.Error{Number: 2627, Message: "Violation of PRIMARY KEY constraint"}, ports.OutcomePermanent},
		{mssql.Error{Number: 2601, Message: "Cannot insert duplicate key row"}, ports.OutcomePermanent},
		{&mssql.Error{Number: 547, Message: "conflicted with the FOREIGN KEY constraint"}, ports.OutcomePermanent},
		{mssql.Error{Number: 102, Message: "Incorrect syntax near"}, ports.OutcomePermanent},
		{mssql.Error{Number: 156, Message: "Incorrect syntax near the keyword"}, ports.OutcomePermanent},
		{mssql.Error{Number: 207, Message: "Invalid column name"}, ports.OutcomePermanent},
		{mssql.Error{Number: 208, Message: "Invalid object name"}, ports.OutcomePermanent},
		{mssql.Error{Number: 4060, Message: "Cannot open database"}, ports.OutcomeTransient},
		{mssql.Error{Number: 40613, Message: "Database is not currently available"}, ports.OutcomeTransient},
		{context.DeadlineExceeded, ports.OutcomeTransient},
		{driver.ErrBadConn, ports.OutcomeTransient},
		{errors.New("something new"), ports.OutcomeTransient},
	} {
		got, text := classifySQL(c.err, nil)
		if got != c.want || text == "" {
			t.Errorf("classifySQL(%v) = %s %q, want %s", c.err, got, text, c.want)
		}
	}
	if _, text := classifySQL(mssql.Error{Number: 1205, Message: "deadlock victim"}, nil); text != "mssql error 1205: deadlock victim" {
		t.Errorf("mssql text %q", text)
	}
}

func TestClassifySQLRedactsTheDSN(t *testing.T) {
	for _, dsn := range []string{
		"postgres://writer:pa55-w0rd@db.plant:5432/plant?sslmode=require",
		"host=db.plant user=writer password='pa55-w0rd' dbname=plant",
		"sqlserver://writer:pa55-w0rd@db.plant?database=plant",
		"server=db.plant;user id=writer;password=pa55-w0rd;database=plant",
	} {
		err := fmt.Errorf("connect to %s: failed for writer with pa55-w0rd", dsn)
		_, text := classifySQL(err, dsnSecrets(dsn))
		if strings.Contains(text, "pa55-w0rd") || strings.Contains(text, dsn) {
			t.Errorf("%s: the text holds a secret: %q", dsn, text)
		}
	}
	_, text := classifySQL(errors.New(strings.Repeat("é", 400)), nil)
	if len(text) > maxSQLErrorText+len("…") || !strings.HasSuffix(text, "…") {
		t.Errorf("a long error is %d bytes", len(text))
	}
}

func TestTemplate(t *testing.T) {
	for _, c := range []struct{ path, err string }{
		{"", "empty"},
		{"orders", "must start with /"},
		{"/orders/{id", "not closed"},
		{"/orders/id}", "without its {"},
		{"/orders/{}", "a name is"},
		{"/orders/{1d}", "a name is"},
		{"/orders/{a-b}", "a name is"},
		{"/orders/{id}/{id}", "twice"},
		{"/orders?x=1", "query"},
		{"/orders#top", "fragment"},
		{"/orders/%41", "%"},
		{"/or ders", "space"},
		{"/ordérs", "outside ASCII"},
		{"/" + strings.Repeat("a", maxPathBytes), "over the limit"},
	} {
		if _, err := parseTemplate(c.path); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("parseTemplate(%.40q) = %v, want %q", c.path, err, c.err)
		}
	}
	tm, err := parseTemplate("/a/{x}/b{y}c/{z_1}")
	if err != nil {
		t.Fatal(err)
	}
	got, err := tm.fill(map[string]string{"x": "1/2", "y": "é", "z_1": "a b"})
	if err != nil || got != "/a/1%2F2/b%C3%A9c/a%20b" {
		t.Errorf("fill = %q, %v", got, err)
	}
}
