package sqlstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
	"github.com/siteline/outbox/ports/sitecallstest"
	"github.com/siteline/outbox/ports/storetest"
)

// benchStores runs fn once per backend: SQLite always, PostgreSQL when
// OUTBOX_TEST_POSTGRES_DSN is set. Each call gets a fresh store.
func benchStores(b *testing.B, fn func(b *testing.B, newStore func(b *testing.B) *DB)) {
	b.Run("sqlite", func(b *testing.B) {
		fn(b, func(b *testing.B) *DB { return newSQLiteStore(b) })
	})
	b.Run("postgres", func(b *testing.B) {
		dsn := postgresDSN(b)
		fn(b, func(b *testing.B) *DB { return newPostgresStore(b, dsn) })
	})
}

// benchRows returns n fresh Pending notifications created a microsecond
// apart, spread over a few sites, lists and types.
func benchRows(n int, base time.Time) []ports.Notification {
	ns := make([]ports.Notification, n)
	for i := range ns {
		r := storetest.NewNotification(base.Add(time.Duration(i) * time.Microsecond))
		r.SourceSite = "site-" + strconv.Itoa(i%20)
		r.List = "list-" + strconv.Itoa(i%50)
		if i%4 == 0 {
			r.Type = "webhook"
		}
		ns[i] = r
	}
	return ns
}

// BenchmarkInsert measures ingest: 100-row batches from 4
// concurrent goroutines. One op is one batch.
func BenchmarkInsert(b *testing.B) {
	const batch, writers = 100, 4
	benchStores(b, func(b *testing.B, newStore func(b *testing.B) *DB) {
		s := newStore(b)
		ctx := context.Background()
		batches := make([][]ports.Notification, b.N)
		base := time.Now().UTC().Truncate(time.Microsecond)
		for i := range batches {
			batches[i] = benchRows(batch, base.Add(time.Duration(i)*time.Millisecond))
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		start := time.Now()
		for range writers {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(batches) {
						return
					}
					got, err := s.Notifications().Insert(ctx, batches[i])
					if err != nil {
						b.Error(err)
						return
					}
					if len(got) != batch {
						b.Errorf("inserted %d of %d", len(got), batch)
						return
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		b.ReportMetric(float64(b.N*batch)/elapsed.Seconds(), "rows/s")
	})
}

// BenchmarkClaimRecord measures the store's share of dispatch:
// Claim a batch, Record every row Delivered with its targets' states and
// two audit records per row (Attempted, with its targets, and Delivered),
// as the dispatcher does. One op is one batch. The rows' lists hold one target, and
// (targets=10) ten.
func BenchmarkClaimRecord(b *testing.B) {
	for _, batch := range []int{100, 1000} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			benchStores(b, func(b *testing.B, newStore func(b *testing.B) *DB) {
				benchClaimRecord(b, newStore(b), batch, 1)
			})
		})
	}
	b.Run("batch=100,targets=10", func(b *testing.B) {
		benchStores(b, func(b *testing.B, newStore func(b *testing.B) *DB) {
			benchClaimRecord(b, newStore(b), 100, 10)
		})
	})
}

func benchClaimRecord(b *testing.B, s *DB, batch, targets int) {
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Microsecond).Add(-time.Hour)
	total := b.N * batch
	rows := benchRows(total, base)
	for i := 0; i < total; i += 1000 {
		if _, err := s.Notifications().Insert(ctx, rows[i:min(i+1000, total)]); err != nil {
			b.Fatal(err)
		}
	}
	rows = nil
	list := make([]string, targets)
	for i := range list {
		list[i] = "ops" + strconv.Itoa(i) + "@example.test"
	}
	b.ResetTimer()
	start := time.Now()
	done := 0
	for range b.N {
		now := time.Now().UTC()
		got, err := s.Notifications().Claim(ctx, ports.ClaimRequest{Owner: "bench", Now: now, Lease: time.Minute, Limit: batch})
		if err != nil {
			b.Fatal(err)
		}
		us := make([]ports.Update, len(got))
		for i, n := range got {
			states := make([]ports.TargetState, len(list))
			sent := make([]ports.AuditTarget, len(list))
			for k, t := range list {
				states[k] = ports.TargetState{Target: t, Status: ports.TargetDelivered, Attempts: 1, LastAttemptAt: now, DeliveredAt: now}
				sent[k] = ports.AuditTarget{Target: t, Outcome: ports.OutcomeSuccess}
			}
			// The audit records go with the outcome, as the dispatcher's do.
			us[i] = ports.Update{
				ID: n.ID, Status: ports.StatusDelivered, ResolvedTargets: list, Targets: states,
				LastAttemptAt: now, DeliveredAt: now, UpdatedAt: now,
				Records: []ports.AuditRecord{
					{NotificationID: n.ID, At: now, Kind: ports.AuditAttempted, Actor: ports.ActorSystem,
						Outcome: ports.OutcomeSuccess, Status: ports.StatusDelivered, Duration: 3 * time.Millisecond, Targets: sent},
					{NotificationID: n.ID, At: now, Kind: ports.AuditDelivered, Actor: ports.ActorSystem,
						Status: ports.StatusDelivered}},
			}
		}
		lost, err := s.Notifications().Record(ctx, "bench", us)
		if err != nil {
			b.Fatal(err)
		}
		if len(lost) > 0 {
			b.Fatalf("lost %d", len(lost))
		}
		done += len(got)
	}
	elapsed := time.Since(start)
	if done != total {
		b.Fatalf("claimed %d of %d rows", done, total)
	}
	b.ReportMetric(float64(done)/elapsed.Seconds(), "rows/s")
}

