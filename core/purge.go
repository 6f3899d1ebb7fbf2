package core

import (
	"context"
	"fmt"
	"time"
)

// purgeChunk is how many rows one purge statement deletes, so a large purge
// never holds a long lock.
const purgeChunk = 1000

// purgeLoop purges at start and then every PurgeInterval until ctx is done.
func (s *Service) purgeLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.PurgeInterval)
	defer t.Stop()
	for {
		if n, err := s.Purge(ctx); err != nil {
			if ctx.Err() == nil {
				s.log.Error("purge failed", "err", err)
			}
		} else if n > 0 {
			s.log.Info("purged terminal notifications", "rows", n, "retention", s.cfg.TerminalRetention.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Purge deletes terminal rows (Delivered, Parked, Discarded) that have not
// changed for TerminalRetention, with their audit history, and returns how
// many it deleted. Pending and Retrying rows are never purged.
func (s *Service) Purge(ctx context.Context) (int, error) {
	cutoff := s.clock.Now().Add(-s.cfg.TerminalRetention)
	total := 0
	for {
		ids, err := s.store.Purge(ctx, cutoff, purgeChunk)
		if err != nil {
			return total, fmt.Errorf("purge before %s: %w", cutoff.Format(time.RFC3339), err)
		}
		total += len(ids)
		if len(ids) > 0 {
			// The rows are gone: forget their history even if shutdown
			// began meanwhile, or no later purge could find it.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
			err := s.audit.Forget(fctx, ids)
			cancel()
			if err != nil {
				return total, fmt.Errorf("purge: forget audit history: %w", err)
			}
		}
		if len(ids) < purgeChunk {
			return total, nil
		}
	}
}
