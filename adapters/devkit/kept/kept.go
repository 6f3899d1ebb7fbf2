// Package kept is what the captures of outbox dev (smtpcapture,
// hookcapture) keep: the newest items received, up to a limit, and a wait
// for a count of them, woken at each one added.
package kept

import (
	"context"
	"slices"
	"sync"
)

// List holds the newest items added, at most its limit, oldest first. It
// is safe for concurrent use; the zero value is not: use New.
type List[T any] struct {
	mu     sync.Mutex
	items  []T
	limit  int
	notify chan struct{} // closed and replaced at each Add
}

// New returns an empty List that keeps at most limit items (1 when limit
// is less).
func New[T any](limit int) *List[T] {
	return &List[T]{limit: max(limit, 1), notify: make(chan struct{})}
}

// Add appends v, dropping the oldest beyond the limit, and wakes Wait.
func (l *List[T]) Add(v T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items = append(l.items, v)
	if over := len(l.items) - l.limit; over > 0 {
		l.items = slices.Delete(l.items, 0, over)
	}
	close(l.notify)
	l.notify = make(chan struct{})
}

// All returns a copy of the items, oldest first.
func (l *List[T]) All() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.items)
}

// Len returns how many items are kept.
func (l *List[T]) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.items)
}

// Wait blocks until at least n items are kept or ctx ends. It returns how
// many are kept, and ctx's error when it ended first.
func (l *List[T]) Wait(ctx context.Context, n int) (int, error) {
	for {
		l.mu.Lock()
		got, ch := len(l.items), l.notify
		l.mu.Unlock()
		if got >= n {
			return got, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return got, ctx.Err()
		}
	}
}
