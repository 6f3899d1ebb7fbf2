package acceptance

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/siteline/outbox/adapters/devkit/pgserver"
	"github.com/siteline/outbox/adapters/siteapi/notify"
	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/waittest"
)

// The failure tests of the site's cached operations: real `outbox site`
// processes, a real HTTP server and a real PostgreSQL server on loopback.
// Each counts at the target: every operation acknowledged to its caller
// (an id and a status returned) must be delivered, and repeats are counted
// and bounded by the operations in flight during the failure.

// opWait bounds the waits of these tests for the site to settle.
const opWait = 90 * time.Second

// erpSystem is an external system: POST /orders answers 503 while it is
// down; once up, 400 to an order whose item is "bad" and 201 otherwise.
// It counts every request per Idempotency-Key, and the accepted ones.
type erpSystem struct {
	*httptest.Server
	up atomic.Bool

	mu       sync.Mutex
	requests map[string]int         // Idempotency-Key → requests, any answer
	accepted map[string]int         // Idempotency-Key → 201 answers
	repeated map[string][]time.Time // Idempotency-Key → when accepted again
}

func newERPSystem(t *testing.T) *erpSystem {
	t.Helper()
	e := &erpSystem{requests: map[string]int{}, accepted: map[string]int{}, repeated: map[string][]time.Time{}}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		e.mu.Lock()
		e.requests[key]++
		e.mu.Unlock()
		if !e.up.Load() {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
		var order struct{ Item string }
		if json.Unmarshal(body, &order) != nil || order.Item == "" || order.Item == "bad" {
			http.Error(w, "no such item", http.StatusBadRequest)
			return
		}
		e.mu.Lock()
		if e.accepted[key]++; e.accepted[key] > 1 {
			e.repeated[key] = append(e.repeated[key], time.Now())
		}
		e.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"order":"A-1"}`)
	}))
	t.Cleanup(e.Close)
	return e
}

// counts returns a copy of the request and accepted counts.
func (e *erpSystem) counts() (requests, accepted map[string]int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	requests, accepted = make(map[string]int, len(e.requests)), make(map[string]int, len(e.accepted))
	for k, v := range e.requests {
		requests[k] = v
	}
	for k, v := range e.accepted {
		accepted[k] = v
	}
	return requests, accepted
}

// repeatsAround counts the repeated receipts before from, between from and
// to, and after to.
func (e *erpSystem) repeatsAround(from, to time.Time) (before, during, after int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ts := range e.repeated {
		for _, at := range ts {
			switch {
			case at.Before(from):
				before++
			case at.After(to):
				after++
			default:
				during++
			}
		}
	}
	return before, during, after
}

// erpConfig is the site configuration of the system e.
func erpConfig(e *erpSystem, maxRetries int, interval string) string {
	return fmt.Sprintf(`external_systems:
  - name: erp
    base_url: %q
    timeout: 5s
    max_retries: %d
    retry_interval: %s
    methods:
      - {name: order, verb: POST, path: /orders}
`, e.URL, maxRetries, interval)
}

// opBurst is a burst of cached operations from concurrent callers, each
// with its own tracked id made before the first try.
type opBurst struct {
	returned atomic.Int64
	reached  chan struct{} // closed once mark operations have returned
	done     chan struct{} // closed once all have

	mu    sync.Mutex
	acked map[string]int    // id → index, of every operation answered with a row
	ids   map[int]string    // index → id, of every operation tried
	spans map[int]span      // index → when it was in flight
	rows  map[string]string // id → status answered
	fails []error
}

// span is when an operation was in flight: from its first try to its
// answer (zero while it is in flight).
type span struct{ from, to time.Time }

// startOpBurst runs do for 0 … total-1 from callers goroutines, each with a
// 30 s deadline and a new UUIDv7. The test's end cancels what is left.
func startOpBurst(t *testing.T, total, callers int, mark int64,
	do func(ctx context.Context, id string, i int) (notify.Result, error)) *opBurst {
	ctx, cancel := context.WithCancel(context.Background())
	b := &opBurst{reached: make(chan struct{}), done: make(chan struct{}),
		acked: map[string]int{}, ids: map[int]string{}, spans: map[int]span{}, rows: map[string]string{}}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= total || ctx.Err() != nil {
					return
				}
				id := uuid.Must(uuid.NewV7()).String()
				b.mu.Lock()
				b.ids[i] = id
				b.spans[i] = span{from: time.Now()}
				b.mu.Unlock()
				octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
				res, err := do(octx, id, i)
				ocancel()
				b.mu.Lock()
				b.spans[i] = span{from: b.spans[i].from, to: time.Now()}
				if err != nil {
					b.fails = append(b.fails, fmt.Errorf("operation %d (%s): %w", i, id, err))
				} else {
					b.acked[id] = i
					b.rows[id] = string(res.Operation.Status)
				}
				b.mu.Unlock()
				if b.returned.Add(1) == mark {
					close(b.reached)
				}
			}
		})
	}
	go func() {
		wg.Wait()
		close(b.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-b.done
	})
	return b
}

// waitMark waits until the burst's mark is reached.
func (b *opBurst) waitMark(t *testing.T) {
	t.Helper()
	select {
	case <-b.reached:
	case <-b.done:
		t.Fatalf("the burst ended before its mark (%d returned)", b.returned.Load())
	case <-time.After(3 * time.Minute):
		t.Fatalf("the burst's mark not reached within 3 minutes (%d returned)", b.returned.Load())
	}
}

// wait waits for every operation of the burst to return.
func (b *opBurst) wait(t *testing.T) {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the burst not over within 3 minutes (%d returned)", b.returned.Load())
	}
}

// inFlightDuring counts the operations, of those whose index is one of mine,
// that were in flight at some time between from and to: the bound of the
// repeats a failure in that window may cause, since only an attempt whose
// outcome was not recorded is made again.
func (b *opBurst) inFlightDuring(from, to time.Time, mine func(int) bool) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var n int64
	for i, sp := range b.spans {
		if mine(i) && sp.from.Before(to) && (sp.to.IsZero() || sp.to.After(from)) {
			n++
		}
	}
	return n
}

// outside returns the operations of is that were not in flight between
// from and to, each as its index and span relative to from.
func (b *opBurst) outside(from, to time.Time, is []int) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, i := range is {
		sp := b.spans[i]
		if !(sp.from.Before(to) && (sp.to.IsZero() || sp.to.After(from))) {
			out = append(out, fmt.Sprintf("%d [%s, %s]", i, sp.from.Sub(from).Round(time.Millisecond), sp.to.Sub(from).Round(time.Millisecond)))
		}
	}
	return out
}

// results returns the acknowledged ids (id → index), the index → id of
// every operation tried, the statuses answered, and the failures.
func (b *opBurst) results() (acked map[string]int, ids map[int]string, statuses map[string]int, fails []error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	statuses = map[string]int{}
	for _, s := range b.rows {
		statuses[s]++
	}
	return b.acked, b.ids, statuses, b.fails
}

// reportFailures logs the first few failed operations; with a 30 s deadline
// and a group that keeps a leader, there should be none.
func reportFailures(t *testing.T, fails []error) {
	t.Helper()
	for i, err := range fails {
		if i == 5 {
			t.Logf("… and %d more", len(fails)-5)
			break
		}
		t.Logf("an operation with a 30 s deadline failed: %v", err)
	}
}

// trackingOn returns node n's own tracking rows of ids (in pages of 1000).
func trackingOn(n *siteNode, c *notify.Client, ids []string) (map[string]ports.Operation, error) {
	out := make(map[string]ports.Operation, len(ids))
	for len(ids) > 0 {
		chunk := ids[:min(1000, len(ids))]
		ids = ids[len(chunk):]
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := c.Tracking(ctx, chunk...)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("tracking on node %s: %w", n.id, err)
		}
		for id, op := range got {
			out[id] = op
		}
	}
	return out, nil
}

// nodeClients dials each node alone, so that each answers Tracking from its
// own replicated copy.
func nodeClients(t *testing.T, g *siteGroup) map[*siteNode]*notify.Client {
	t.Helper()
	out := map[*siteNode]*notify.Client{}
	for _, n := range g.nodes {
		c, err := notify.Dial(n.api)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		out[n] = c
	}
	return out
}

// waitTracked waits until every running node tracks every id with a row
// that satisfies ok, and returns each node's rows.
func waitTracked(t *testing.T, g *siteGroup, clients map[*siteNode]*notify.Client, ids []string, what string,
	ok func(ports.Operation) bool) map[string]map[string]ports.Operation {
	t.Helper()
	all := map[string]map[string]ports.Operation{}
	for _, n := range g.nodes {
		if !n.running() {
			continue
		}
		waittest.For(t, opWait, fmt.Sprintf("node %s: %d operations %s", n.id, len(ids), what), func() (bool, string) {
			rows, err := trackingOn(n, clients[n], ids)
			if err != nil {
				return false, err.Error()
			}
			bad := 0
			var example string
			for _, id := range ids {
				op, found := rows[id]
				if !found || !ok(op) {
					bad++
					if example == "" {
						example = fmt.Sprintf("%s: found %t, %s, retries %d", id, found, op.Status, op.RetryCount)
					}
				}
			}
			all[n.id] = rows
			return bad == 0, fmt.Sprintf("%d not yet, e.g. %s", bad, example)
		})
	}
	return all
}

// checkAgreement fails the test unless every node's row of each id has the
// same status, retry count and terminal time.
func checkAgreement(t *testing.T, rows map[string]map[string]ports.Operation, ids []string) {
	t.Helper()
	var nodes []string
	for id := range rows {
		nodes = append(nodes, id)
	}
	slices.Sort(nodes)
	disagree := 0
	for _, id := range ids {
		first := rows[nodes[0]][id]
		for _, n := range nodes[1:] {
			op := rows[n][id]
			if op.Status != first.Status || op.RetryCount != first.RetryCount || !op.TerminalAt.Equal(first.TerminalAt) {
				disagree++
				if disagree <= 5 {
					t.Errorf("operation %s: node %s has %s, %d retries, terminal %s; node %s has %s, %d retries, terminal %s",
						id, nodes[0], first.Status, first.RetryCount, first.TerminalAt, n, op.Status, op.RetryCount, op.TerminalAt)
				}
			}
		}
	}
	if disagree > 0 {
		t.Errorf("%d rows differ between nodes %v", disagree, nodes)
	}
}

// failover is a kill -9 of a site leader and the election after it.
type failover struct {
	victim, next    *siteNode
	killedAt, ledAt time.Time // the kill, and when next was seen leading
	witnessLed      bool      // the witness won an election in between
}

func (f failover) String() string {
	return fmt.Sprintf("killed leader %s; %s leads %s later (the witness led in between: %t)",
		f.victim.id, f.next.id, f.ledAt.Sub(f.killedAt).Round(time.Millisecond), f.witnessLed)
}

// killLeader kills g's leader (kill -9) and waits for another data node
// to lead.
func killLeader(t *testing.T, g *siteGroup) failover {
	t.Helper()
	f := failover{victim: g.leader()}
	f.killedAt = time.Now()
	f.victim.kill()
	f.next = g.leader(f.victim)
	f.ledAt = time.Now()
	f.witnessLed = witnessHandedOver(g)
	return f
}

// witnessHandedOver reports whether g's witness, in its current run, handed
// leadership over: it won an election.
func witnessHandedOver(g *siteGroup) bool {
	for _, n := range g.nodes {
		if n.witness && strings.Contains(n.lastStartLog(), "witness handed leadership over") {
			return true
		}
	}
	return false
}

// keysOf returns the keys of m, sorted.
func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestSiteCachedCallsLeaderKilled: kill -9 of the site leader during a
// burst of cached calls to a system that answers 503 loses no call that was
// acknowledged: the surviving nodes track each one, the new leader retries
// them, and once the system is up each reaches it, repeats bounded by the
// calls in flight from the kill to the new leader; at the end every node's
// row agrees.
func TestSiteCachedCallsLeaderKilled(t *testing.T) {
	erp := newERPSystem(t)
	c := newCentral(t)
	c.up()
	g := newSiteGroup(t, c, siteSpec{Extra: erpConfig(erp, 1000, "2s")})
	g.startAll()
	g.leader()
	clients := nodeClients(t, g)

	const total, callers, mark = 500, 64, 150
	b := startOpBurst(t, total, callers, mark, func(ctx context.Context, id string, i int) (notify.Result, error) {
		return g.client.CallWithID(ctx, id, "erp", "order", map[string]any{"item": "valve", "n": i})
	})
	b.waitMark(t)
	f := killLeader(t, g)
	victim, next, killedAt, ledAt := f.victim, f.next, f.killedAt, f.ledAt
	inFlight := b.inFlightDuring(killedAt, ledAt, func(int) bool { return true })
	t.Logf("%s after %d calls returned; %d calls in flight in between", f, b.returned.Load(), inFlight)
	b.wait(t)

	acked, _, statuses, fails := b.results()
	reportFailures(t, fails)
	ids := keysOf(acked)
	if len(ids) == 0 {
		t.Fatal("no call was acknowledged")
	}
	if statuses[string(ports.OpDelivered)] > 0 || statuses[string(ports.OpFailed)] > 0 {
		t.Errorf("answers with the system down: %v; want every call buffered", statuses)
	}
	// Every acknowledged call is tracked, buffered, on the surviving nodes.
	waitTracked(t, g, clients, ids, "buffered", func(op ports.Operation) bool {
		return op.Status == ports.OpPending || op.Status == ports.OpRetrying
	})

	victim.start()
	victim.waitHealth(leaderTimeout, "rejoined as a follower", func(h ports.SiteHealth) bool {
		return h.Replica.Role == ports.RoleFollower && h.Replica.Leader != ""
	})
	upAt := time.Now()
	erp.up.Store(true)
	rows := waitTracked(t, g, clients, ids, "delivered", func(op ports.Operation) bool { return op.Status == ports.OpDelivered })
	deliveredIn := time.Since(upAt)
	checkAgreement(t, rows, ids)

	requests, accepted := erp.counts()
	calls := tallyAt(t, "the system", accepted, b, func(int) bool { return true })
	attempts, maxRetries := 0, 0
	for _, n := range requests {
		attempts += n
	}
	for _, op := range rows[next.id] {
		maxRetries = max(maxRetries, op.RetryCount)
	}
	t.Logf("sent %d, answers %v, failed %d; %s (bound %d, the calls in flight from the kill to the new leader); %d requests at the system in all, "+
		"most retries of one call %d; all delivered %s after the system came up",
		total, statuses, len(fails), calls, inFlight, attempts, maxRetries, deliveredIn.Round(time.Millisecond))
	if calls.lost > 0 {
		t.Errorf("%d acknowledged calls lost", calls.lost)
	}
	if int64(len(calls.repeated)) > inFlight {
		t.Errorf("%d calls repeated; at most %d (the calls in flight from the kill to the new leader) may be", len(calls.repeated), inFlight)
	}
	if out := b.outside(killedAt, ledAt, calls.repeated); len(out) > 0 {
		t.Errorf("%d calls repeated though not in flight from the kill to the new leader: %v", len(out), out)
	}
}

// plantDB is a plant database on a PostgreSQL server of the test's own:
// tables readings_once and readings_plain (op text, n int), the targets of
// the connections plant_once (exactly-once) and plant_plain.
type plantDB struct {
	pg      *pgserver.Server
	db      *sql.DB
	dsnFile string
}

func newPlantDB(t *testing.T) *plantDB {
	t.Helper()
	pg := pgserver.Run(t)
	// A short connect timeout: the server is stopped on purpose.
	dsn := pg.DSN + "&connect_timeout=5"
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, table := range []string{"readings_once", "readings_plain"} {
		if _, err := db.ExecContext(ctx, "CREATE TABLE "+table+" (op text NOT NULL, n int NOT NULL)"); err != nil {
			t.Fatal(err)
		}
	}
	p := &plantDB{pg: pg, db: db, dsnFile: filepath.Join(t.TempDir(), "plant.dsn")}
	if err := os.WriteFile(p.dsnFile, []byte(dsn), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// config is the site configuration of the two connections.
func (p *plantDB) config() string {
	return fmt.Sprintf(`database_connections:
  - {name: plant_once, driver: postgres, dsn: "file:%[1]s", timeout: 5s, max_retries: 1000, retry_interval: 1s, exactly_once: true}
  - {name: plant_plain, driver: postgres, dsn: "file:%[1]s", timeout: 5s, max_retries: 1000, retry_interval: 1s}
`, p.dsnFile)
}

// write makes the cached INSERT of op (id, i) through the connection
// plant_once or plant_plain.
func (p *plantDB) write(ctx context.Context, c *notify.Client, once bool, id string, i int) (notify.Result, error) {
	if once {
		return c.WriteWithID(ctx, id, "plant_once", "INSERT INTO readings_once (op, n) VALUES ($1, $2)", id, i)
	}
	return c.WriteWithID(ctx, id, "plant_plain", "INSERT INTO readings_plain (op, n) VALUES ($1, $2)", id, i)
}

// rowsPerOp returns the rows of table per tracked id.
func (p *plantDB) rowsPerOp(t *testing.T, table string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]int{}
	rs, err := p.db.QueryContext(ctx, "SELECT op, count(*) FROM "+table+" GROUP BY op")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for rs.Next() {
		var op string
		var n int
		if err := rs.Scan(&op, &n); err != nil {
			t.Fatal(err)
		}
		out[op] = n
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// markers counts the rows of the marker table of exactly-once mode.
func (p *plantDB) markers(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var n int
	if err := p.db.QueryRowContext(ctx, "SELECT count(*) FROM outbox_applied_operations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// tally is what a target received of a burst's operations of one kind.
type tally struct {
	acked   int // operations acknowledged to their callers
	lost    int // acknowledged, never received
	repeats int // receipts beyond the first of one id
	unacked int // received, though their callers got an error
	// repeated are the indexes of the operations received more than once.
	repeated []int
	// most is the most receipts of one operation.
	most int
}

func (c tally) String() string {
	return fmt.Sprintf("acknowledged %d, delivered %d, lost %d, repeats %d (of %d operations, at most %d receipts of one), delivered though not acknowledged %d",
		c.acked, c.acked-c.lost, c.lost, c.repeats, len(c.repeated), c.most, c.unacked)
}

// tallyAt counts what target received (id → receipts) of the burst's
// operations whose index is one of mine; it fails the test for every
// acknowledged one it did not receive and for any receipt of an id no
// operation of mine had.
func tallyAt(t *testing.T, target string, received map[string]int, b *opBurst, mine func(i int) bool) tally {
	t.Helper()
	acked, tried, _, _ := b.results()
	var c tally
	for id, i := range acked {
		if !mine(i) {
			continue
		}
		c.acked++
		if received[id] == 0 {
			c.lost++
			if c.lost <= 5 {
				t.Errorf("operation %s to %s was acknowledged, but never received", id, target)
			}
		}
		c.repeats += max(0, received[id]-1)
		c.most = max(c.most, received[id])
		if received[id] > 1 {
			c.repeated = append(c.repeated, i)
		}
	}
	made := make(map[string]int, len(tried))
	for i, id := range tried {
		made[id] = i
	}
	for id, n := range received {
		i, ok := made[id]
		if !ok || !mine(i) {
			t.Errorf("%s received %d times %q, which no operation to it had", target, n, id)
			continue
		}
		if _, ok := acked[id]; !ok && n > 0 {
			c.unacked++
			c.repeats += n - 1
			c.most = max(c.most, n)
			if n > 1 {
				c.repeated = append(c.repeated, i)
			}
		}
	}
	return c
}

// TestSiteCachedWritesDatabaseStopped: a PostgreSQL server that the site's
// cached writes go to is stopped (immediate: sessions cut, transactions in
// progress lost) in the middle of a burst of INSERTs, the site buffers what
// it cannot write, and once the server is started again every acknowledged
// write is applied: exactly once on the connection in exactly-once mode
// (rows counted per tracked id, and the marker table), at least once
// without it, repeats bounded by the writes in flight at the stop.
func TestSiteCachedWritesDatabaseStopped(t *testing.T) {
	plant := newPlantDB(t)
	c := newCentral(t)
	c.up()
	g := newSiteGroup(t, c, siteSpec{Extra: plant.config()})
	g.startAll()
	g.leader()

	// Even writes go to the exactly-once connection, odd ones to the other;
	// each row carries its tracked id.
	const total, callers, mark, down = 600, 64, 150, 150
	even := func(i int) bool { return i%2 == 0 }
	odd := func(i int) bool { return i%2 == 1 }
	b := startOpBurst(t, total, callers, mark, func(ctx context.Context, id string, i int) (notify.Result, error) {
		return plant.write(ctx, g.client, even(i), id, i)
	})
	b.waitMark(t)
	stoppedAt := b.returned.Load()
	stopFrom := time.Now()
	if err := plant.pg.StopImmediate(); err != nil {
		t.Fatal(err)
	}
	stopTo := time.Now()
	plainBound, onceBound := b.inFlightDuring(stopFrom, stopTo, odd), b.inFlightDuring(stopFrom, stopTo, even)
	// Writes go on with the database down, buffered, before it comes back.
	waittest.For(t, 2*time.Minute, fmt.Sprintf("%d more writes answered with the database down", down), waittest.Holds(func() bool {
		return b.returned.Load() >= stoppedAt+down
	}))
	returnedDown := b.returned.Load() - stoppedAt
	if err := plant.pg.Start(); err != nil {
		t.Fatal(err)
	}
	startedAt := time.Now()
	b.wait(t)

	acked, _, statuses, fails := b.results()
	reportFailures(t, fails)
	ids := keysOf(acked)
	if statuses[string(ports.OpPending)] == 0 {
		t.Errorf("answers %v: no write was buffered, so the database was never down for the site", statuses)
	}
	rows := waitTracked(t, g, nodeClients(t, g), ids, "delivered", func(op ports.Operation) bool { return op.Status == ports.OpDelivered })
	deliveredIn := time.Since(startedAt)
	checkAgreement(t, rows, ids)

	once := plant.rowsPerOp(t, "readings_once")
	markers := plant.markers(t)
	o := tallyAt(t, "readings_once", once, b, even)
	p := tallyAt(t, "readings_plain", plant.rowsPerOp(t, "readings_plain"), b, odd)
	t.Logf("database stopped after %d writes answered, %d answered while down, all delivered %s after the start; answers %v, failed %d",
		stoppedAt, returnedDown, deliveredIn.Round(time.Millisecond), statuses, len(fails))
	t.Logf("exactly-once: %s (repeats must be 0; writes in flight at the stop %d), markers %d", o, onceBound, markers)
	t.Logf("at least once: %s (repeats bound %d, the writes in flight at the stop)", p, plainBound)
	if o.lost+p.lost > 0 {
		t.Errorf("%d acknowledged writes lost", o.lost+p.lost)
	}
	if o.repeats > 0 {
		t.Errorf("%d repeats in exactly-once mode", o.repeats)
	}
	if markers != len(once) {
		t.Errorf("%d markers for %d operations applied in exactly-once mode", markers, len(once))
	}
	if int64(p.repeats) > plainBound {
		t.Errorf("%d repeats without exactly-once; at most %d (the writes in flight at the stop) are allowed", p.repeats, plainBound)
	}
}

// TestSiteCachedOpsLeaderKilledTargetsUp: kill -9 of the site leader during
// a burst of cached calls and writes whose targets are up, so that some
// attempts reach their target and the leader dies before it records their
// outcome. The callers repeat them, with their ids, at the new leader:
// nothing acknowledged is lost; a call reaches the system again under the
// same Idempotency-Key and a write without exactly-once is applied again,
// each repeat counted and bounded by the operations in flight from the kill
// to the new leader; a write in exactly-once mode is applied once.
func TestSiteCachedOpsLeaderKilledTargetsUp(t *testing.T) {
	plant := newPlantDB(t)
	erp := newERPSystem(t)
	erp.up.Store(true)
	c := newCentral(t)
	c.up()
	g := newSiteGroup(t, c, siteSpec{Extra: erpConfig(erp, 1000, "1s") + plant.config()})
	g.startAll()
	g.leader()

	// Operation i is a call when i%3 is 0, an exactly-once write when 1, a
	// plain write when 2.
	const total, callers, mark = 900, 64, 300
	kind := func(k int) func(int) bool { return func(i int) bool { return i%3 == k } }
	b := startOpBurst(t, total, callers, mark, func(ctx context.Context, id string, i int) (notify.Result, error) {
		if i%3 == 0 {
			return g.client.CallWithID(ctx, id, "erp", "order", map[string]any{"item": "valve", "n": i})
		}
		return plant.write(ctx, g.client, i%3 == 1, id, i)
	})
	b.waitMark(t)
	f := killLeader(t, g)
	victim, killedAt, ledAt, witnessLed := f.victim, f.killedAt, f.ledAt, f.witnessLed
	var bound [3]int64
	for k := range bound {
		bound[k] = b.inFlightDuring(killedAt, ledAt, kind(k))
	}
	t.Logf("%s after %d returned; %v operations in flight in between (calls, exactly-once writes, writes)", f, b.returned.Load(), bound)
	b.wait(t)
	victim.start()
	victim.waitHealth(leaderTimeout, "rejoined as a follower", func(h ports.SiteHealth) bool {
		return h.Replica.Role == ports.RoleFollower && h.Replica.Leader != ""
	})

	acked, _, statuses, fails := b.results()
	reportFailures(t, fails)
	ids := keysOf(acked)
	rows := waitTracked(t, g, nodeClients(t, g), ids, "delivered", func(op ports.Operation) bool { return op.Status == ports.OpDelivered })
	checkAgreement(t, rows, ids)

	_, accepted := erp.counts()
	calls := tallyAt(t, "the system", accepted, b, kind(0))
	once := plant.rowsPerOp(t, "readings_once")
	o := tallyAt(t, "readings_once", once, b, kind(1))
	p := tallyAt(t, "readings_plain", plant.rowsPerOp(t, "readings_plain"), b, kind(2))
	markers := plant.markers(t)
	t.Logf("sent %d, answers %v, failed %d", total, statuses, len(fails))
	rb, rd, ra := erp.repeatsAround(killedAt, ledAt)
	t.Logf("calls: %s (bound %d, the calls in flight from the kill to the new leader); repeats received before the kill %d, until the new leader %d, after %d",
		calls, bound[0], rb, rd, ra)
	t.Logf("exactly-once writes: %s (repeats must be 0; %d in flight from the kill to the new leader), markers %d", o, bound[1], markers)
	t.Logf("writes: %s (bound %d, the writes in flight from the kill to the new leader)", p, bound[2])
	if out := b.outside(killedAt, ledAt, append(calls.repeated, p.repeated...)); len(out) > 0 {
		t.Errorf("%d operations repeated though not in flight from the kill to the new leader: %v", len(out), out)
	}
	if calls.lost+o.lost+p.lost > 0 {
		t.Errorf("%d acknowledged operations lost", calls.lost+o.lost+p.lost)
	}
	// Only an operation in flight during the failover may be repeated, and
	// the repeats are bounded by those in flight: a witness that wins the
	// election serves nothing while it hands leadership over (it could not
	// commit an outcome then, and each caller's retry would attempt the
	// operation again).
	if int64(len(calls.repeated)) > bound[0] {
		t.Errorf("%d calls repeated; at most %d (the calls in flight from the kill to the new leader) may be", len(calls.repeated), bound[0])
	}
	if int64(calls.repeats) > bound[0] || int64(p.repeats) > bound[2] {
		t.Errorf("repeats beyond the operations in flight (calls %d > %d or writes %d > %d); the witness led in between: %t",
			calls.repeats, bound[0], p.repeats, bound[2], witnessLed)
	}
	if o.repeats > 0 {
		t.Errorf("%d repeats in exactly-once mode", o.repeats)
	}
	if markers != len(once) {
		t.Errorf("%d markers for %d operations applied in exactly-once mode", markers, len(once))
	}
	if int64(len(p.repeated)) > bound[2] {
		t.Errorf("%d writes repeated; at most %d (the writes in flight from the kill to the new leader) may be", len(p.repeated), bound[2])
	}
}

// runSiteCLI runs the group's outbox binary with args against the group's
// nodes (-site after the command's words), and returns its exit code and
// output.
func runSiteCLI(t *testing.T, g *siteGroup, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runBinary(t, g.bin, withFlags(args, "-site", g.addrs, "-timeout", "30s")...)
}

// withFlags puts flags after the command's words (call, write, tracking
// and its subcommand), before the command's own arguments.
func withFlags(args []string, flags ...string) []string {
	words := 1
	if args[0] == "tracking" {
		words = 2
	}
	out := append(slices.Clone(args[:words]), flags...)
	return append(out, args[words:]...)
}

// cliRow runs an outbox command that prints one tracking row as a table
// (call, tracking retry|discard), and returns the row's id and status; it
// fails the test unless the exit code is want.
func cliRow(t *testing.T, g *siteGroup, want int, args ...string) (id, status string) {
	t.Helper()
	code, out, errw := runSiteCLI(t, g, args...)
	lines := strings.Split(out, "\n")
	if code != want || len(lines) < 2 || !strings.HasPrefix(lines[0], "ID ") || len(strings.Fields(lines[1])) < 5 {
		t.Fatalf("outbox %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out, errw)
	}
	f := strings.Fields(lines[1])
	return f[0], f[3]
}

// TestSiteCachedCallParkRetryDiscard: through the CLI against a three-node
// site, calls to a system that is down park after max_retries (attempted
// 1 + max_retries times), on every node; an operator's Retry sends one back
// and it is delivered once the system is up, an operator's Discard ends the
// other without a further attempt; a call the system refuses for good is
// returned at once as an error and recorded Failed; Retry and Discard of an
// operation that is not parked are refused. (The purge of terminal rows
// after a retention is not tested here: the retention is no setting of
// outbox site yet, and its default is 7 days.)
func TestSiteCachedCallParkRetryDiscard(t *testing.T) {
	const maxRetries = 2
	erp := newERPSystem(t)
	c := newCentral(t)
	c.up()
	g := newSiteGroup(t, c, siteSpec{Extra: erpConfig(erp, maxRetries, "200ms")})
	g.startAll()
	g.leader()
	clients := nodeClients(t, g)

	keep, status := cliRow(t, g, 0, "call", "-params", `{"item":"valve"}`, "erp", "order")
	if status != string(ports.OpPending) {
		t.Fatalf("a call with the system down answered %s, want Pending", status)
	}
	drop, status := cliRow(t, g, 0, "call", "-params", `{"item":"pump"}`, "erp", "order")
	if status != string(ports.OpPending) {
		t.Fatalf("a call with the system down answered %s, want Pending", status)
	}
	parked := waitTracked(t, g, clients, []string{keep, drop}, "parked", func(op ports.Operation) bool {
		return op.Status == ports.OpParked
	})
	checkAgreement(t, parked, []string{keep, drop})
	for _, id := range []string{keep, drop} {
		if n := parked[g.nodes[0].id][id].RetryCount; n != maxRetries {
			t.Errorf("operation %s parked after %d retries, want %d", id, n, maxRetries)
		}
	}
	requests, _ := erp.counts()
	t.Logf("parked after max_retries %d: requests at the system %d and %d (1 + max_retries each unless an outcome was lost)",
		maxRetries, requests[keep], requests[drop])
	for _, id := range []string{keep, drop} {
		if requests[id] < 1+maxRetries {
			t.Errorf("operation %s parked after %d requests at the system, want %d", id, requests[id], 1+maxRetries)
		}
	}
	atPark := requests[drop]

	if _, st := cliRow(t, g, 0, "tracking", "discard", drop); st != string(ports.OpDiscarded) {
		t.Fatalf("outbox tracking discard answered %s, want Discarded", st)
	}
	erp.up.Store(true)
	if _, st := cliRow(t, g, 0, "tracking", "retry", keep); st != string(ports.OpRetrying) {
		t.Fatalf("outbox tracking retry answered %s, want Retrying", st)
	}
	rows := waitTracked(t, g, clients, []string{keep}, "delivered after the operator's Retry", func(op ports.Operation) bool {
		return op.Status == ports.OpDelivered
	})
	waitTracked(t, g, clients, []string{drop}, "discarded", func(op ports.Operation) bool { return op.Status == ports.OpDiscarded })
	for _, n := range g.nodes {
		got := rows[n.id][keep]
		if got.TerminalAt.IsZero() {
			t.Errorf("node %s: the delivered row has no terminal time: %+v", n.id, got)
		}
	}
	requests, accepted := erp.counts()
	if accepted[keep] != 1 {
		t.Errorf("the retried call reached the system %d times as accepted, want once", accepted[keep])
	}
	if requests[drop] != atPark || accepted[drop] != 0 {
		t.Errorf("the discarded call was attempted after its Discard: %d requests (%d at parking), %d accepted",
			requests[drop], atPark, accepted[drop])
	}

	// Operator actions on what is not parked are refused, naming the status.
	code, _, errw := runSiteCLI(t, g, "tracking", "retry", keep)
	if code != 1 || !strings.Contains(errw, "Delivered") {
		t.Errorf("outbox tracking retry of a delivered call: exit %d\n%s", code, errw)
	}
	code, _, errw = runSiteCLI(t, g, "tracking", "discard", drop)
	if code != 1 || !strings.Contains(errw, "Discarded") {
		t.Errorf("outbox tracking discard of a discarded call: exit %d\n%s", code, errw)
	}
	code, _, errw = runSiteCLI(t, g, "tracking", "discard", uuid.Must(uuid.NewV7()).String())
	if code != 1 {
		t.Errorf("outbox tracking discard of an unknown id: exit %d\n%s", code, errw)
	}

	// A permanent failure comes back at once, recorded Failed and not
	// retried: through the CLI and through the client.
	failed, st := cliRow(t, g, 1, "call", "-params", `{"item":"bad"}`, "erp", "order")
	if st != string(ports.OpFailed) {
		t.Errorf("outbox call refused for good answered %s, want Failed", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := g.client.Call(ctx, "erp", "order", map[string]any{"item": "bad"})
	var oe *notify.OperationError
	if !errors.Is(err, notify.ErrFailed) || !errors.As(err, &oe) || oe.Operation.Status != ports.OpFailed ||
		!strings.Contains(oe.Operation.LastError, "400") {
		t.Fatalf("a call the system refuses for good: %v; want notify.ErrFailed with the Failed row naming 400", err)
	}
	failedIDs := []string{failed, oe.Operation.ID}
	rows = waitTracked(t, g, clients, failedIDs, "failed", func(op ports.Operation) bool {
		return op.Status == ports.OpFailed && op.RetryCount == 0 && !op.TerminalAt.IsZero()
	})
	checkAgreement(t, rows, failedIDs)
	requests, _ = erp.counts()
	for _, id := range failedIDs {
		if requests[id] != 1 {
			t.Errorf("the call refused for good, %s, reached the system %d times; want once", id, requests[id])
		}
	}
	t.Logf("retried %s delivered (accepted %d), discarded %s (requests %d, none after the Discard), failed %v returned synchronously, each attempted once",
		keep, accepted[keep], drop, requests[drop], failedIDs)
}
