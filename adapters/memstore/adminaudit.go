package memstore

import (
	"context"
	"fmt"

	"github.com/siteline/outbox/ports"
)

// This file is ports.AdminAudit: the admin audit log as a slice in append
// order under the store's mutex.

var _ ports.AdminAudit = (*Store)(nil)

// AppendAdmin implements ports.AdminAudit.
func (s *Store) AppendAdmin(ctx context.Context, r ports.AdminRecord) (ports.AdminRecord, error) {
	if err := ctx.Err(); err != nil {
		return ports.AdminRecord{}, fmt.Errorf("memstore: append admin record: %w", err)
	}
	if err := r.Validate(); err != nil {
		return ports.AdminRecord{}, fmt.Errorf("memstore: append admin record: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r.ID = int64(len(s.admin)) + 1
	r.At = utc(r.At)
	s.admin = append(s.admin, r)
	return r, nil
}

// AdminRecords implements ports.AdminAudit.
func (s *Store) AdminRecords(ctx context.Context, q ports.AdminQuery) ([]ports.AdminRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memstore: read admin records: %w", err)
	}
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("memstore: read admin records: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []ports.AdminRecord{}
	for i := len(s.admin) - 1; i >= 0 && len(out) < q.Limit; i-- {
		r := s.admin[i]
		if (q.Before > 0 && r.ID >= q.Before) || (q.Kind != "" && r.Kind != q.Kind) || (q.Name != "" && r.Name != q.Name) {
			continue
		}
		out = append(out, r)
	}
	return out, nil
}