// BenchmarkQueries1M measures the operator reads on a store of
// OUTBOX_BENCH_ROWS rows (default 1,000,000): 90 % Delivered, 4 % Pending,
// 3 % Retrying, 2 % Parked, 1 % Discarded, over 20 sites. Filling the store
// takes a while, so it runs only when selected by -bench.
func BenchmarkQueries1M(b *testing.B) {
	size := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_ROWS")); err == nil && v > 0 {
		size = v
	}
	benchStores(b, func(b *testing.B, newStore func(b *testing.B) *DB) {
		s := newStore(b)
		ctx := context.Background()
		now := time.Now().UTC().Truncate(time.Microsecond)
		base := now.Add(-time.Duration(size) * time.Millisecond) // one row a millisecond
		fillStart := time.Now()
		for i := 0; i < size; i += 1000 {
			chunk := make([]ports.Notification, 0, 1000)
			for j := i; j < min(i+1000, size); j++ {
				n := storetest.NewNotification(base.Add(time.Duration(j) * time.Millisecond))
				n.SourceSite = "site-" + strconv.Itoa(j%20)
				n.List = "list-" + strconv.Itoa(j%50)
				switch p := j % 100; {
				case p < 90:
					n.Status = ports.StatusDelivered
					n.DeliveredAt = n.CreatedAt.Add(time.Second)
					n.UpdatedAt = n.DeliveredAt
					n.ResolvedTargets = []string{"ops@example.test"}
				case p < 94:
					n.Status = ports.StatusPending
				case p < 97:
					n.Status = ports.StatusRetrying
					n.RetryCount = 1
					n.NextAttemptAt = now.Add(time.Minute)
				case p < 99:
					n.Status = ports.StatusParked
					n.LastError = "smtp: 550 mailbox unavailable"
				default:
					n.Status = ports.StatusDiscarded
				}
				chunk = append(chunk, n)
			}
			if _, err := s.Notifications().Insert(ctx, chunk); err != nil {
				b.Fatal(err)
			}
		}
		b.Logf("filled %d rows in %s", size, time.Since(fillStart).Round(time.Millisecond))
		if s.driver == DriverPostgres {
			if _, err := s.writer().ExecContext(ctx, "VACUUM ANALYZE notifications"); err != nil {
				b.Fatal(err)
			}
		} else if _, err := s.writer().ExecContext(ctx, "ANALYZE"); err != nil {
			b.Fatal(err)
		}
		page := ports.PageRequest{Limit: 50}
		cases := []struct {
			name string
			run  func() error
		}{
			{"KPIs", func() error {
				_, err := s.Notifications().KPIs(ctx, ports.KPIRequest{StuckBefore: now.Add(-10 * time.Minute), DeliveredSince: now.Add(-time.Minute)})
				return err
			}},
			{"FirstPage", func() error { _, err := s.Notifications().Query(ctx, ports.Filter{}, page); return err }},
			{"FirstPageParked", func() error {
				_, err := s.Notifications().Query(ctx, ports.Filter{Statuses: []ports.Status{ports.StatusParked}}, page)
				return err
			}},
			{"FirstPageSite", func() error {
				_, err := s.Notifications().Query(ctx, ports.Filter{SourceSite: "site-7"}, page)
				return err
			}},
			{"FirstPageList", func() error { _, err := s.Notifications().Query(ctx, ports.Filter{List: "list-7"}, page); return err }},
			{"FirstPageType", func() error { _, err := s.Notifications().Query(ctx, ports.Filter{Type: "email"}, page); return err }},
			{"FirstPageStuck", func() error {
				_, err := s.Notifications().Query(ctx, ports.Filter{StuckBefore: now.Add(-10 * time.Minute)}, page)
				return err
			}},
			{"FirstPageSubject", func() error {
				_, err := s.Notifications().Query(ctx, ports.Filter{Subject: "PUMP 7"}, page)
				return err
			}},
			{"Claim100", func() error {
				// Claims nothing new after the first: leased rows are skipped.
				_, err := s.Notifications().Claim(ctx, ports.ClaimRequest{Owner: "bench", Now: now, Lease: time.Hour, Limit: 100})
				return err
			}},
		}
		for _, c := range cases {
			b.Run(c.name, func(b *testing.B) {
				for b.Loop() {
					if err := c.run(); err != nil {
						b.Fatal(fmt.Errorf("%s: %w", c.name, err))
					}
				}
			})
		}
	})
}

