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
		if n, err := s.PurgeSiteCalls(ctx); err != nil {
			if ctx.Err() == nil {
				s.log.Error("purge of the site-call mirror failed", "err", err)
			}
		} else if n > 0 {
			s.log.Info("purged terminal site calls", "rows", n, "retention", s.cfg.TerminalRetention.String())
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

// PurgeSiteCalls deletes the mirror's terminal rows (Delivered, Failed,
// Discarded at their site) that ended TerminalRetention ago, and the
// commands answered as long ago, and returns how many rows it deleted.
// Without a mirror it does nothing.
func (s *Service) PurgeSiteCalls(ctx context.Context) (int, error) {
	if s.siteCalls == nil {
		return 0, nil
	}
	cutoff := s.clock.Now().Add(-s.cfg.TerminalRetention)
	total := 0
	for {
		n, err := s.siteCalls.PurgeSiteCalls(ctx, cutoff, purgeChunk)
		total += n
		if err != nil {
			return total, fmt.Errorf("purge site calls before %s: %w", cutoff.Format(time.RFC3339), err)
		}
		if n < purgeChunk {
			return total, nil
		}
	}
}
