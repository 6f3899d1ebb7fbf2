package peer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
)

// The peer's job: a notification of the usual size, as the outbox's own
// benchmarks send (a subject of about 30 bytes, a body of about 100), stored
// by River as the job's JSON arguments.
type notifyArgs struct {
	Subject string `json:"subject"`
	Body    string `json:"body"`
}

func (notifyArgs) Kind() string { return "notify" }

func benchSubject(i int64) string { return fmt.Sprintf("Tank %08d level high alarm", i) }

const benchBody = "Level 93% at 08:00 on tank 3, line 2; the high alarm threshold is 90%. Operator on shift: check it."

// noopWorker works a job by doing nothing, as the outbox's dispatch
// benchmark delivers through a no-op channel.
type noopWorker struct {
	river.WorkerDefaults[notifyArgs]
	worked atomic.Int64
}

func (w *noopWorker) Work(context.Context, *river.Job[notifyArgs]) error {
	w.worked.Add(1)
	return nil
}

// freshDatabase creates an empty database on the server of
// OUTBOX_TEST_POSTGRES_DSN (skipping the benchmark when it is unset),
// migrates River's schema into it with rivermigrate, and returns a pool on
// it. The database is dropped when the benchmark ends.
func freshDatabase(b *testing.B, maxConns int32) *pgxpool.Pool {
	b.Helper()
	dsn := os.Getenv("OUTBOX_TEST_POSTGRES_DSN")
	if dsn == "" {
		b.Skip("OUTBOX_TEST_POSTGRES_DSN is not set")
	}
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatalf("peer: connect: %v", err)
	}
	defer admin.Close(ctx)
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	name := "peer_bench_" + hex.EncodeToString(suffix[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		b.Fatalf("peer: create database: %v", err)
	}
	b.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			b.Errorf("peer: connect to drop %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			b.Errorf("peer: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		b.Fatalf("peer: OUTBOX_TEST_POSTGRES_DSN is not a URL: %v", err)
	}
	u.Path = "/" + name
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		b.Fatalf("peer: pool config: %v", err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatalf("peer: pool: %v", err)
	}
	b.Cleanup(pool.Close)
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		b.Fatalf("peer: migrator: %v", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		b.Fatalf("peer: migrate: %v", err)
	}
	return pool
}

// jobs returns n jobs' insert parameters in batches of size batch.
func jobs(n, batch int) [][]river.InsertManyParams {
	out := make([][]river.InsertManyParams, 0, (n+batch-1)/batch)
	for i := 0; i < n; i += batch {
		k := min(batch, n-i)
		part := make([]river.InsertManyParams, k)
		for j := range k {
			part[j] = river.InsertManyParams{Args: notifyArgs{Subject: benchSubject(int64(i + j)), Body: benchBody}}
		}
		out = append(out, part)
	}
	return out
}

// countJobs returns how many of River's jobs are in the given state (any
// state when state is empty).
func countJobs(b *testing.B, pool *pgxpool.Pool, state string) int64 {
	b.Helper()
	var n int64
	q, args := "SELECT count(*) FROM river_job", []any{}
	if state != "" {
		q, args = q+" WHERE state = $1", []any{state}
	}
	if err := pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		b.Fatalf("peer: count jobs: %v", err)
	}
	return n
}

