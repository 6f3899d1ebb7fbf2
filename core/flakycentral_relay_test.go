package core

import (
	"context"
	"fmt"

	"github.com/siteline/outbox/ports"
)

// The site link's two newer calls on flakyCentral (site_test.go), so that
// the core's tests build in this branch. At a merge with a branch that
// gives flakyCentral these methods in site_test.go, this file goes.

func (c *flakyCentral) ReportOperations(ctx context.Context, req ports.OpReport) error {
	if c.down.Load() {
		return fmt.Errorf("connection refused: %w", ports.ErrUnavailable)
	}
	req.Site = c.site
	return c.svc.ReportOperations(ctx, req)
}

func (c *flakyCentral) Sync(ctx context.Context, req ports.SyncRequest) (ports.SyncAnswer, error) {
	if c.down.Load() {
		return ports.SyncAnswer{}, fmt.Errorf("connection refused: %w", ports.ErrUnavailable)
	}
	req.Site = c.site
	return c.svc.Sync(ctx, req)
}
