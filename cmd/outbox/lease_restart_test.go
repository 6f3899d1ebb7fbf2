package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/plugins/webhook"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/storetest"
)

// holdingReceiver is a webhook receiver that counts the POSTs of each
// notification and, while holding, answers none of them until released, so
// that the notifications stay in flight at the sender.
type holdingReceiver struct {
	mu      sync.Mutex
	got     map[string]int
	total   int
	holding bool
	release chan struct{}
}

func newHoldingReceiver() *holdingReceiver {
	return &holdingReceiver{got: map[string]int{}, holding: true, release: make(chan struct{})}
}

func (h *holdingReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	h.mu.Lock()
	h.got[r.Header.Get(webhook.HeaderID)]++
	h.total++
	hold := h.holding
	h.mu.Unlock()
	if hold {
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// answer stops holding: held and later requests are answered at once.
func (h *holdingReceiver) answer() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.holding {
		h.holding = false
		close(h.release)
	}
}

// counts returns the POSTs received in all, and per notification id.
func (h *holdingReceiver) counts() (int, map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	got := make(map[string]int, len(h.got))
	for id, n := range h.got {
		got[id] = n
	}
	return h.total, got
}

// TestCentralRestartReleasesItsOwnLeases runs the built binary: a central
// with a node id and a claim lease of an hour has notifications in flight
// to a webhook receiver that does not answer, and more claimed behind them,
// when it is killed with SIGKILL. Restarted under the same node id, it
// delivers every one of them within seconds, not after the hour: the only
// duplicates are the notifications that were in flight at the kill.
func TestCentralRestartReleasesItsOwnLeases(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) {
		dir := t.TempDir()
		restartAfterKill(t, dir, nil, sqlstore.Config{Driver: sqlstore.DriverSQLite, DSN: filepath.Join(dir, "outbox.db")})
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		dsn := os.Getenv("OUTBOX_TEST_POSTGRES_DSN")
		if dsn == "" {
			t.Skip("OUTBOX_TEST_POSTGRES_DSN is not set (.ci/test.sh sets it)")
		}
		db := throwawayPostgresDB(t, dsn)
		restartAfterKill(t, t.TempDir(), []string{"OUTBOX_STORE_DRIVER=postgres", "OUTBOX_STORE_DSN=" + db},
			sqlstore.Config{Driver: sqlstore.DriverPostgres, DSN: db})
	})
}

func restartAfterKill(t *testing.T, dir string, env []string, sc sqlstore.Config) {
	const (
		node        = "central-lease"
		sent        = 10
		concurrency = 4 // deliveries in flight at once: the rest of the batch waits, leased
		lease       = time.Hour
	)
	recv := newHoldingReceiver()
	srv := httptest.NewServer(recv)
	defer srv.Close()
	defer recv.answer() // Close waits for the handlers

	file := filepath.Join(dir, "central.yaml")
	data := fmt.Sprintf(`
data_dir: %[1]s
outbox: {node_id: %[2]s, dispatch_interval: 50ms, dispatch_concurrency: %[3]d, claim_lease: %[4]s}
log: {format: json}
delivery: {network: {allow: ["127.0.0.1"]}}   # the receiver is on loopback, which the default policy denies
lists:
  - {name: hooks, type: webhook, targets: ["%[5]s/hook"]}
channels:
  - {type: webhook}
`, dir, node, concurrency, lease, srv.URL)
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	env = childEnv(env...)

	first := start(t, dir, env, "central", "-config", file)
	first.waitFor(t, `"msg":"central started"`, startTimeout)

	store, err := sqlstore.Open(t.Context(), sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var ids []string
	var rows []ports.Notification
	now := time.Now().UTC()
	for i := range sent {
		n := storetest.NewNotification(now.Add(time.Duration(i) * time.Microsecond))
		n.Type, n.List, n.SourceSite = "webhook", "hooks", "site-a"
		rows = append(rows, n)
		ids = append(ids, n.ID)
	}
	if _, err := store.Notifications().Insert(t.Context(), rows); err != nil {
		t.Fatal(err)
	}

	// concurrency POSTs held at the receiver; every row leased by the
	// first run.
	waitCondition(t, "the first run's deliveries in flight", func() bool {
		total, _ := recv.counts()
		return total >= concurrency && leasedByPrefix(t, store, ids, node+"/") == sent
	})

	killCentral(t, first)
	inFlight, _ := recv.counts() // POSTs made by the killed run, none answered
	recv.answer()
	if n := leasedByPrefix(t, store, ids, node+"/"); n != sent {
		t.Fatalf("%d of %d rows leased by the killed run, want all", n, sent)
	}

	restarted := time.Now()
	second := start(t, dir, env, "central", "-config", file)
	second.waitFor(t, `"msg":"central started"`, startTimeout)
	// The lease runs for an hour: without the release, this fails at its
	// deadline.
	var delivered int
	waitCondition(t, "every row delivered after the restart", func() bool {
		delivered = 0
		for _, id := range ids {
			if n, err := store.Notifications().Get(t.Context(), id); err == nil && n.Status == ports.StatusDelivered {
				delivered++
			}
		}
		return delivered == sent
	})
	took := time.Since(restarted)
	line := second.waitFor(t, `"msg":"released the leases of an earlier run of this node"`, stopTimeout)
	if rec := jsonLine(t, line); rec["rows"] != float64(sent) || rec["node_id"] != node {
		t.Errorf("release line %v, want rows=%d node_id=%s", rec, sent, node)
	}

	total, got := recv.counts()
	duplicates := total - len(got)
	lost := sent - delivered
	t.Logf("sent %d, in flight at the kill %d, delivered %d, lost %d, duplicates at the receiver %d, "+
		"all delivered %s after the restart (claim lease %s)", sent, inFlight, delivered, lost, duplicates, took.Round(time.Millisecond), lease)
	if len(got) != sent {
		t.Errorf("the receiver saw %d distinct notifications, want %d: %v", len(got), sent, got)
	}
	if duplicates > inFlight {
		t.Errorf("%d duplicates, more than the %d notifications in flight at the kill", duplicates, inFlight)
	}

	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := second.exitCode(t, stopTimeout); code != 0 {
		t.Fatalf("exit %d:\n%s", code, second.Output())
	}
}

// waitCondition polls cond until it holds, failing the test after
// runTimeout.
func waitCondition(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(runTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, runTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leasedByPrefix counts the rows of ids whose lease owner begins with
// prefix.
func leasedByPrefix(t *testing.T, store *sqlstore.DB, ids []string, prefix string) int {
	t.Helper()
	n := 0
	for _, id := range ids {
		row, err := store.Notifications().Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(row.ClaimedBy, prefix) {
			n++
		}
	}
	return n
}
