package sqlstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/siteline/outbox/ports"
)

// BenchmarkThroughput1M measures the dashboard's throughput queries on
// PostgreSQL with OUTBOX_BENCH_ROWS notifications (default 1,000,000) made
// over the last 30 days (one every 2.6 s) across 30 sites and 3 types, with
// their audit log: 90 % delivered (an attempt and a Delivered record), 7 %
// failed twice (two Attempted records left Retrying) of which 2 % then
// parked, 3 % pending. It reports ms per query. The seven-day charts read
// about 230,000 delivered rows and 16,000 failures; the plan of the widest
// is logged.
func BenchmarkThroughput1M(b *testing.B) {
	size := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_ROWS")); err == nil && v > 0 {
		size = v
	}
	s := newPostgresStore(b, postgresDSN(b))
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	span := 30 * 24 * time.Hour
	step := span / time.Duration(size)
	base := now.Add(-span)
	fill := time.Now()
	lit := func(t time.Time) string { return "'" + t.Format("2006-01-02 15:04:05.000000") + "+00'::timestamptz" }
	rows := fmt.Sprintf(`(SELECT i, %s + i * interval '%d microseconds' AS c, md5(i::text)::uuid AS id,
		'site-' || (i %% 30) AS site, (ARRAY['email','sms','webhook'])[1 + i %% 3] AS typ FROM generate_series(0, %d) AS i) AS g`,
		lit(base), step.Microseconds(), size-1)
	stmts := []string{
		`INSERT INTO notifications (id, type, list, subject, body, status, source_site, created_at, updated_at, delivered_at, retry_count)
		 SELECT id, typ, 'list-' || (i % 50), 'Pump ' || i, 'body',
		   CASE WHEN i % 100 < 90 THEN 'Delivered' WHEN i % 100 < 95 THEN 'Retrying' WHEN i % 100 < 97 THEN 'Parked' ELSE 'Pending' END,
		   site, c, c + interval '2 minutes',
		   CASE WHEN i % 100 < 90 THEN c + interval '1 second' END,
		   CASE WHEN i % 100 BETWEEN 90 AND 96 THEN 2 ELSE 0 END
		 FROM ` + rows,
		`INSERT INTO notification_audit (notification_id, source_site, type, at, kind, actor, outcome, status)
		 SELECT id, site, typ, c + interval '1 second', 'Attempted', 'system', 'Success', 'Delivered' FROM ` + rows + ` WHERE i % 100 < 90
		 UNION ALL SELECT id, site, typ, c + interval '1 second', 'Delivered', 'system', '', 'Delivered' FROM ` + rows + ` WHERE i % 100 < 90
		 UNION ALL SELECT id, site, typ, c + interval '1 second', 'Attempted', 'system', 'Transient', 'Retrying' FROM ` + rows + ` WHERE i % 100 BETWEEN 90 AND 96
		 UNION ALL SELECT id, site, typ, c + interval '61 seconds', 'Attempted', 'system', 'Transient', 'Retrying' FROM ` + rows + ` WHERE i % 100 BETWEEN 90 AND 96
		 UNION ALL SELECT id, site, typ, c + interval '2 minutes', 'Parked', 'system', '', 'Parked' FROM ` + rows + ` WHERE i % 100 BETWEEN 95 AND 96`,
		`VACUUM ANALYZE notifications`,
		`VACUUM ANALYZE notification_audit`,
	}
	for _, q := range stmts {
		if _, err := s.writer().ExecContext(ctx, q); err != nil {
			b.Fatalf("%s: %v", strings.Fields(q)[0], err)
		}
	}
	b.Logf("filled %d notifications and their audit log in %s", size, time.Since(fill).Round(time.Millisecond))

	hour := func(by ports.ThroughputGroup) ports.ThroughputQuery {
		to := now.Truncate(time.Minute).Add(time.Minute)
		return ports.ThroughputQuery{From: to.Add(-time.Hour), To: to, Bucket: time.Minute, By: by}
	}
	days := func(by ports.ThroughputGroup) ports.ThroughputQuery {
		to := now.Truncate(time.Hour).Add(time.Hour)
		return ports.ThroughputQuery{From: to.Add(-7 * 24 * time.Hour), To: to, Bucket: time.Hour, By: by}
	}
	oneSite := days(ports.ThroughputByType)
	oneSite.Site = "site-5" // a site that parks: i % 30 = 5 meets i % 100 = 95

	var plan []string
	explain := "EXPLAIN (ANALYZE, BUFFERS) " + s.Notifications().throughputQuery(days(ports.ThroughputByType)).String()
	r, err := s.reader().QueryContext(ctx, explain)
	if err != nil {
		b.Fatal(err)
	}
	for r.Next() {
		var line string
		if err := r.Scan(&line); err != nil {
			b.Fatal(err)
		}
		plan = append(plan, line)
	}
	r.Close()
	b.Logf("plan of 7 days by type:\n%s", strings.Join(plan, "\n"))

	for _, c := range []struct {
		name string
		q    ports.ThroughputQuery
	}{
		{"Hour", hour(ports.ThroughputTotal)},
		{"HourBySite", hour(ports.ThroughputBySite)},
		{"Days7", days(ports.ThroughputTotal)},
		{"Days7BySite", days(ports.ThroughputBySite)},
		{"Days7ByType", days(ports.ThroughputByType)},
		{"Days7OneSiteByType", oneSite},
	} {
		b.Run(c.name, func(b *testing.B) {
			var t ports.Throughput
			for b.Loop() {
				var err error
				if t, err = s.Notifications().Throughput(ctx, c.q); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/query")
			var total ports.ThroughputCounts
			for _, sr := range t.Series {
				total.Add(sr.Total)
			}
			if total.Delivered == 0 || total.Failed == 0 || total.Parked == 0 {
				b.Fatalf("%s counted %+v", c.name, total)
			}
		})
	}
}
