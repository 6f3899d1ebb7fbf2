package acceptance

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for VACUUM

	"github.com/siteline/outbox/adapters/sqlstore"
	"github.com/siteline/outbox/core"
	"github.com/siteline/outbox/ports"
)

// benchBackends runs f once per backend as a sub-benchmark.
func benchBackends(b *testing.B, f func(b *testing.B, be backend)) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) { f(b, be) })
	}
}

// benchEnv is an outbox on the real clock for benchmarks, reading its lists
// and channel settings from the database as central does.
func benchEnv(b *testing.B, be backend, ch ports.Channel, cfg core.Config) (*core.Service, *sqlstore.DB, sqlstore.Config) {
	b.Helper()
	sc := be.config(b)
	store := open(b, sc)
	ctx := context.Background()
	for _, l := range testLists {
		if err := store.Directory().PutList(ctx, l); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range testChannels {
		if err := store.Directory().PutChannel(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
	svc, err := core.New(cfg, core.Deps{Store: store.Notifications(), Audit: store.Notifications(), Directory: store.Directory(),
		Channels: ports.ChannelMap{"email": ch}, Logger: testLogger()})
	if err != nil {
		b.Fatal(err)
	}
	return svc, store, sc
}

// settle brings a freshly seeded database to the state of one in service:
// on PostgreSQL, what autovacuum does to a table that has lived a while
// (visibility map set, so covering indexes answer without the heap;
// statistics current).
func settle(b *testing.B, sc sqlstore.Config) {
	b.Helper()
	if sc.Driver != sqlstore.DriverPostgres {
		return
	}
	db, err := sql.Open("pgx", sc.DSN)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("VACUUM ANALYZE notifications, notification_keys"); err != nil {
		b.Fatalf("vacuum: %v", err)
	}
}

// BenchmarkIngest measures ingest: batches of 100 from 4 concurrent submitters
// through the driving port, insert-if-not-exists and an audit record each.
// Besides the rate it reports the CPU a notification costs (see busyMeter).
func BenchmarkIngest(b *testing.B) {
	const batch, submitters = 100, 4
	benchBackends(b, func(b *testing.B, be backend) {
		svc, _, sc := benchEnv(b, be, noopChannel{}, core.Config{})
		batches := make([][]ports.Submission, (b.N+batch-1)/batch)
		for i := range batches {
			n := min(batch, b.N-i*batch)
			batches[i] = make([]ports.Submission, n)
			for j := range n {
				batches[i][j] = submission("ops")
			}
		}
		ctx := context.Background()
		var next atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		wal := startWAL(b, sc)
		start, cpu := time.Now(), startBusy(b)
		for range submitters {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(batches) {
						return
					}
					res, err := svc.Submit(ctx, ports.SubmitRequest{Notifications: batches[i]})
					if err != nil || len(res.Accepted) != len(batches[i]) {
						b.Errorf("submit: %v (accepted %d of %d)", err, len(res.Accepted), len(batches[i]))
						return
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "notifications/s")
		cpu.report(b, b.N, "notification")
		wal.report(b, b.N, "notification")
	})
}

// BenchmarkDispatch measures dispatch without the plugin hop: claim → an in-process
// no-op channel → recorded (with the audit records), by the real dispatcher.
// Besides the rate it reports the CPU a delivery costs, the machine's and
// this process's (see busyMeter).
func BenchmarkDispatch(b *testing.B) {
	for _, batch := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			benchBackends(b, func(b *testing.B, be backend) {
				benchDispatch(b, be, noopChannel{}, core.Config{DispatchBatchSize: batch, DispatchConcurrency: 64}, 0)
			})
		})
	}
}

// BenchmarkDispatchPlugin measures dispatch through a real plugin subprocess: claim
// → the plugin host → gRPC with mutual TLS → a no-op channel in another
// process → recorded, by the real dispatcher, with central's default batch
// size and concurrency, to lists of 1 and of 10 targets (each target's
// state is kept).
func BenchmarkDispatchPlugin(b *testing.B) {
	host := startPlugins(b, "noop")
	ch, _ := host.Channel("noop")
	for _, targets := range []int{1, 10} {
		b.Run(fmt.Sprintf("targets=%d", targets), func(b *testing.B) {
			benchBackends(b, func(b *testing.B, be backend) {
				benchDispatch(b, be, ch, core.Config{}, targets)
			})
		})
	}
}

// benchDispatch seeds b.N due rows and measures how fast the dispatcher
// delivers them all through ch: to the list "ops" when targets is 0, else
// to a list of that many targets.
func benchDispatch(b *testing.B, be backend, ch ports.Channel, cfg core.Config, targets int) {
	b.Helper()
	counter := &countingChannel{Channel: ch, target: int64(b.N), done: make(chan struct{})}
	svc, store, sc := benchEnv(b, be, counter, cfg)
	list := "ops"
	if targets > 0 {
		list = fmt.Sprintf("bench-%d", targets)
		l := ports.List{Name: list, Type: "email"}
		for i := range targets {
			l.Targets = append(l.Targets, fmt.Sprintf("person%d@example.com", i))
		}
		if err := store.Directory().PutList(context.Background(), l); err != nil {
			b.Fatal(err)
		}
	}
	seed(b, store, b.N, func(i int, n *ports.Notification) { n.List = list })
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	b.ResetTimer()
	wal := startWAL(b, sc)
	start, cpu := time.Now(), startBusy(b)
	go func() { ran <- svc.Run(ctx) }()
	<-counter.done
	cancel()
	if err := <-ran; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
	cpu.report(b, b.N, "delivery")
	wal.report(b, b.N, "delivery")
	if n, _ := store.Notifications().Count(context.Background(), ports.Filter{Statuses: []ports.Status{ports.StatusDelivered}}); n != int64(b.N) {
		b.Fatalf("%d rows Delivered, want %d", n, b.N)
	}
}

// BenchmarkQueries measures the operator's reads at 1,000,000 rows: the KPIs and the first page
// of filtered lists, as the operator page asks for them.
func BenchmarkQueries(b *testing.B) {
	const rows = 1_000_000
	benchBackends(b, func(b *testing.B, be backend) {
		svc, store, sc := benchEnv(b, be, noopChannel{}, core.Config{})
		now := time.Now().UTC()
		seed(b, store, rows, realisticRow(now))
		settle(b, sc)
		ctx := context.Background()
		for name, run := range map[string]func() error{
			"kpis": func() error { _, err := svc.KPIs(ctx); return err },
			"page-all": func() error {
				_, err := svc.Query(ctx, ports.Query{})
				return err
			},
			"page-parked-site": func() error {
				_, err := svc.Query(ctx, ports.Query{Filter: ports.Filter{Statuses: []ports.Status{ports.StatusParked}, SourceSite: "site-07"}})
				return err
			},
			"page-keyword": func() error {
				_, err := svc.Query(ctx, ports.Query{Filter: ports.Filter{Subject: "pump 3"}})
				return err
			},
			"page-stuck": func() error {
				_, err := svc.Query(ctx, ports.Query{StuckOnly: true})
				return err
			},
			"page-list-week": func() error {
				_, err := svc.Query(ctx, ports.Query{Filter: ports.Filter{List: "list-2", CreatedFrom: now.Add(-7 * 24 * time.Hour)}})
				return err
			},
		} {
			b.Run(name, func(b *testing.B) {
				start := time.Now()
				for range b.N {
					if err := run(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/op")
			})
		}
	})
}

// realisticRow shapes a seeded row like a year of operation: 20 sites, 5
// lists, mostly Delivered, some Parked, a small live queue.
func realisticRow(now time.Time) func(i int, n *ports.Notification) {
	return func(i int, n *ports.Notification) {
		r := rand.New(rand.NewPCG(uint64(i), 7))
		n.SourceSite = fmt.Sprintf("site-%02d", r.IntN(20))
		n.List = fmt.Sprintf("list-%d", r.IntN(5))
		n.Subject = fmt.Sprintf("Pump %d pressure alarm %d", r.IntN(50), i)
		n.CreatedAt = now.Add(-time.Duration(r.Int64N(int64(30 * 24 * time.Hour))))
		n.UpdatedAt = n.CreatedAt
		switch p := r.IntN(100); {
		case p < 90:
			n.Status, n.DeliveredAt, n.LastAttemptAt = ports.StatusDelivered, n.CreatedAt.Add(time.Second), n.CreatedAt.Add(time.Second)
			n.ResolvedTargets = []string{"ops@example.com"}
		case p < 95:
			n.Status, n.LastError, n.RetryCount = ports.StatusParked, "550 mailbox unavailable", 0
		case p < 98:
			n.Status = ports.StatusPending
		default:
			n.Status, n.RetryCount, n.NextAttemptAt = ports.StatusRetrying, 2, now.Add(time.Minute)
		}
	}
}

// seed inserts n rows straight into the store, shaped by shape.
func seed(b *testing.B, store *sqlstore.DB, n int, shape func(i int, n *ports.Notification)) {
	b.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	const chunk = 1000
	rows := make([]ports.Notification, 0, chunk)
	for i := 0; i < n; i++ {
		row := ports.Notification{ID: uuid.Must(uuid.NewV7()).String(), Type: "email", List: "ops", Subject: "Tank 3 level high",
			Body: "Level 93% at 08:00.", Status: ports.StatusPending, SourceSite: "site-a",
			CreatedAt: now, UpdatedAt: now}
		shape(i, &row)
		rows = append(rows, row)
		if len(rows) == chunk || i == n-1 {
			if _, err := store.Notifications().Insert(ctx, rows); err != nil {
				b.Fatalf("seed: %v", err)
			}
			rows = rows[:0]
		}
	}
}

// noopChannel delivers instantly.
type noopChannel struct{}

func (noopChannel) Deliver(_ context.Context, d ports.Delivery) ports.Result {
	return ports.Result{Outcome: ports.OutcomeSuccess}
}

// countingChannel delivers through Channel and closes done when the target
// count of successes is reached.
type countingChannel struct {
	ports.Channel
	n, target int64
	done      chan struct{}
}

func (c *countingChannel) Deliver(ctx context.Context, d ports.Delivery) ports.Result {
	res := c.Channel.Deliver(ctx, d)
	if res.Outcome == ports.OutcomeSuccess && atomic.AddInt64(&c.n, 1) == c.target {
		close(c.done)
	}
	return res
}
