package acceptance

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/sitecallstest"
)

// siteCallPageBenchShape names the shape of the rows siteCallPageRow
// makes; a change of the shape changes it, so that a cached database of the
// old shape is not used.
const siteCallPageBenchShape = "sitecalls-page-v1"

// siteCallPageBenchSites is how many sites the mirror holds rows of.
const siteCallPageBenchSites = 30

// BenchmarkSiteCallsPage measures the site-call views where the operator
// meets them: central's page handler (httpapi over core.Service with the
// store's SiteCalls mirror) on a mirror of OUTBOX_BENCH_SITECALL_PAGE_ROWS
// rows (default 1,000,000) over 30 sites, each request a GET by a
// logged-in viewer through the whole handler: session check, query, KPI
// tiles and the HTML (or JSON). The goal is 100 ms per request. The cases
// are the list with its tiles, filtered by status, by site and status, by
// kind, by a keyword of many last errors and by one of none; the Sites
// view, one site's view, and the KPIs of the API.
//
// It runs on SQLite and on PostgreSQL (OUTBOX_TEST_POSTGRES_DSN; skipped
// when unset). The rows are seeded as sites report them, through
// SiteCallStore.ReportSiteCalls in reports of ports.MaxSiteCallReport rows
// of one site, from 4 goroutines. Their shape is that of a mirror in
// service, mostly terminal: one call every few seconds over the last 30
// days, spread evenly over site-00 to site-29; 70 % calls to 6 systems
// (erp, mes, wms, lims, qms, cmms, a few methods each) and 30 % writes to 4
// database connections, 10 targets in all; 95 % Delivered (one in 20 after
// retries, keeping the last attempt's error), 2 % Failed (a permanent
// error), 1 % Discarded and 1 % Parked (after 5 retries), 0.5 % Retrying
// and 0.5 % Pending (the live queue, created in the last hour). Errors are
// drawn from a few realistic texts: transient ones (a 503, a refused
// connection, a timeout, a deadlock) and permanent ones (a 400, a 422, a
// duplicate key); about one row in 40 holds "timeout". Each site has three
// nodes, node-a leading, whose health is recorded once at the start of the
// run, so that /sites shows them connected.
//
// SQLite's database is seeded once and kept in the temporary directory,
// keyed by the row count, the row shape and the SQLite migrations, so that
// later runs start at once; OUTBOX_BENCH_SITECALL_PAGE_FRESH=1 seeds a
// fresh one. Times in the rows are relative to the seeding, so a cached
// database ages: its live queue grows old and its "failed in the last
// hour" empties; neither changes much what the queries read. As central
// runs SQLite, that database is not ANALYZEd. PostgreSQL's is a fresh
// schema each run, VACUUM ANALYZEd after the seeding as autovacuum leaves
// a table in service.
func BenchmarkSiteCallsPage(b *testing.B) {
	rows := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_SITECALL_PAGE_ROWS")); err == nil && v > 0 {
		rows = v
	}
	b.Run("sqlite", func(b *testing.B) {
		store, note := siteCallPageSQLite(b, rows)
		benchSiteCallsPage(b, store, note)
	})
	b.Run("postgres", func(b *testing.B) {
		cfg := postgresBackend.config(b) // skips unless OUTBOX_TEST_POSTGRES_DSN is set
		store := open(b, cfg)
		note := seedSiteCallPage(b, store, rows)
		start := time.Now()
		db, err := sql.Open("pgx", cfg.DSN)
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec("VACUUM ANALYZE site_calls"); err != nil {
			b.Fatalf("vacuum: %v", err)
		}
		note += fmt.Sprintf(", VACUUM ANALYZEd in %s", time.Since(start).Round(time.Second))
		benchSiteCallsPage(b, store, note)
	})
}

