package acceptance

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"golang.org/x/crypto/bcrypt"

	"github.com/siteline/outbox/adapters/httpapi"
	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/migrations"
	"github.com/siteline/outbox/ports"
)

// pageBenchShape names the shape of the rows pageBenchRow makes; a change of
// the shape changes it, so that a cached database of the old shape is not
// used.
const pageBenchShape = "page-v1"

// BenchmarkPage measures the queries where the operator meets them: central's page
// handler (httpapi over core.Service and core.Operators) on the real store
// holding OUTBOX_BENCH_PAGE_ROWS rows (default 1,000,000), each request a
// GET by a logged-in viewer through the whole handler: session check,
// query, the status chips' counts (one per status, for the other filters),
// KPI tiles and the HTML. The goal is 100 ms per request. The chips cases
// time the chips alone: the page's count of each status for the filter of
// the list case they are named after, as GET /api/v1/notifications/count
// requests.
//
// It runs on SQLite and on PostgreSQL (OUTBOX_TEST_POSTGRES_DSN; skipped
// when unset). SQLite's database is seeded once and kept in the temporary
// directory, keyed by the row count, the row shape and the SQLite
// migrations, so that later runs start at once; OUTBOX_BENCH_PAGE_FRESH=1
// seeds a fresh one. Times in the rows are relative to the seeding, so a
// cached database ages: its queue grows stuck and its "delivered in the
// last minute" empties. Neither changes what the queries read much. As
// central runs SQLite, that database is not ANALYZEd. PostgreSQL's is a
// fresh schema each run, VACUUM ANALYZEd after the seeding as autovacuum
// leaves a table in service.
func BenchmarkPage(b *testing.B) {
	rows := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_PAGE_ROWS")); err == nil && v > 0 {
		rows = v
	}
	b.Run("sqlite", func(b *testing.B) {
		store, note := pageBenchStore(b, rows)
		benchPage(b, store, note)
	})
	b.Run("postgres", func(b *testing.B) {
		cfg := postgresBackend.config(b) // skips unless OUTBOX_TEST_POSTGRES_DSN is set
		store := open(b, cfg)
		note := seedPageBench(b, store, rows)
		start := time.Now()
		db, err := sql.Open("pgx", cfg.DSN)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec("VACUUM ANALYZE notifications, notification_keys"); err != nil {
			b.Fatalf("vacuum: %v", err)
		}
		note += fmt.Sprintf(", VACUUM ANALYZEd in %s", time.Since(start).Round(time.Second))
		benchPage(b, store, note)
	})
}

// chipPaths are the requests of the status chips of the list filtered by
// query (without status): one count per central status.
func chipPaths(query string) []string {
	out := make([]string, 0, len(ports.CentralStatuses))
	for _, st := range ports.CentralStatuses {
		p := "/api/v1/notifications/count?status=" + string(st)
		if query != "" {
			p += "&" + query
		}
		out = append(out, p)
	}
	return out
}

