package opgateway

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
	mssql "github.com/microsoft/go-mssqldb"
	"modernc.org/sqlite"

	"github.com/siteline/outbox/adapters/support/secretref"
	"github.com/siteline/outbox/ports"
)

// MarkerTable is the table of the operation ids a connection in
// exactly-once mode has applied, created when missing.
const MarkerTable = "outbox_applied_operations"

// maxMarkerID bounds an operation id recorded in MarkerTable (a UUID is
// 36 bytes).
const maxMarkerID = 64

// driverNames are the database/sql names of the drivers.
var driverNames = map[string]string{DriverPostgres: "pgx", DriverMSSQL: "sqlserver", DriverSQLite: "sqlite"}

// markerDDL creates MarkerTable when it is missing, per driver.
var markerDDL = map[string]string{
	DriverPostgres: `CREATE TABLE IF NOT EXISTS ` + MarkerTable + ` (id varchar(64) PRIMARY KEY, applied_at timestamptz NOT NULL)`,
	DriverSQLite:   `CREATE TABLE IF NOT EXISTS ` + MarkerTable + ` (id TEXT PRIMARY KEY, applied_at TEXT NOT NULL)`,
	DriverMSSQL: `IF OBJECT_ID(N'` + MarkerTable + `', N'U') IS NULL CREATE TABLE ` + MarkerTable +
		` (id nvarchar(64) NOT NULL PRIMARY KEY, applied_at datetime2 NOT NULL)`,
}

// markerInsert records an id: on postgres and sqlite it inserts nothing
// when the id is there (no row affected); on mssql it fails with a
// duplicate key.
var markerInsert = map[string]string{
	DriverPostgres: `INSERT INTO ` + MarkerTable + ` (id, applied_at) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`,
	DriverSQLite:   `INSERT INTO ` + MarkerTable + ` (id, applied_at) VALUES (?, ?) ON CONFLICT (id) DO NOTHING`,
	DriverMSSQL:    `INSERT INTO ` + MarkerTable + ` (id, applied_at) VALUES (@p1, @p2)`,
}

// alreadyApplied is the Answer of a write whose id MarkerTable holds.
var alreadyApplied = json.RawMessage(`{"rows_affected":0,"already_applied":true}`)

// sqlConn is a Connection with its pool, opened at its first write.
type sqlConn struct {
	Connection

	mu      sync.Mutex
	db      *sql.DB
	redact  []string // parts of the DSN no error text may hold
	markers bool     // MarkerTable is known to exist
}

// checkWrite checks a write's SQL (non-empty, valid UTF-8, no NUL, at most
// MaxSQLBytes) and decodes its Args.
func checkWrite(text string, args json.RawMessage) ([]any, error) {
	switch {
	case strings.TrimSpace(text) == "":
		return nil, errors.New("the SQL is empty")
	case len(text) > MaxSQLBytes:
		return nil, fmt.Errorf("the SQL is %d bytes, over the limit of %d", len(text), MaxSQLBytes)
	case !utf8.ValidString(text):
		return nil, errors.New("the SQL is not valid UTF-8")
	case strings.IndexByte(text, 0) >= 0:
		return nil, errors.New("the SQL holds a NUL byte")
	}
	return decodeArgs(args)
}

// pool returns the connection's pool, opening it (and resolving its DSN
// under policy) when it is not open.
func (c *sqlConn) pool(policy secretref.Policy) (*sql.DB, []string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.db != nil {
		return c.db, c.redact, nil
	}
	dsn, err := policy.Resolve(c.DSN)
	if err != nil {
		// A RefError names the reference, never its value.
		return nil, nil, fmt.Errorf("resolve the DSN: %w", err)
	}
	db, err := sql.Open(driverNames[c.Driver], dsn)
	if err != nil {
		// The driver's text may quote the DSN: leave it out.
		return nil, nil, fmt.Errorf("the %s driver cannot parse the DSN %s refers to", c.Driver, c.DSN)
	}
	n := c.MaxConns
	if c.Driver == DriverSQLite {
		// One writer: SQLite serialises writes anyway, and an in-memory
		// database is one connection's.
		n = 1
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	db.SetConnMaxIdleTime(5 * time.Minute)
	c.db, c.redact, c.markers = db, dsnSecrets(dsn), false
	return db, c.redact, nil
}

func (c *sqlConn) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.db == nil {
		return nil
	}
	err := c.db.Close()
	c.db = nil
	return err
}

