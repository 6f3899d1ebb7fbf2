package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"
)

// SQLite has one writer at a time, and each commit appends every page it
// dirtied to the WAL. Two helpers make its writes cheaper:
//
//   - groupWriter runs the writes of concurrent callers (Insert, Record,
//     Append) in one transaction: pages they share (the table's tail, index
//     tails) are written once per commit instead of once per caller. Each
//     caller stays all or nothing (see run).
//   - checkpointer copies the WAL back into the database file from a
//     connection of its own, off the writer's path (an automatic checkpoint
//     would run inside a writer's commit).
//
// subjectIndexer keeps the trigram index of subjects (migration 0004;
// DESIGN.md, "Keyword search") close behind the table, off the inserts' path.

// groupRequest is one caller's share of a group transaction.
type groupRequest struct {
	ctx  context.Context
	fn   func(ctx context.Context, c conn) error
	err  error
	done chan struct{}
}

// groupWriter runs grouped writes on the writer pool from one goroutine.
type groupWriter struct {
	db       *sql.DB
	requests chan *groupRequest
	stop     context.CancelFunc
	ctx      context.Context
	wg       sync.WaitGroup
}

// maxGroup caps the callers one group transaction serves.
const maxGroup = 32

func newGroupWriter(db *sql.DB) *groupWriter {
	ctx, stop := context.WithCancel(context.Background())
	w := &groupWriter{db: db, requests: make(chan *groupRequest), stop: stop, ctx: ctx}
	w.wg.Go(w.loop)
	return w
}

// do runs fn in a group transaction and returns its error. fn's writes are
// committed exactly when do returns nil. fn may run more than once (see run):
// it must start its results afresh on each run. do waits for the group even when
// ctx ends meanwhile, so that the caller never misses an outcome; a request
// whose ctx has ended before its group starts is not run.
func (w *groupWriter) do(ctx context.Context, fn func(ctx context.Context, c conn) error) error {
	r := &groupRequest{ctx: ctx, fn: fn, done: make(chan struct{})}
	select {
	case w.requests <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-w.ctx.Done():
		return errors.New("store closed")
	}
	<-r.done
	return r.err
}

func (w *groupWriter) loop() {
	for {
		var group []*groupRequest
		select {
		case r := <-w.requests:
			group = append(group, r)
		case <-w.ctx.Done():
			return
		}
	more:
		for len(group) < maxGroup {
			select {
			case r := <-w.requests:
				group = append(group, r)
			default:
				break more
			}
		}
		w.run(group)
	}
}

// run executes group in one transaction. When a request fails, the
// transaction is rolled back and each request runs again alone, in a
// transaction of its own: a failure never touches another caller's writes,
// and no caller is told of a failure while its rows were committed (as
// could happen after an error that makes SQLite end the transaction
// itself, were the others to go on).
func (w *groupWriter) run(group []*groupRequest) {
	live := group[:0:0]
	for _, r := range group {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			close(r.done)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	defer func() {
		for _, r := range live {
			close(r.done)
		}
	}()
	if len(live) > 1 && w.together(live) == nil {
		return
	}
	for _, r := range live {
		r.err = w.together([]*groupRequest{r})
	}
}

// together runs the requests in one transaction and commits it when all
// succeed. It returns the first error, having rolled back.
func (w *groupWriter) together(rs []*groupRequest) error {
	// The transaction outlives any one caller's context; the store's
	// context ends it at Close.
	ctx := w.ctx
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	for _, r := range rs {
		if err := r.fn(ctx, tx); err != nil {
			return errors.Join(err, tx.Rollback())
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func (w *groupWriter) close() {
	w.stop()
	w.wg.Wait()
}

// checkpointer runs passive WAL checkpoints on a connection of its own.
type checkpointer struct {
	db   *sql.DB
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// checkpointEvery is the cadence of background checkpoints. The writer
// keeps an automatic checkpoint at a high mark as a backstop.
const checkpointEvery = 100 * time.Millisecond

func newCheckpointer(db *sql.DB, onError func(error)) *checkpointer {
	ctx, stop := context.WithCancel(context.Background())
	c := &checkpointer{db: db, stop: stop}
	c.wg.Go(func() {
		t := time.NewTicker(checkpointEvery)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			_, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)")
			if err != nil && ctx.Err() == nil && !failing {
				onError(err)
			}
			failing = err != nil
		}
	})
	return c
}

func (c *checkpointer) close() error {
	c.stop()
	c.wg.Wait()
	return c.db.Close()
}

// subjectIndexer indexes the subjects of newly inserted notifications in the
// background: once rows arrive, it waits subjectIndexEvery for more to join
// them and then indexes every row above the index's mark, in one group
// transaction (Store.indexSubjects). FTS5 pays for each statement that writes
// to it (it writes its pending terms out as a segment, and merges segments):
// indexing within each insert transaction cost ingest two to three times as
// much. Keyword searches read the rows above the mark themselves, so that
// the lag costs time only.
type subjectIndexer struct {
	kick chan struct{}
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// subjectIndexEvery is the most the index lags behind the table while rows
// arrive (at 50,000 rows a second, 12,500 rows for a keyword to read apart).
const subjectIndexEvery = 250 * time.Millisecond

// newSubjectIndexer starts the indexer; index indexes the rows above the
// mark. onError hears the first failure of a run of them.
func newSubjectIndexer(index func(ctx context.Context) error, onError func(error)) *subjectIndexer {
	ctx, stop := context.WithCancel(context.Background())
	x := &subjectIndexer{kick: make(chan struct{}, 1), stop: stop}
	x.wg.Go(func() {
		wait := time.NewTimer(subjectIndexEvery)
		defer wait.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-x.kick:
			}
			wait.Reset(subjectIndexEvery)
			select {
			case <-ctx.Done():
				return
			case <-wait.C:
			}
			err := index(ctx)
			if err != nil && ctx.Err() == nil && !failing {
				onError(err)
			}
			failing = err != nil
			if failing {
				x.inserted() // the rows are still waiting: try again
			}
		}
	})
	return x
}

// inserted tells the indexer that rows were inserted.
func (x *subjectIndexer) inserted() {
	select {
	case x.kick <- struct{}{}:
	default: // a run is due already
	}
}

func (x *subjectIndexer) close() {
	x.stop()
	x.wg.Wait()
}
