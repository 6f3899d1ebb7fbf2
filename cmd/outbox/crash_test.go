package main

import (
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/devkit/pgserver"
	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// The failure tests of central: real outbox central processes on one
// PostgreSQL database, a real webhook receiver, kill -9 of a node and an
// immediate restart of the database under load. Each counts what it sent,
// what was delivered, what was lost (must be none) and the duplicates, as the
// receiver saw them.

// crashRows is how many notifications each failure test dispatches.
const crashRows = 5000

// hookReceiver is the webhook receiver of the failure tests: it counts the
// deliveries of each notification by its webhook-id header.
type hookReceiver struct {
	srv *httptest.Server

	mu    sync.Mutex
	got   map[string]int
	total int
}

func newHookReceiver(t *testing.T) *hookReceiver {
	t.Helper()
	h := &hookReceiver{got: make(map[string]int)}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("webhook-id")
		if id == "" {
			http.Error(w, "no webhook-id", http.StatusBadRequest)
			return
		}
		h.mu.Lock()
		h.got[strings.ToLower(id)]++
		h.total++
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// deliveries returns how many posts arrived in all.
func (h *hookReceiver) deliveries() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// waitDeliveries waits until at least n posts arrived.
func (h *hookReceiver) waitDeliveries(t *testing.T, n int) {
	t.Helper()
	waittest.For(t, runTimeout, fmt.Sprintf("%d deliveries", n), waittest.Holds(func() bool { return h.deliveries() >= n }))
}

// count compares what arrived with ids: the ids never delivered (lost) and
// the deliveries beyond the first of each id, by id (duplicates).
func (h *hookReceiver) count(ids []string) (lost []string, dups map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	dups = make(map[string]int)
	for _, id := range ids {
		switch n := h.got[strings.ToLower(id)]; {
		case n == 0:
			lost = append(lost, id)
		case n > 1:
			dups[id] = n - 1
		}
	}
	return lost, dups
}

// crashCentral writes the configuration of one central node of the failure
// tests: node id node, the database of the environment, a webhook list to
// the receiver.
func crashCentral(t *testing.T, dir, node string, hook *hookReceiver) string {
	t.Helper()
	file := filepath.Join(dir, node+".yaml")
	data := fmt.Sprintf(`
outbox: {node_id: %s, dispatch_interval: 100ms}
log: {format: json}
delivery: {network: {allow: ["127.0.0.1"]}}   # the receiver is on loopback, which the default policy denies
lists:
  - {name: hooks, type: webhook, targets: ["%s/hook"]}
channels:
  - {type: webhook, retry: {max_retries: 10, interval: 100ms}}
`, node, hook.srv.URL)
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// startCentral starts one central node from its configuration file and
// waits until it runs.
func startCentral(t *testing.T, dir string, env []string, file string) *proc {
	t.Helper()
	p := start(t, dir, env, "central", "-config", file)
	p.waitFor(t, `"msg":"central started"`, startTimeout)
	return p
}

// insertPending stores n Pending notifications for list hooks from site-a,
// as ingest would, and returns their ids.
func insertPending(t *testing.T, dsn string, n int) []string {
	t.Helper()
	ctx := t.Context()
	store, err := sqlstore.Open(ctx, sqlstore.Config{Driver: sqlstore.DriverPostgres, DSN: dsn}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ids := make([]string, n)
	rows := make([]ports.Notification, 0, 500)
	now := time.Now().UTC()
	for i := range n {
		ids[i] = uuid.Must(uuid.NewV7()).String()
		rows = append(rows, ports.Notification{ID: ids[i], Type: "webhook", List: "hooks",
			Subject: fmt.Sprintf("Tank %d level high", i), Body: "Level above 95 %.", Status: ports.StatusPending,
			SourceSite: "site-a", CreatedAt: now, UpdatedAt: now})
		if len(rows) == cap(rows) || i == n-1 {
			if _, err := store.Notifications().Insert(ctx, rows); err != nil {
				t.Fatalf("insert: %v", err)
			}
			rows = rows[:0]
		}
	}
	return ids
}

// openPostgres opens dsn with database/sql for the tests' own queries.
func openPostgres(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// unrecorded counts the Delivered rows whose history holds no record that
// the row was delivered (status Delivered): an outcome is written with its
// audit records, so a crash or a restart of the database leaves none.
func unrecorded(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM "notifications" AS n WHERE n."status" = 'Delivered' `+
		`AND NOT EXISTS (SELECT 1 FROM "notification_audit" AS a WHERE a."notification_id" = n."id" AND a."status" = 'Delivered')`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// leasedBy returns the ids of the Pending and Retrying rows whose lease
// belongs to a run of central node node.
func leasedBy(t *testing.T, db *sql.DB, node string) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(),
		`SELECT "id" FROM "notifications" WHERE "claimed_by" LIKE $1 AND "status" IN ('Pending', 'Retrying')`,
		node+"/%")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// statusCounts returns how many rows are in each status.
func statusCounts(t *testing.T, db *sql.DB) map[string]int {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT "status", count(*) FROM "notifications" GROUP BY "status"`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		out[s] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitAllDelivered waits until every row is Delivered and the receiver saw
// every id, and returns how long that took from since.
func waitAllDelivered(t *testing.T, db *sql.DB, hook *hookReceiver, ids []string, since time.Time, nodes ...*proc) time.Duration {
	t.Helper()
	waittest.For(t, runTimeout, fmt.Sprintf("all %d delivered", len(ids)), func() (bool, string) {
		lost, _ := hook.count(ids)
		counts := statusCounts(t, db)
		if len(lost) == 0 && counts[string(ports.StatusDelivered)] == len(ids) {
			return true, ""
		}
		var out strings.Builder
		for _, p := range nodes {
			out.WriteString(tail(p.Output(), 40))
		}
		return false, fmt.Sprintf("%d never reached the receiver; statuses %v\n%s", len(lost), counts, out.String())
	})
	return time.Since(since)
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n") + "\n"
}

// sortedKeys returns m's keys in order, for stable messages.
func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestCentralKilledMidDispatch runs two central nodes on one PostgreSQL
// database dispatching 5,000 notifications to a webhook receiver, kills one
// with SIGKILL mid-dispatch and starts it again under the same node id.
// Every notification must be delivered; the only duplicates allowed are
// notifications the killed node held leased at the kill (delivered, not yet
// recorded), at most one each; no plugin process of the killed node may
// outlive it (killCentral); and the restarted node must release its earlier
// run's leases at once rather than wait out the five-minute lease.
func TestCentralKilledMidDispatch(t *testing.T) {
	dsn := os.Getenv("OUTBOX_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("OUTBOX_TEST_POSTGRES_DSN is not set (.ci/test.sh sets it)")
	}
	dbDSN := throwawayPostgresDB(t, dsn)
	dir := t.TempDir()
	env := childEnv("OUTBOX_STORE_DRIVER=postgres", "OUTBOX_STORE_DSN="+dbDSN)
	if code, out := runToEnd(t, dir, env, "migrate"); code != 0 {
		t.Fatalf("migrate: exit %d:\n%s", code, out)
	}
	db := openPostgres(t, dbDSN)
	hook := newHookReceiver(t)
	ids := insertPending(t, dbDSN, crashRows)
	fileA, fileB := crashCentral(t, dir, "central-a", hook), crashCentral(t, dir, "central-b", hook)

	a := startCentral(t, dir, env, fileA)
	b := startCentral(t, dir, env, fileB)
	hook.waitDeliveries(t, crashRows/5)

	killed := time.Now()
	plugins, gone := killCentral(t, a)
	atKill := hook.deliveries()
	inFlight := leasedBy(t, db, "central-a")
	t.Logf("killed central-a after %d deliveries; it held %d rows leased; its %d plugin processes were gone %s after the kill",
		atKill, len(inFlight), plugins, gone.Round(time.Millisecond))
	if atKill >= crashRows {
		t.Fatalf("all %d delivered before the kill: the test did not kill mid-dispatch", crashRows)
	}

	a2 := startCentral(t, dir, env, fileA)
	took := waitAllDelivered(t, db, hook, ids, killed, a2, b)

	lost, dups := hook.count(ids)
	extra := 0
	for _, id := range sortedKeys(dups) {
		extra += dups[id]
		if dups[id] > 1 {
			t.Errorf("notification %s delivered %d times", id, dups[id]+1)
		}
		if !slices.Contains(inFlight, id) {
			t.Errorf("notification %s delivered twice but was not in flight at central-a's kill", id)
		}
	}
	t.Logf("kill -9 of one of two centrals: sent %d, delivered %d, lost %d, duplicates %d (bound: %d in flight at the kill), all delivered %s after the kill",
		len(ids), len(ids)-len(lost), len(lost), extra, len(inFlight), took.Round(time.Millisecond))
	if len(lost) > 0 {
		t.Errorf("%d notifications lost", len(lost))
	}
	if took > time.Minute {
		t.Errorf("the restarted node took %s to deliver its earlier run's rows: it waited out the lease", took)
	}
	if n := unrecorded(t, db); n > 0 {
		t.Errorf("%d Delivered rows have no Delivered record in their history", n)
	}
}

// TestCentralsSurviveDatabaseRestart runs two central nodes on a PostgreSQL
// server of the test's own, restarts the server with pg_ctl restart -m
// immediate while they dispatch 5,000 notifications, and requires every
// notification delivered exactly once: the database is back well within the
// lease, so outcomes that failed to record are recorded when it is.
func TestCentralsSurviveDatabaseRestart(t *testing.T) {
	pg := pgserver.Run(t)
	dir := t.TempDir()
	env := childEnv("OUTBOX_STORE_DRIVER=postgres", "OUTBOX_STORE_DSN="+pg.DSN)
	if code, out := runToEnd(t, dir, env, "migrate"); code != 0 {
		t.Fatalf("migrate: exit %d:\n%s", code, out)
	}
	db := openPostgres(t, pg.DSN)
	hook := newHookReceiver(t)
	ids := insertPending(t, pg.DSN, crashRows)
	a := startCentral(t, dir, env, crashCentral(t, dir, "central-a", hook))
	b := startCentral(t, dir, env, crashCentral(t, dir, "central-b", hook))
	hook.waitDeliveries(t, crashRows/5)

	restarted := time.Now()
	atRestart := hook.deliveries()
	if err := pg.RestartImmediate(); err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL restarted (immediate) after %d deliveries, back in %s", atRestart, time.Since(restarted).Round(time.Millisecond))
	if atRestart >= crashRows {
		t.Fatalf("all %d delivered before the restart: the test did not restart under load", crashRows)
	}
	took := waitAllDelivered(t, db, hook, ids, restarted, a, b)

	lost, dups := hook.count(ids)
	extra := 0
	for _, id := range sortedKeys(dups) {
		extra += dups[id]
	}
	t.Logf("PostgreSQL restart under load: sent %d, delivered %d, lost %d, duplicates %d, all delivered %s after the restart",
		len(ids), len(ids)-len(lost), len(lost), extra, took.Round(time.Millisecond))
	if len(lost) > 0 {
		t.Errorf("%d notifications lost", len(lost))
	}
	if extra > 0 {
		t.Errorf("%d duplicate deliveries, e.g. %s", extra, sortedKeys(dups)[0])
	}
	if n := unrecorded(t, db); n > 0 {
		t.Errorf("%d Delivered rows have no Delivered record in their history", n)
	}
	for _, p := range []*proc{a, b} {
		if !strings.Contains(p.Output(), "central started") {
			t.Errorf("node output:\n%s", tail(p.Output(), 40))
		}
	}
}
