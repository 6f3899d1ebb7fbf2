package sqlstore

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"time"
)

// analyzer keeps the PostgreSQL planner's picture of the notifications
// table current while the table grows from empty.
//
// The claim must read the partial Pending index in claim order and stop
// after Limit rows. Until the table is analyzed, the planner believes the
// table holds a few dozen Pending rows, and prefers to fetch them all and
// sort them: on a table that filled fast (a fresh install, a backlog
// arriving, a benchmark) every claim then sorts the whole backlog.
// Autovacuum analyzes the table only after its next nap (a minute by
// default), so the store runs ANALYZE itself in the background each time
// the rows it inserted since Open cross a threshold: 1,000, then 4 times
// the previous one. Past a few million rows autovacuum's own thresholds
// (set low by the migration) take over.
type analyzer struct {
	db      *sql.DB
	onError func(error)
	total   atomic.Int64
	next    atomic.Int64
	running atomic.Bool
	ctx     context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

const (
	analyzeFirst = 1000
	analyzeLast  = 4_000_000
)

func newAnalyzer(db *sql.DB, onError func(error)) *analyzer {
	ctx, stop := context.WithCancel(context.Background())
	a := &analyzer{db: db, onError: onError, ctx: ctx, stop: stop}
	a.next.Store(analyzeFirst)
	return a
}

// inserted notes n inserted rows and starts an ANALYZE when a threshold is
// crossed and none is running.
func (a *analyzer) inserted(n int) {
	total := a.total.Add(int64(n))
	next := a.next.Load()
	if total < next || next > analyzeLast || !a.running.CompareAndSwap(false, true) {
		return
	}
	a.next.Store(max(next, total) * 4)
	a.wg.Go(func() {
		defer a.running.Store(false)
		ctx, cancel := context.WithTimeout(a.ctx, time.Minute)
		defer cancel()
		if _, err := a.db.ExecContext(ctx, "ANALYZE notifications"); err != nil && a.ctx.Err() == nil {
			a.onError(err)
		}
	})
}

func (a *analyzer) close() {
	a.stop()
	a.wg.Wait()
}
