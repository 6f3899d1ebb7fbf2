package memstore

import (
	"context"
	"fmt"

	"github.com/siteline/outbox/ports"
)

// Throughput implements ports.Store: a walk over every row and its audit
// records.
func (s *Store) Throughput(ctx context.Context, q ports.ThroughputQuery) (ports.Throughput, error) {
	if err := q.Validate(); err != nil {
		return ports.Throughput{}, fmt.Errorf("memstore: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return ports.Throughput{}, fmt.Errorf("memstore: throughput: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var counts []ports.ThroughputCount
	for id, r := range s.rows {
		n := &r.n
		if (q.Site != "" && n.SourceSite != q.Site) || (q.Type != "" && n.Type != q.Type) {
			continue
		}
		key := ""
		switch q.By {
		case ports.ThroughputBySite:
			key = n.SourceSite
		case ports.ThroughputByType:
			key = n.Type
		}
		if b, ok := ports.ThroughputBucket(q, n.DeliveredAt); ok && !n.DeliveredAt.IsZero() {
			counts = append(counts, ports.ThroughputCount{Key: key, Bucket: b, Kind: ports.ThroughputDelivered, N: 1})
		}
		for _, rec := range s.audit[id] {
			kind := -1
			switch {
			case rec.Kind == ports.AuditAttempted && rec.Status == ports.StatusRetrying:
				kind = ports.ThroughputFailed
			case rec.Kind == ports.AuditParked && rec.Status == ports.StatusParked:
				kind = ports.ThroughputParked
			}
			if b, ok := ports.ThroughputBucket(q, rec.At); ok && kind >= 0 {
				counts = append(counts, ports.ThroughputCount{Key: key, Bucket: b, Kind: kind, N: 1})
			}
		}
	}
	return ports.NewThroughput(q, counts), nil
}