// benchSiteCallsPage runs the cases on store's mirror. The first case logs
// note, how the mirror was made: a leaf benchmark's log is printed without
// -v, its parent's is not.
func benchSiteCallsPage(b *testing.B, store *sqlstore.DB, note string) {
	recordSiteCallPageHealth(b, store)
	h, secret := pageBenchHandler(b, store, true)

	for _, c := range []struct {
		name, path string
		// want are in a body that answered the question.
		want []string
	}{
		{"all", "/site-calls", []string{`data-kpi="parked"`, `data-status=`}},
		{"status", "/site-calls?status=Parked", []string{`data-status="Parked"`}},
		{"site-status", "/site-calls?site=site-07&status=Parked", []string{`data-site="site-07"`, `data-status="Parked"`}},
		{"kind", "/site-calls?kind=write", []string{`<td class="nowrap">DatabaseWrite</td>`}},
		{"keyword", "/site-calls?q=timeout", []string{`data-status=`}},
		{"keyword-none", "/site-calls?q=zeppelin", []string{`No site call matches these filters.`}},
		{"sites", "/sites", []string{`data-site="site-07" data-state="connected"`}},
		{"site", "/sites/site-07", []string{`data-node="node-a"`, `data-kpi="parked"`}},
		{"kpis", "/api/v1/site-calls/kpis", []string{`"site": "site-07"`}},
	} {
		b.Run(c.name, func(b *testing.B) {
			if note != "" {
				b.Log(note)
				note = ""
			}
			get := func() *httptest.ResponseRecorder { return pageBenchGet(b, h, secret, c.path) }
			body := get().Body.String()
			for _, w := range c.want {
				if !strings.Contains(body, w) {
					b.Fatalf("GET %s: the answer lacks %q:\n%.2000s", c.path, w, body)
				}
			}
			for b.Loop() {
				get()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
		})
	}
}

// siteCallPageSQLite opens the benchmark's SQLite database of n mirror
// rows, seeding it when the cache has none, and says which it did.
func siteCallPageSQLite(b *testing.B, n int) (*sqlstore.DB, string) {
	b.Helper()
	dir := filepath.Join(os.TempDir(), "outbox-bench-sitecalls-page")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%d-%s-%s.db", n, siteCallPageBenchShape, schemaKey(b)))
	if os.Getenv("OUTBOX_BENCH_SITECALL_PAGE_FRESH") == "1" {
		removeSQLite(path)
	}
	if _, err := os.Stat(path); err == nil {
		return open(b, sqlstore.Config{Driver: sqlstore.DriverSQLite, DSN: path}),
			fmt.Sprintf("using the seeded database %s (OUTBOX_BENCH_SITECALL_PAGE_FRESH=1 seeds a fresh one)", path)
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
	note := seedSiteCallPage(b, s, n)
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

// seedSiteCallPage stores the n rows of siteCallPageRow as the sites
// report them: each site's rows in reports of ports.MaxSiteCallReport,
// the sites shared among 4 goroutines; it says how long that took.
func seedSiteCallPage(b *testing.B, store *sqlstore.DB, n int) string {
	b.Helper()
	ctx := context.Background()
	s := store.SiteCalls()
	start := time.Now()
	now := start.UTC().Truncate(time.Microsecond)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				site := int(next.Add(1)) - 1
				if site >= siteCallPageBenchSites {
					return
				}
				name := fmt.Sprintf("site-%02d", site)
				batch := make([]ports.Operation, 0, ports.MaxSiteCallReport)
				for i := site; i < n; i += siteCallPageBenchSites {
					batch = append(batch, siteCallPageRow(i, n, now))
					if len(batch) == ports.MaxSiteCallReport || i+siteCallPageBenchSites >= n {
						if _, err := s.ReportSiteCalls(ctx, name, batch, time.Now().UTC()); err != nil {
							b.Errorf("seed %s: %v", name, err)
							return
						}
						batch = batch[:0]
					}
				}
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return fmt.Sprintf("seeded %d site calls in %s", n, time.Since(start).Round(time.Second))
}

// recordSiteCallPageHealth records, at the time of the call, the health of
// the three nodes of each site, node-a leading.
func recordSiteCallPageHealth(b *testing.B, store *sqlstore.DB) {
	b.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	for site := range siteCallPageBenchSites {
		name := fmt.Sprintf("site-%02d", site)
		for _, node := range []string{"node-a", "node-b", "node-c"} {
			role := ports.RoleFollower
			if node == "node-a" {
				role = ports.RoleLeader
			}
			h := ports.SiteNodeHealth{SiteHealth: ports.SiteHealth{Site: name, Node: node, Backlog: 2,
				OldestEnqueuedAt:   now.Add(-3 * time.Second),
				Replica:            ports.ReplicaState{Node: node, Role: role, Term: 4, Leader: "node-a"},
				LastCentralContact: now.Add(-time.Second),
				Operations: []ports.OpKindStats{
					{Kind: ports.OpCall, Backlog: 12, Parked: 230, OldestBufferedAt: now.Add(-40 * time.Minute), Terminal: 22_000},
					{Kind: ports.OpWrite, Backlog: 5, Parked: 100, OldestBufferedAt: now.Add(-35 * time.Minute), Terminal: 9_500},
				}}, ReportedAt: now}
			if err := store.SiteCalls().RecordSiteHealth(ctx, h); err != nil {
				b.Fatalf("record %s/%s health: %v", name, node, err)
			}
		}
	}
}

// The targets, scripts and errors of the seeded rows.
var (
	siteCallPageSystems = []struct {
		name    string
		methods []string
	}{
		{"erp", []string{"createOrder", "confirmOrder", "postGoodsReceipt"}},
		{"mes", []string{"reportProduction", "startBatch"}},
		{"wms", []string{"moveStock", "reserveStock"}},
		{"lims", []string{"submitSample", "postResult"}},
		{"qms", []string{"openDeviation"}},
		{"cmms", []string{"createWorkOrder", "closeWorkOrder"}},
	}
	siteCallPageDatabases = []string{"historian-db", "quality-db", "reporting-db", "energy-db"}
	siteCallPageScripts   = []string{"orders/post", "production/report", "quality/results", "maintenance/workorder", "energy/meters"}
	// Transient errors, per kind (call, write); about one in three says
	// "timeout".
	siteCallPageTransient = [2][]string{
		{"503 Service Unavailable", "dial tcp 10.20.4.17:443: connect: connection refused",
			"context deadline exceeded (Client.Timeout exceeded while awaiting headers)"},
		{"dial tcp 10.20.8.5:1433: connect: connection refused", "read tcp 10.20.8.5:1433: i/o timeout",
			"mssql: Transaction (Process ID 63) was deadlocked on lock resources with another process and has been chosen as the deadlock victim. Rerun the transaction."},
	}
	// Permanent errors, per kind.
	siteCallPagePermanent = [2][]string{
		{"400 Bad Request: order already closed", "422 Unprocessable Entity: unknown material number"},
		{"mssql: Violation of PRIMARY KEY constraint 'PK_results'. Cannot insert duplicate key in object 'dbo.results'."},
	}
)

// siteCallPageRow is row i of n, seeded at now, of site i mod 30 (see
// BenchmarkSiteCallsPage for the shape).
func siteCallPageRow(i, n int, now time.Time) ports.Operation {
	r := rand.New(rand.NewPCG(uint64(i), 17))
	span := 30 * 24 * time.Hour
	created := now.Add(-span + time.Duration(int64(span)/int64(n)*int64(i)))
	op := sitecallstest.NewOperation(created)
	kind := 0
	if r.IntN(10) < 7 {
		sys := siteCallPageSystems[r.IntN(len(siteCallPageSystems))]
		op.Target, op.Method = sys.name, sys.methods[r.IntN(len(sys.methods))]
	} else {
		kind = 1
		op.Kind, op.Target, op.Method = ports.OpWrite, siteCallPageDatabases[r.IntN(len(siteCallPageDatabases))], ""
	}
	op.SourceInstance = fmt.Sprintf("line-%d", r.IntN(8))
	op.SourceScript = siteCallPageScripts[r.IntN(len(siteCallPageScripts))]
	op.ExecutionID, op.ParentExecutionID = fmt.Sprintf("exec-%d", i), ""
	transient := func() string { return siteCallPageTransient[kind][r.IntN(len(siteCallPageTransient[kind]))] }
	op.RetryCount, op.LastError, op.UpdatedAt = 0, "", created.Add(time.Duration(200+r.IntN(2000))*time.Millisecond)
	switch p := r.IntN(2000); {
	case p < 1900:
		op.Status = ports.OpDelivered
		if r.IntN(20) == 0 {
			op.RetryCount, op.LastError = 1+r.IntN(3), transient()
			op.UpdatedAt = created.Add(time.Duration(op.RetryCount) * 30 * time.Second)
		}
	case p < 1940:
		op.Status = ports.OpFailed
		op.LastError = siteCallPagePermanent[kind][r.IntN(len(siteCallPagePermanent[kind]))]
	case p < 1960:
		op.Status, op.RetryCount, op.LastError = ports.OpDiscarded, 5, transient()
		op.UpdatedAt = created.Add(time.Hour + time.Duration(r.IntN(8*3600))*time.Second)
	case p < 1980:
		op.Status, op.RetryCount, op.LastError = ports.OpParked, 5, transient()
		op.UpdatedAt = created.Add(25 * time.Minute)
	case p < 1990:
		op.CreatedAt = now.Add(-time.Duration(60+r.IntN(3600)) * time.Second)
		op.Status, op.RetryCount, op.LastError = ports.OpRetrying, 1+r.IntN(4), transient()
		op.UpdatedAt = now.Add(-time.Duration(r.IntN(60)) * time.Second)
		op.NextAttemptAt = op.UpdatedAt.Add(30 * time.Second)
	default:
		op.CreatedAt = now.Add(-time.Duration(1+r.IntN(600)) * time.Second)
		op.Status, op.LastError = ports.OpPending, transient()
		op.UpdatedAt = op.CreatedAt
		op.NextAttemptAt = op.UpdatedAt.Add(30 * time.Second)
	}
	if op.UpdatedAt.After(now) {
		op.UpdatedAt = now
	}
	op.TerminalAt = time.Time{}
	if op.Status.Terminal() {
		op.TerminalAt = op.UpdatedAt
	}
	op.Version = uint64(2 + op.RetryCount)
	return op
}
