package sqlstore

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/siteline/outbox/ports"
)

// throughputRow is a row of throughputQuery: n events of kind in bucket of
// key.
type throughputRow struct {
	Key    string `bun:"k"`
	Bucket int64  `bun:"b"`
	Kind   int    `bun:"kind"` // a ports.ThroughputKind
	N      int64  `bun:"n"`
}

// throughputQuery counts, per key and bucket, three kinds of events in one
// UNION ALL (DESIGN.md, "Throughput"), each a range scan of one index
// alone:
//   - delivered rows by delivered_at, from the delivered_at index, which
//     carries the site and the type;
//   - failed attempts and parkings by their records' at, from the partial
//     audit index on (kind, status, at), which carries the site and the type
//     the dispatcher copied onto each record.
func (s *Notifications) throughputQuery(q ports.ThroughputQuery) *bun.SelectQuery {
	count := bun.Safe(s.d.countAll())
	part := func(sel *bun.SelectQuery, timeCol string, kind ports.ThroughputKind) *bun.SelectQuery {
		bucket := s.d.bucket(timeCol, q.Bucket)
		sel = sel.ColumnExpr(bucket+` AS "b"`, at(q.From)).
			ColumnExpr(`? AS "kind", ? AS "n"`, int(kind), count).
			Where(timeCol+` >= ?`, at(q.From)).Where(timeCol+` < ?`, at(q.To))
		if q.Site != "" {
			sel = sel.Where(`"source_site" = ?`, q.Site)
		}
		if q.Type != "" {
			sel = sel.Where(`"type" = ?`, q.Type)
		}
		switch q.By {
		case ports.ThroughputBySite:
			sel = sel.ColumnExpr(`"source_site" AS "k"`).GroupExpr(`"source_site"`)
		case ports.ThroughputByType:
			sel = sel.ColumnExpr(`"type" AS "k"`).GroupExpr(`"type"`)
		default:
			sel = sel.ColumnExpr(`? AS "k"`, "")
		}
		return sel.GroupExpr(bucket, at(q.From))
	}
	delivered := part(s.r.NewSelect().TableExpr("?", s.d.from("notifications_delivered_idx")),
		`"delivered_at"`, ports.ThroughputDelivered)
	audit := func(kind ports.AuditKind, status ports.Status, k ports.ThroughputKind) *bun.SelectQuery {
		// The outcome condition is the audit index's own (an attempt a
		// shutdown cut short is no failure), so that the index serves.
		sel := s.r.NewSelect().TableExpr(`"notification_audit"`).
			Where(`"kind" = ?`, string(kind)).Where(`"status" = ?`, string(status)).
			Where(`"outcome" <> ?`, string(ports.OutcomeInterrupted))
		return part(sel, `"at"`, k)
	}
	if q.DeliveredOnly {
		return delivered
	}
	return delivered.
		UnionAll(audit(ports.AuditAttempted, ports.StatusRetrying, ports.ThroughputFailed)).
		UnionAll(audit(ports.AuditParked, ports.StatusParked, ports.ThroughputParked))
}

// Throughput implements ports.Store.
func (s *Notifications) Throughput(ctx context.Context, q ports.ThroughputQuery) (ports.Throughput, error) {
	if err := q.Validate(); err != nil {
		return ports.Throughput{}, fmt.Errorf("sqlstore: %w", err)
	}
	var rows []throughputRow
	if err := s.throughputQuery(q).Scan(ctx, &rows); err != nil {
		return ports.Throughput{}, s.fail("throughput", err)
	}
	counts := make([]ports.ThroughputCount, len(rows))
	for i, r := range rows {
		counts[i] = ports.ThroughputCount{Key: r.Key, Bucket: int(r.Bucket), Kind: ports.ThroughputKind(r.Kind), N: r.N}
	}
	return ports.NewThroughput(q, counts), nil
}