// ensureMarkers creates MarkerTable when it is missing, once per pool.
func (c *sqlConn) ensureMarkers(ctx context.Context, db *sql.DB) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.markers {
		return nil
	}
	_, err := db.ExecContext(ctx, markerDDL[c.Driver])
	if err != nil {
		// Two creators at once (another process) may collide on the
		// catalogue: the table is there when the other one won.
		_, err = db.ExecContext(ctx, markerDDL[c.Driver])
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", MarkerTable, err)
	}
	c.markers = true
	return nil
}

// write makes one attempt of the write op: its statement in a transaction
// of its own, which in exactly-once mode first records op.ID in
// MarkerTable.
func (c *sqlConn) write(ctx context.Context, policy secretref.Policy, op ports.Operation) ports.OpResult {
	args, err := checkWrite(op.Payload.SQL, op.Payload.Args)
	if err != nil {
		return ports.OpResult{Outcome: ports.OutcomePermanent, Error: err.Error()}
	}
	if c.ExactlyOnce && (op.ID == "" || len(op.ID) > maxMarkerID) {
		return ports.OpResult{Outcome: ports.OutcomePermanent,
			Error: fmt.Sprintf("exactly-once needs an operation id of 1 to %d bytes", maxMarkerID)}
	}
	db, redact, err := c.pool(policy)
	if err != nil {
		return ports.OpResult{Outcome: ports.OutcomeTransient, Error: "open: " + err.Error()}
	}
	actx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	fail := func(step string, err error) ports.OpResult {
		if ctx.Err() == nil && actx.Err() != nil {
			return transient(fmt.Sprintf("%s: no answer within the timeout of %s", step, c.Timeout))
		}
		outcome, text := classifySQL(err, redact)
		return ports.OpResult{Outcome: outcome, Error: step + ": " + text}
	}
	if c.ExactlyOnce {
		if err := c.ensureMarkers(actx, db); err != nil {
			return fail("exactly-once", err)
		}
	}
	tx, err := db.BeginTx(actx, nil)
	if err != nil {
		return fail("begin", err)
	}
	defer func() { _ = tx.Rollback() }()
	if c.ExactlyOnce {
		res, err := tx.ExecContext(actx, markerInsert[c.Driver], op.ID, time.Now().UTC())
		if err != nil {
			if e, ok := mssqlError(err); ok && (e.Number == 2627 || e.Number == 2601) {
				return ports.OpResult{Outcome: ports.OutcomeSuccess, Answer: alreadyApplied}
			}
			return fail("record the operation in "+MarkerTable, err)
		}
		if n, err := res.RowsAffected(); err == nil && n == 0 {
			return ports.OpResult{Outcome: ports.OutcomeSuccess, Answer: alreadyApplied}
		}
	}
	res, err := tx.ExecContext(actx, op.Payload.SQL, args...)
	if err != nil {
		return fail("exec", err)
	}
	n, nerr := res.RowsAffected()
	if err := tx.Commit(); err != nil {
		return fail("commit", err)
	}
	if nerr != nil {
		return ports.OpResult{Outcome: ports.OutcomeSuccess, Answer: json.RawMessage(`{"rows_affected":null}`)}
	}
	return ports.OpResult{Outcome: ports.OutcomeSuccess, Answer: json.RawMessage(fmt.Sprintf(`{"rows_affected":%d}`, n))}
}

// mssqlError finds the server's error in err (go-mssqldb returns it as a
// value; a pointer is accepted too).
func mssqlError(err error) (mssql.Error, bool) {
	var e mssql.Error
	if errors.As(err, &e) {
		return e, true
	}
	var pe *mssql.Error
	if errors.As(err, &pe) && pe != nil {
		return *pe, true
	}
	return mssql.Error{}, false
}

// maxSQLErrorText bounds the text of a database's error kept in a result.
const maxSQLErrorText = 300

