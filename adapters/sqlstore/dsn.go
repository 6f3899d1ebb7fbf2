package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	_ "github.com/microsoft/go-mssqldb" // registers the "sqlserver" driver
	_ "modernc.org/sqlite"              // registers the "sqlite" driver
)

// sqliteDefaults are the connection settings the store wants on SQLite;
// a DSN that sets one of them itself keeps its own value.
//
//   - WAL lets readers run during a write; synchronous=NORMAL is durable
//     across process crashes in WAL mode and fsyncs only at checkpoints.
//   - busy_timeout makes a connection wait for the lock rather than fail.
//   - _txlock=immediate takes the write lock at BEGIN on the writer, so a
//     transaction never fails half-way to upgrade its lock.
var sqliteDefaults = []struct{ key, value string }{
	{"busy_timeout", "_pragma=busy_timeout(10000)"},
	{"journal_mode", "_pragma=journal_mode(WAL)"},
	{"synchronous", "_pragma=synchronous(NORMAL)"},
	{"temp_store", "_pragma=temp_store(MEMORY)"},
}

// sqliteInMemory reports whether dsn names an in-memory database.
func sqliteInMemory(dsn string) bool {
	return strings.HasPrefix(dsn, ":memory:") || strings.HasPrefix(dsn, "file::memory:") ||
		strings.Contains(dsn, "mode=memory")
}

// sqliteRole says which connection a SQLite DSN is for.
type sqliteRole int

const (
	sqliteReader sqliteRole = iota
	sqliteWriter
	sqliteCheckpointer
)

// sqliteDSN adds the store's settings to dsn for a connection of role.
// Page caches are modest (the kernel caches the file too, outside the
// process): 16 MB for the writer, 8 MB per reader, 1 MB for the
// checkpointer, which copies WAL frames without the cache.
func sqliteDSN(dsn string, role sqliteRole) string {
	var add []string
	lower := strings.ToLower(dsn)
	for _, d := range sqliteDefaults {
		if !strings.Contains(lower, d.key) {
			add = append(add, d.value)
		}
	}
	cache := map[sqliteRole]string{sqliteReader: "-8000", sqliteWriter: "-16000", sqliteCheckpointer: "-1000"}[role]
	if !strings.Contains(lower, "cache_size") {
		add = append(add, "_pragma=cache_size("+cache+")")
	}
	if role == sqliteWriter {
		if !strings.Contains(lower, "_txlock") {
			add = append(add, "_txlock=immediate")
		}
		if !strings.Contains(lower, "wal_autocheckpoint") {
			// A backstop: the store checkpoints in the background (sqlite.go).
			add = append(add, "_pragma=wal_autocheckpoint(20000)")
		}
	}
	if len(add) == 0 {
		return dsn
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + strings.Join(add, "&")
}

// openPostgres opens a pgx pool through database/sql. Most statements
// inline their values, so pgx must not prepare and cache each distinct text
// (its default): the exec mode sends each in one round trip unprepared. The
// batch statements, whose text is fixed, ask for preparation per query (see
// stmt.done). A DSN that sets default_query_exec_mode itself keeps it for
// every statement; custom reports whether it did.
func openPostgres(dsn string) (db *sql.DB, custom bool, err error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, false, err
	}
	custom = strings.Contains(dsn, "default_query_exec_mode")
	if !custom {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	// Literals are quoted by doubling ' only, which is safe only while
	// backslashes are plain characters in strings: ask for that at start-up
	// and refuse a connection where something (a DSN option, a role or
	// database default) turned it off.
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["standard_conforming_strings"] = "on"
	check := stdlib.OptionAfterConnect(func(ctx context.Context, c *pgx.Conn) error {
		if v := c.PgConn().ParameterStatus("standard_conforming_strings"); v != "on" {
			return fmt.Errorf("sqlstore: PostgreSQL standard_conforming_strings is %q; the store needs it on", v)
		}
		return nil
	})
	return stdlib.OpenDB(*cfg, check), custom, nil
}

// kvPassword finds password=... or pwd=... in key/value connection strings
// (libpq "host=x password=y", ADO "server=x;password=y").
var kvPassword = regexp.MustCompile(`(?i)\b(?:password|pwd)\s*=\s*(?:'((?:[^'\\]|\\.)*)'|"([^"]*)"|\{([^}]*)\}|([^;\s]*))`)

// dsnSecrets returns the password of dsn in every form it may take in a
// message (as is, URL-escaped), or nothing.
func dsnSecrets(dsn string) []string {
	var raw []string
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		if p, ok := u.User.Password(); ok {
			raw = append(raw, p)
		}
		for k, vs := range u.Query() {
			if strings.EqualFold(k, "password") || strings.EqualFold(k, "pwd") {
				raw = append(raw, vs...)
			}
		}
	}
	for _, m := range kvPassword.FindAllStringSubmatch(dsn, -1) {
		for _, g := range m[1:] {
			if g != "" {
				raw = append(raw, g)
			}
		}
	}
	var out []string
	for _, p := range raw {
		for _, form := range []string{p, url.QueryEscape(p), url.PathEscape(p), url.UserPassword("", p).String()[1:]} {
			if form != "" && !containsString(out, form) {
				out = append(out, form)
			}
		}
	}
	return out
}

func containsString(v []string, s string) bool {
	for _, x := range v {
		if x == s {
			return true
		}
	}
	return false
}

// redactDSN returns dsn fit for a log or an error: the password replaced by
// "xxxxx".
func redactDSN(dsn string) string {
	out := dsn
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		out = u.Redacted()
	}
	for _, secret := range dsnSecrets(dsn) {
		out = strings.ReplaceAll(out, secret, "xxxxx")
	}
	return out
}

// redactedError is an error whose text had the DSN's password removed.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redact removes the DSN's password from err's text.
func (s *handle) redact(err error) error {
	if err == nil || len(s.secrets) == 0 {
		return err
	}
	msg := err.Error()
	clean := msg
	for _, secret := range s.secrets {
		clean = strings.ReplaceAll(clean, secret, "xxxxx")
	}
	if clean == msg {
		return err
	}
	return &redactedError{msg: clean, err: err}
}
