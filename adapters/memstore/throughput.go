package memstore

import (
	"context"
	"fmt"

	"github.com/siteline/outbox/ports"
)

// Throughput implements ports.Store: a walk over every row and every audit
// record.
func (s *Store) Throughput(ctx context.Context, q ports.ThroughputQuery) (ports.Throughput, error) {
	if err := q.Validate(); err != nil {
		return ports.Throughput{}, fmt.Errorf("memstore: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return ports.Throughput{}, fmt.Errorf("memstore: throughput: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := func(site, typ string) (string, bool) {
		if (q.Site != "" && site != q.Site) || (q.Type != "" && typ != q.Type) {
			return "", false
		}
		switch q.By {
		case ports.ThroughputBySite:
			return site, true
		case ports.ThroughputByType:
			return typ, true
		}
		return "", true
	}
	var counts []ports.ThroughputCount
	for _, r := range s.rows {
		n := &r.n
		k, ok := key(n.SourceSite, n.Type)
		if b, in := ports.ThroughputBucket(q, n.DeliveredAt); ok && in && !n.DeliveredAt.IsZero() {
			counts = append(counts, ports.ThroughputCount{Key: k, Bucket: b, Kind: ports.ThroughputDelivered, N: 1})
		}
	}
	for _, recs := range s.audit {
		if q.DeliveredOnly {
			break
		}
		for _, rec := range recs {
			var kind ports.ThroughputKind
			switch {
			case rec.Kind == ports.AuditAttempted && rec.Status == ports.StatusRetrying && rec.Outcome != ports.OutcomeInterrupted:
				kind = ports.ThroughputFailed
			case rec.Kind == ports.AuditParked && rec.Status == ports.StatusParked:
				kind = ports.ThroughputParked
			default:
				continue
			}
			k, ok := key(rec.SourceSite, rec.Type)
			if b, in := ports.ThroughputBucket(q, rec.At); ok && in {
				counts = append(counts, ports.ThroughputCount{Key: k, Bucket: b, Kind: kind, N: 1})
			}
		}
	}
	return ports.NewThroughput(q, counts), nil
}