// BenchmarkPeerInsert measures the peer's batch insert as its users do it
// at its best, the counterpart of the outbox's BenchmarkIngest: batches of
// 100 jobs from 4 concurrent inserters through an insert-only client.
// InsertMany is one INSERT … SELECT of arrays that returns the rows;
// InsertManyFast is a COPY FROM that returns only the count.
func BenchmarkPeerInsert(b *testing.B) {
	const batch, inserters = 100, 4
	for _, mode := range []string{"InsertMany", "InsertManyFast"} {
		b.Run(mode, func(b *testing.B) {
			pool := freshDatabase(b, inserters)
			client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
			if err != nil {
				b.Fatalf("peer: client: %v", err)
			}
			batches := jobs(b.N, batch)
			ctx := context.Background()
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start, busy, self := time.Now(), machineBusy(b), selfCPU(b)
			for range inserters {
				wg.Go(func() {
					for {
						i := int(next.Add(1)) - 1
						if i >= len(batches) {
							return
						}
						var n int
						var err error
						if mode == "InsertMany" {
							var res []*rivertype.JobInsertResult
							res, err = client.InsertMany(ctx, batches[i])
							n = len(res)
						} else {
							n, err = client.InsertManyFast(ctx, batches[i])
						}
						if err != nil || n != len(batches[i]) {
							b.Errorf("peer: %s: %v (inserted %d of %d)", mode, err, n, len(batches[i]))
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
			b.ReportMetric(float64((machineBusy(b)-busy).Microseconds())/float64(b.N), "cpu-µs/job")
			b.ReportMetric(float64((selfCPU(b)-self).Microseconds())/float64(b.N), "self-cpu-µs/job")
			if n := countJobs(b, pool, "available"); n != int64(b.N) {
				b.Fatalf("%d jobs available, want %d", n, b.N)
			}
		})
	}
}

// BenchmarkPeerBurnDown measures the peer working off a backlog, the
// counterpart of the outbox's BenchmarkDispatch: b.N jobs inserted first
// (not timed), then a client with a no-op worker works them all, timed until
// River reports every job completed (its completer has written the state).
//
// The client is tuned for throughput: fetch cooldown 1 ms (River's
// minimum), 1,000 workers, a pool of 16 connections. It also runs with 800
// workers, the most rows the outbox's dispatcher holds at its default batch
// (8 batches of 100 in flight), so that the two compare at an equal number
// of jobs in hand. The poll interval is left at its default (1 s; with
// LISTEN/NOTIFY on, a fetch follows each cooldown while jobs keep coming):
// in runs alternated with this setting, a poll interval of 1 ms did no
// better, 10 ms and poll-only mode (no LISTEN) did worse, and so did pools
// of 4 and 32 connections.
func BenchmarkPeerBurnDown(b *testing.B) {
	for _, maxWorkers := range []int{800, 1000} {
		b.Run(fmt.Sprintf("workers=%d", maxWorkers), func(b *testing.B) {
			pool := freshDatabase(b, 16)
			ctx := context.Background()
			inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
			if err != nil {
				b.Fatalf("peer: client: %v", err)
			}
			for _, part := range jobs(b.N, 1000) {
				if _, err := inserter.InsertManyFast(ctx, part); err != nil {
					b.Fatalf("peer: seed: %v", err)
				}
			}
			worker := &noopWorker{}
			workers := river.NewWorkers()
			river.AddWorker(workers, worker)
			client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
				FetchCooldown: time.Millisecond,
				Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
				Workers:       workers,
			})
			if err != nil {
				b.Fatalf("peer: client: %v", err)
			}
			events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
				ChanSize: b.N + 1000,
				Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed},
			})
			defer unsubscribe()
			b.ResetTimer()
			start, busy, self := time.Now(), machineBusy(b), selfCPU(b)
			if err := client.Start(ctx); err != nil {
				b.Fatalf("peer: start: %v", err)
			}
			for done := 0; done < b.N; done++ {
				select {
				case ev := <-events:
					if ev.Kind != river.EventKindJobCompleted {
						b.Fatalf("peer: job %d: %s", ev.Job.ID, ev.Kind)
					}
				case <-time.After(time.Minute):
					b.Fatalf("peer: %d of %d jobs completed after a minute without progress", done, b.N)
				}
			}
			b.StopTimer()
			elapsed, busy, self := time.Since(start), machineBusy(b)-busy, selfCPU(b)-self
			stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			if err := client.Stop(stopCtx); err != nil {
				b.Fatalf("peer: stop: %v", err)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
			b.ReportMetric(float64(busy.Microseconds())/float64(b.N), "cpu-µs/job")
			b.ReportMetric(float64(self.Microseconds())/float64(b.N), "self-cpu-µs/job")
			if n := countJobs(b, pool, "completed"); n != int64(b.N) {
				b.Fatalf("%d jobs completed, want %d", n, b.N)
			}
			if n := worker.worked.Load(); n != int64(b.N) {
				b.Fatalf("%d jobs worked, want %d", n, b.N)
			}
		})
	}
}

// machineBusy is the time all CPUs spent neither idle, waiting for I/O nor
// stolen by the hypervisor, from the first line of /proc/stat: the CPU a
// burn-down costs the whole machine, the database server's included, which
// holds on a shared host where rates swing. The outbox's dispatch
// benchmarks report the same figure (acceptance/cpu_bench_test.go; this
// module does not import the outbox).
func machineBusy(b *testing.B) time.Duration {
	b.Helper()
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatalf("peer: the machine's CPU time: %v", err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		b.Fatalf("peer: /proc/stat begins with %q", line)
	}
	var ticks int64
	// user nice system idle iowait irq softirq steal: all but idle,
	// iowait and steal.
	for i, f := range fields[1:9] {
		if i == 3 || i == 4 || i == 7 {
			continue
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			b.Fatalf("peer: /proc/stat: %v", err)
		}
		ticks += v
	}
	const hz = 100 // USER_HZ
	return time.Duration(ticks) * time.Second / hz
}

// selfCPU is this process's user and system time (the peer's client: its
// share of the machine's), from /proc/self/stat, as the outbox's benchmarks
// read theirs (procCPU in acceptance/site_bench_test.go).
func selfCPU(b *testing.B) time.Duration {
	b.Helper()
	raw, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		b.Fatalf("peer: this process's CPU time: %v", err)
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after its closing parenthesis. utime and stime are fields 14 and 15.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		b.Fatalf("peer: /proc/self/stat: unexpected %q", s)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("peer: /proc/self/stat: unexpected %q", s)
	}
	const hz = 100 // USER_HZ
	return time.Duration(ut+st) * time.Second / hz
}
