package sqlstore

import (
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/migrations"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/storetest"
)

// TestMSSQLDirectory builds the directory's statements on MS SQL (no server
// runs here) and checks them as sqlgen_test.go checks the others.
func TestMSSQLDirectory(t *testing.T) {
	g := mssqlGen(t)
	const ts = `CAST('2025-06-02T09:30:00.123456' AS datetime2(6))`
	q, err := g.putList(ports.List{Name: "ops", Type: "email", Targets: []string{"a@example.test", "it's"}}, storetest.BaseTime)
	mustContain(t, "put list", buildT(t, "put list", q, err),
		`MERGE INTO "notification_lists" WITH (HOLDLOCK) AS t USING (VALUES (N'ops', N'email', N'["a@example.test","it''s"]', `+ts+`)) AS v ("name", "type", "targets", "updated_at")`,
		` ON t."name" = v."name" WHEN MATCHED THEN UPDATE SET "type" = v."type", "targets" = v."targets", "updated_at" = v."updated_at"`,
		` WHEN NOT MATCHED THEN INSERT ("name", "type", "targets", "updated_at") VALUES (v."name", v."type", v."targets", v."updated_at");`)
	if !strings.HasSuffix(q.text, ";") {
		t.Errorf("put list: MERGE must end with a semicolon:\n%s", q.text)
	}
	q, err = g.putList(ports.List{Name: "nobody", Type: "email"}, storetest.BaseTime)
	mustContain(t, "put list without targets", buildT(t, "put list without targets", q, err), `N'nobody', N'email', N'[]'`)

	q, err = g.putChannel(ports.ChannelSettings{
		Type:      "email",
		Settings:  map[string]string{"host": "smtp.example.test", "password": "env:P"},
		Retry:     ports.RetrySettings{Backoff: ports.BackoffExponential, MaxRetries: 12, Interval: 1500 * time.Millisecond, MaxInterval: time.Hour},
		RateLimit: 0.25,
	}, storetest.BaseTime)
	mustContain(t, "put channel", buildT(t, "put channel", q, err),
		`MERGE INTO "notification_channels" WITH (HOLDLOCK) AS t USING (VALUES (N'email', N'{"host":"smtp.example.test","password":"env:P"}', N'exponential', 12, 1500, 3600000, 2.5e-01, `+ts+`))`,
		`AS v ("type", "settings", "retry_backoff", "retry_max_retries", "retry_interval_ms", "retry_max_interval_ms", "rate_limit", "updated_at") ON t."type" = v."type"`,
		`WHEN MATCHED THEN UPDATE SET "settings" = v."settings", "retry_backoff" = v."retry_backoff"`,
		`"rate_limit" = v."rate_limit", "updated_at" = v."updated_at" WHEN NOT MATCHED THEN INSERT (`)
	q, err = g.putChannel(ports.ChannelSettings{Type: "slack"}, storetest.BaseTime)
	mustContain(t, "put zero channel", buildT(t, "put zero channel", q, err), `(N'slack', N'{}', N'', 0, 0, 0, 0e+00, `)

	key := "o'ps"
	q, err = g.selectRows("notification_lists", listReadColumns, &key)
	mustContain(t, "get list", buildT(t, "get list", q, err), `SELECT "name", "type", "targets" FROM "notification_lists" WHERE "name" = N'o''ps'`)
	q, err = g.selectRows("notification_channels", channelReadColumns, nil)
	mustContain(t, "all channels", buildT(t, "all channels", q, err),
		`SELECT "type", "settings", "retry_backoff", "retry_max_retries", "retry_interval_ms", "retry_max_interval_ms", "rate_limit" FROM "notification_channels"`)
	q, err = g.deleteRow("notification_channels", "type", "email")
	mustContain(t, "delete channel", buildT(t, "delete channel", q, err), `DELETE FROM "notification_channels" WHERE "type" = N'email'`)
}

// TestUpsertSQLitePostgres pins the upsert of the other dialects (which the
// contract suite runs for real).
func TestUpsertSQLitePostgres(t *testing.T) {
	for _, driver := range []string{DriverSQLite, DriverPostgres} {
		g, err := newSQLGen(driver)
		if err != nil {
			t.Fatal(err)
		}
		q, err := g.putList(ports.List{Name: "ops", Type: "email"}, storetest.BaseTime)
		if err != nil {
			t.Fatal(err)
		}
		mustContain(t, driver+" put list", q.text,
			`INSERT INTO "notification_lists" ("name", "type", "targets", "updated_at") VALUES ('ops', 'email', '[]', `,
			`) ON CONFLICT ("name") DO UPDATE SET "type" = excluded."type", "targets" = excluded."targets", "updated_at" = excluded."updated_at"`)
		if len(q.args) != 0 {
			t.Errorf("%s put list: %d parameters, want the values inlined", driver, len(q.args))
		}
	}
}

// checkDirectoryDown runs the down migration of 0002_directory on s, a
// migrated store holding a list: it drops the directory tables and leaves
// the notifications alone.
func checkDirectoryDown(t *testing.T, s *DB) {
	t.Helper()
	if err := s.Directory().PutList(t.Context(), ports.List{Name: "ops", Type: "email"}); err != nil {
		t.Fatalf("PutList: %v", err)
	}
	fsys, err := migrations.FS(s.driver)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fs.ReadFile(fsys, "0002_directory.down.sql")
	if err != nil {
		t.Fatal(err)
	}
	for i, stmt := range splitStatements(string(b)) {
		if _, err := s.writer().ExecContext(t.Context(), stmt); err != nil {
			t.Fatalf("down statement %d: %v", i+1, err)
		}
	}
	if _, err := s.Directory().Lists(t.Context()); err == nil {
		t.Errorf("Lists after the down migration: no error, want the table gone")
	}
	if _, err := s.Directory().Channels(t.Context()); err == nil {
		t.Errorf("Channels after the down migration: no error, want the table gone")
	}
	if _, err := s.Notifications().Count(t.Context(), ports.Filter{}); err != nil {
		t.Errorf("Count after the down migration: %v", err)
	}
}

func TestDirectoryDownSQLite(t *testing.T) {
	t.Parallel()
	checkDirectoryDown(t, newSQLiteStore(t))
}

func TestDirectoryDownPostgres(t *testing.T) {
	t.Parallel()
	checkDirectoryDown(t, newPostgresStore(t, postgresDSN(t)))
}
