package core

import (
	"context"
	"fmt"

	"github.com/siteline/outbox/ports"
)

// TEMPORARY, sitesync branch only: central's ReportOperations and Sync are
// written on another branch at the same time. These placeholders only let
// package core compile here; delete this file when merging that branch.

// ReportOperations implements ports.Central (placeholder: refuses).
func (s *Service) ReportOperations(context.Context, ports.OpReport) error {
	return fmt.Errorf("central: report operations: not built on this branch: %w", ports.ErrUnavailable)
}

// Sync implements ports.Central (placeholder: refuses).
func (s *Service) Sync(context.Context, ports.SyncRequest) (ports.SyncAnswer, error) {
	return ports.SyncAnswer{}, fmt.Errorf("central: sync: not built on this branch: %w", ports.ErrUnavailable)
}