// BenchmarkReportSiteCalls measures the site-call mirror's intake: reports
// of 200 new rows from 10 sites at once. One op is one report.
func BenchmarkReportSiteCalls(b *testing.B) {
	benchStores(b, func(b *testing.B, newStore func(b *testing.B) *DB) {
		s := newStore(b).SiteCalls()
		now := time.Now()
		sitecallstest.BenchReports(b, 200, 10, func(site string, ops []ports.Operation) (int, error) {
			return s.ReportSiteCalls(context.Background(), site, ops, now)
		})
	})
}

// BenchmarkQuerySiteCalls measures the reads of the site-call page on a
// mirror of OUTBOX_BENCH_SITECALL_ROWS rows (100,000 unless set) over 30
// sites: the first page of 50, newest first, unfiltered, of one site, of
// the parked rows, by keyword, a page deep in the list; the count of one
// site; the KPIs. One op is one read. PostgreSQL's table is vacuumed
// after the load, as autovacuum leaves it in service: the KPIs' index-only
// scan then reads no table page.
func BenchmarkQuerySiteCalls(b *testing.B) {
	rows := 100_000
	if v, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_SITECALL_ROWS")); err == nil && v > 0 {
		rows = v
	}
	benchStores(b, func(b *testing.B, newStore func(b *testing.B) *DB) {
		s := newStore(b).SiteCalls()
		ctx := context.Background()
		base := time.Now().UTC().Truncate(time.Microsecond).Add(-time.Duration(rows) * time.Millisecond)
		statuses := []ports.OpStatus{ports.OpDelivered, ports.OpDelivered, ports.OpDelivered, ports.OpRetrying, ports.OpParked, ports.OpFailed}
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for {
					from := int(next.Add(ports.MaxSiteCallReport)) - ports.MaxSiteCallReport
					if from >= rows {
						return
					}
					site := "site-" + strconv.Itoa(from/ports.MaxSiteCallReport%30)
					ops := make([]ports.Operation, 0, ports.MaxSiteCallReport)
					for i := from; i < min(rows, from+ports.MaxSiteCallReport); i++ {
						op := sitecallstest.NewOperation(base.Add(time.Duration(i) * time.Millisecond))
						op.Status = statuses[i%len(statuses)]
						if op.Status.Terminal() {
							op.TerminalAt = op.UpdatedAt
						}
						ops = append(ops, op)
					}
					if _, err := s.ReportSiteCalls(ctx, site, ops, base); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if s.driver == DriverPostgres {
			if _, err := s.w.ExecContext(ctx, `VACUUM ANALYZE site_calls`); err != nil {
				b.Fatal(err)
			}
		}
		deep, err := s.QuerySiteCalls(ctx, ports.SiteCallFilter{}, ports.PageRequest{Limit: rows / 2})
		if err != nil {
			b.Fatal(err)
		}
		page := func(f ports.SiteCallFilter, after string) func() error {
			return func() error {
				_, err := s.QuerySiteCalls(ctx, f, ports.PageRequest{Limit: 50, After: after})
				return err
			}
		}
		for _, r := range []struct {
			name string
			fn   func() error
		}{
			{"first", page(ports.SiteCallFilter{}, "")},
			{"site", page(ports.SiteCallFilter{Site: "site-7"}, "")},
			{"parked", page(ports.SiteCallFilter{Statuses: []ports.OpStatus{ports.OpParked}}, "")},
			{"keyword", page(ports.SiteCallFilter{Keyword: "503"}, "")},
			{"keyword-rare", page(ports.SiteCallFilter{Keyword: "no-such-word"}, "")},
			{"deep", page(ports.SiteCallFilter{}, deep.Next)},
			{"count-site", func() error {
				_, err := s.CountSiteCalls(ctx, ports.SiteCallFilter{Site: "site-7"})
				return err
			}},
			{"kpis", func() error {
				_, err := s.SiteCallKPIs(ctx, ports.SiteCallKPIRequest{FailedSince: time.Now().Add(-time.Hour)})
				return err
			}},
		} {
			b.Run(r.name, func(b *testing.B) {
				for b.Loop() {
					if err := r.fn(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	})
}