// benchPage runs the cases on store. The first case logs note, how the
// store was made: a leaf benchmark's log is printed without -v, its
// parent's is not.
func benchPage(b *testing.B, store *sqlstore.DB, note string) {
	h, secret := pageBenchHandler(b, store, false)
	// A list view shows each status chip with its count, but under a list,
	// type or keyword filter, which no index answers with the status.
	chips, uncounted := `data-count="Parked"`, `counted without a list, type or keyword filter`
	for _, c := range []struct {
		name  string
		paths []string
		// want is in the first body, which answered the question.
		want string
	}{
		{"all", []string{"/notifications"}, chips},
		{"status", []string{"/notifications?status=Parked"}, `data-status="Parked"`},
		{"site-status", []string{"/notifications?status=Parked&site=site-07"}, `data-status="Parked"`},
		{"site-status-keyword", []string{"/notifications?status=Parked&site=site-07&q=pump"}, `data-status="Parked"`},
		{"keyword", []string{"/notifications?q=pump"}, uncounted},
		{"keyword-rare", []string{"/notifications?q=flooded"}, uncounted},
		{"list-status", []string{"/notifications?status=Pending&status=Retrying&list=maintenance"}, uncounted},
		{"stuck", []string{"/notifications?stuck=true"}, `badge stuck`},
		{"chips-all", chipPaths(""), `"count"`},
		{"chips-site", chipPaths("site=site-07"), `"count"`},
		{"chips-keyword", chipPaths("q=pump"), `"count"`},
		{"kpis", []string{"/api/v1/kpis"}, `"queue_depth"`},
	} {
		b.Run(c.name, func(b *testing.B) {
			if note != "" {
				b.Log(note)
				note = ""
			}
			get := func() *httptest.ResponseRecorder {
				var first *httptest.ResponseRecorder
				for _, p := range c.paths {
					rec := pageBenchGet(b, h, secret, p)
					if first == nil {
						first = rec
					}
				}
				return first
			}
			if body := get().Body.String(); !strings.Contains(body, c.want) {
				b.Fatalf("GET %s: the answer lacks %q:\n%.2000s", c.paths[0], c.want, body)
			}
			for b.Loop() {
				get()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
		})
	}
}

// pageBenchHandler is central's page handler (httpapi over core.Service and
// core.Operators) on store, with the mirror of the sites' cached calls when
// siteCalls is set, and the session secret of a logged-in viewer.
func pageBenchHandler(b *testing.B, store *sqlstore.DB, siteCalls bool) (h http.Handler, secret string) {
	b.Helper()
	ctx := context.Background()
	deps := core.Deps{Store: store.Notifications(), Audit: store.Notifications(), Directory: store.Directory(),
		Channels: ports.ChannelMap{}, Logger: testLogger()}
	if siteCalls {
		deps.SiteCalls = store.SiteCalls()
	}
	svc, err := core.New(core.Config{}, deps)
	if err != nil {
		b.Fatal(err)
	}
	ops, err := core.NewOperators(store.Accounts(), ports.SystemClock{}, core.OperatorsConfig{BcryptCost: bcrypt.MinCost}, nil)
	if err != nil {
		b.Fatal(err)
	}
	const viewer, password = "bench-viewer", "bench viewer password"
	if _, err := ops.PutUser(ctx, ports.UserRequest{Actor: ports.ActorSystem, Name: viewer, Role: ports.RoleViewer, Password: password}); err != nil {
		b.Fatal(err)
	}
	sess, err := ops.Login(ctx, ports.LoginRequest{Name: viewer, Password: password})
	if err != nil {
		b.Fatal(err)
	}
	editor, err := core.NewDirectoryEditor(store.Directory(), store.Accounts(), ports.SystemClock{}, core.DirectoryEditorConfig{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	cfg := httpapi.Config{Outbox: svc, Directory: store.Directory(), Editor: editor, Operators: ops, Logger: testLogger()}
	if siteCalls {
		cfg.SiteCalls = svc
	}
	srv, err := httpapi.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return srv.Handler(), sess.Secret
}

// pageBenchGet is one GET of path through h by the session secret; any
// answer but 200 fails the benchmark.
func pageBenchGet(b *testing.B, h http.Handler, secret, path string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.AddCookie(&http.Cookie{Name: "outbox_session", Value: secret})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("GET %s: %d %.300s", path, rec.Code, rec.Body.String())
	}
	return rec
}

// pageBenchStore opens the benchmark's SQLite database of n rows, seeding it
// when the cache has none, and says which it did.
func pageBenchStore(b *testing.B, n int) (*sqlstore.DB, string) {
	b.Helper()
	dir := filepath.Join(os.TempDir(), "outbox-bench-page")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%d-%s.db", n, schemaKey(b)))
	if os.Getenv("OUTBOX_BENCH_PAGE_FRESH") == "1" {
		removeSQLite(path)
	}
	if _, err := os.Stat(path); err == nil {
		return open(b, sqlstore.Config{Driver: sqlstore.DriverSQLite, DSN: path}),
			fmt.Sprintf("using the seeded database %s (OUTBOX_BENCH_PAGE_FRESH=1 seeds a fresh one)", path)
	}
	// Seed under another name, and give it its name once complete, so that
	// an interrupted seeding is never taken for a database.
	tmp := fmt.Sprintf("%s.seeding-%d", path, os.Getpid())
	removeSQLite(tmp)
	ctx := context.Background()
	s, err := sqlstore.Open(ctx, sqlstore.Config{Driver: sqlstore.DriverSQLite, DSN: tmp}, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	note := seedPageBench(b, s, n)
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(tmp + suffix); err == nil {
			b.Fatalf("the seeded database still has its %s file after Close", suffix)
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		b.Fatal(err)
	}
	return open(b, sqlstore.Config{Driver: sqlstore.DriverSQLite, DSN: path}), note + " into " + path
}

// seedPageBench inserts the n rows of pageBenchRow into store, oldest
// first, 1,000 a statement; it says how long that took.
func seedPageBench(b *testing.B, store *sqlstore.DB, n int) string {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	now := start.UTC()
	const chunk = 1000
	batch := make([]ports.Notification, 0, chunk)
	for i := range n {
		batch = append(batch, pageBenchRow(i, n, now))
		if len(batch) == chunk || i == n-1 {
			if _, err := store.Notifications().Insert(ctx, batch); err != nil {
				b.Fatalf("seed: %v", err)
			}
			batch = batch[:0]
		}
	}
	return fmt.Sprintf("seeded %d rows in %s", n, time.Since(start).Round(time.Second))
}

// schemaKey is a short digest of the SQLite migrations and the row shape.
func schemaKey(b *testing.B) string {
	b.Helper()
	fsys, err := migrations.FS("sqlite")
	if err != nil {
		b.Fatal(err)
	}
	h := sha256.New()
	h.Write([]byte(pageBenchShape))
	err = fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %d\n", path, len(data))
		h.Write(data)
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// removeSQLite removes a SQLite database file and its companions.
func removeSQLite(path string) {
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		_ = os.Remove(path + suffix)
	}
}

// Words of the seeded subjects.
var (
	pageBenchEquipment = []string{"Pump", "Tank", "Valve", "Boiler", "Compressor", "Chiller", "Conveyor", "Fan",
		"Generator", "Mixer", "Filter", "Heat exchanger"}
	pageBenchConditions = []string{"pressure low", "level high", "stopped", "overheating", "vibration alarm",
		"offline", "restarted", "door open", "flow low", "power lost", "sensor fault", "maintenance due"}
	pageBenchLists = []string{"operators", "oncall", "maintenance", "managers", "control-room", "night-shift",
		"electrical", "mechanical", "safety", "quality", "logistics", "it-ops", "energy", "water", "hvac"}
)

// pageBenchRow is row i of n, seeded at now: one row every few seconds over
// the last 30 days, oldest first, from 60 sites to 15 lists through three
// channel types. Subjects are equipment, a number and a condition ("Pump 12
// pressure low"); one in 12 names a pump, one in 5,000 says "flooded". The
// newest 2,000 rows are the live queue (mostly Pending and Retrying); older
// rows are 94 % Delivered, 3 % Parked, 2.5 % Discarded, and a few were left
// Pending or Retrying (stuck).
func pageBenchRow(i, n int, now time.Time) ports.Notification {
	r := rand.New(rand.NewPCG(uint64(i), 11))
	span := 30 * 24 * time.Hour
	created := now.Add(-span + time.Duration(int64(span)/int64(n)*int64(i)))
	subject := fmt.Sprintf("%s %d %s", pageBenchEquipment[r.IntN(len(pageBenchEquipment))], 1+r.IntN(40),
		pageBenchConditions[r.IntN(len(pageBenchConditions))])
	if r.IntN(5000) == 0 {
		subject += ", basement flooded"
	}
	row := ports.Notification{
		ID: uuid.Must(uuid.NewV7()).String(), Type: []string{"email", "email", "webhook", "slack"}[r.IntN(4)],
		List: pageBenchLists[r.IntN(len(pageBenchLists))], Subject: subject,
		Body:       "Reported by the plant's alarm script: " + subject + ".",
		SourceSite: fmt.Sprintf("site-%02d", r.IntN(60)), SourceInstance: fmt.Sprintf("line-%d", r.IntN(8)),
		SourceScript: "alarms/check", ExecutionID: fmt.Sprintf("exec-%d", i),
		SiteEnqueuedAt: created.Add(-time.Second), CreatedAt: created, UpdatedAt: created,
	}
	p := r.IntN(1000)
	if i >= n-2000 { // the live queue
		switch {
		case p < 600:
			row.Status = ports.StatusPending
		case p < 800:
			row.Status, row.RetryCount, row.NextAttemptAt = ports.StatusRetrying, 1+r.IntN(3), now.Add(time.Minute)
			row.LastError = "dial tcp: connection refused"
		default:
			p = 0 // Delivered
		}
		if row.Status != "" {
			return row
		}
	}
	switch {
	case p < 940:
		row.Status, row.DeliveredAt, row.LastAttemptAt = ports.StatusDelivered, created.Add(2*time.Second), created.Add(2*time.Second)
		row.UpdatedAt, row.ResolvedTargets = row.DeliveredAt, []string{"ops@example.com"}
	case p < 970:
		row.Status, row.LastAttemptAt, row.LastError = ports.StatusParked, created.Add(time.Second), "550 5.1.1 mailbox unavailable"
		row.UpdatedAt = row.LastAttemptAt
	case p < 995:
		row.Status, row.UpdatedAt, row.LastError = ports.StatusDiscarded, created.Add(time.Hour), "550 5.1.1 mailbox unavailable"
	case p < 998:
		row.Status, row.RetryCount, row.NextAttemptAt = ports.StatusRetrying, 5, now.Add(time.Minute)
		row.LastError = "421 try again later"
	default:
		row.Status = ports.StatusPending
	}
	return row
}