// classifySQL classifies a database error and describes it without the
// parts of the DSN in redact:
//   - Transient: timeouts, connection errors, deadlocks (postgres 40P01,
//     mssql 1205), serialization failures (40001), administrator shutdown
//     and cannot connect (57P01-57P03, class 08), lack of resources (53),
//     SQLite busy or locked, and whatever is not known;
//   - Permanent: integrity constraints (postgres class 23; mssql 2627,
//     2601, 547), syntax and access (postgres class 42; mssql 102, 156,
//     207, 208), bad data (postgres class 22), and SQLite's constraint,
//     SQL (syntax, no such table), type mismatch, range and too-big
//     errors, and arguments that do not fit the statement (argumentTexts).
func classifySQL(err error, redact []string) (ports.Outcome, string) {
	var (
		pgErr *pgconn.PgError
		sqErr *sqlite.Error
	)
	msErr, isMS := mssqlError(err)
	outcome := ports.OutcomeTransient
	var text string
	switch {
	case errors.As(err, &pgErr):
		code := pgErr.Code
		switch {
		case code == "40P01", code == "40001", strings.HasPrefix(code, "08"), strings.HasPrefix(code, "57P"),
			strings.HasPrefix(code, "53"):
		case strings.HasPrefix(code, "23"), strings.HasPrefix(code, "42"), strings.HasPrefix(code, "22"):
			outcome = ports.OutcomePermanent
		}
		text = "SQLSTATE " + code + ": " + pgErr.Message
	case isMS:
		switch msErr.Number {
		case 2627, 2601, 547, 102, 156, 207, 208:
			outcome = ports.OutcomePermanent
		}
		text = fmt.Sprintf("mssql error %d: %s", msErr.Number, msErr.Message)
	case errors.As(err, &sqErr):
		switch sqErr.Code() & 0xff {
		case 1, 18, 19, 20, 25: // SQLITE_ERROR, TOOBIG, CONSTRAINT, MISMATCH, RANGE
			outcome = ports.OutcomePermanent
		}
		text = "sqlite: " + sqErr.Error()
	case argumentError(err):
		outcome = ports.OutcomePermanent
		text = err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		text = "timed out"
	case errors.Is(err, context.Canceled):
		text = "canceled"
	case errors.Is(err, driver.ErrBadConn):
		text = "the connection broke"
	default:
		var netErr net.Error
		if errors.As(err, &netErr) && netErr.Timeout() {
			text = "timed out"
		} else {
			text = err.Error()
		}
	}
	for _, s := range redact {
		text = strings.ReplaceAll(text, s, "[redacted]")
	}
	text = strings.ToValidUTF8(text, "\uFFFD")
	if len(text) > maxSQLErrorText {
		text = strings.ToValidUTF8(text[:maxSQLErrorText], "") + "…"
	}
	return outcome, text
}

// argumentTexts are the errors database/sql and the drivers return,
// before anything reaches the server, for arguments that do not fit the
// statement: they recur at every attempt. They are plain errors, known by
// their text; one a driver words otherwise stays Transient.
var argumentTexts = []string{
	"sql: expected ",                      // database/sql: "sql: expected 2 arguments, got 1"
	"sql: converting argument",            // database/sql: a value the driver cannot take
	"mismatched param and argument count", // pgx
	"missing argument with index",         // modernc.org/sqlite
	"missing named argument",              // modernc.org/sqlite
}

func argumentError(err error) bool {
	text := err.Error()
	return slices.ContainsFunc(argumentTexts, func(s string) bool { return strings.Contains(text, s) })
}

// dsnPassword finds a password in a key=value DSN (postgres, mssql).
var dsnPassword = regexp.MustCompile(`(?i)\b(?:password|pwd)\s*=\s*('(?:[^'\\]|\\.)*'|[^;\s]*)`)

// dsnSecrets lists the parts of dsn no error text may hold: the DSN, its
// password, longest first.
func dsnSecrets(dsn string) []string {
	out := []string{dsn}
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			out = append(out, u.User.String(), p, url.QueryEscape(p))
		}
		for _, k := range []string{"password", "pwd"} {
			if p := u.Query().Get(k); p != "" {
				out = append(out, p)
			}
		}
	}
	for _, m := range dsnPassword.FindAllStringSubmatch(dsn, -1) {
		if p := strings.Trim(m[1], "'"); p != "" {
			out = append(out, m[1], p)
		}
	}
	var keep []string
	for _, s := range out {
		if len(s) >= 3 {
			keep = append(keep, s)
		}
	}
	// Longest first, so that a secret holding another is hidden whole.
	slices.SortFunc(keep, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	return slices.Compact(keep)
}
