package memstore

import (
	"container/heap"
	"strings"
	"time"
)

// The claim index keeps every Pending or Retrying row in exactly one of three
// heaps, by an entry stamped with the row's current generation:
//
//   - ready: rows that were claimable when last placed, in claim order
//     (Priority descending, CreatedAt ascending, ID ascending);
//   - leased: rows whose lease ran until a future instant, by ClaimedUntil;
//   - waiting: Retrying rows scheduled for a future instant, by NextAttemptAt.
//
// Every change to a row gives it a new generation and a new entry; entries of
// older generations are stale and dropped when they reach the top. Claim moves
// the entries of leased and waiting whose instant has come into ready, then
// pops ready in claim order and checks each row against the claim instant, so
// a claim costs O((k + m) log n) for k claimed rows and m rows moved, instead
// of a scan of the table.

// readyEntry is a row in claim order. Priority, CreatedAt and ID never change
// after insert, so the key stays valid as long as the generation matches.
type readyEntry struct {
	priority int
	created  time.Time
	id       string
	gen      uint64
}

func readyLess(a, b readyEntry) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	if !a.created.Equal(b.created) {
		return a.created.Before(b.created)
	}
	return strings.Compare(a.id, b.id) < 0
}

// timedEntry is a row that waits for an instant.
type timedEntry struct {
	at  time.Time
	id  string
	gen uint64
}

func timedLess(a, b timedEntry) bool { return a.at.Before(b.at) }

// queue is a binary heap ordered by less.
type queue[T any] struct {
	items []T
	less  func(a, b T) bool
}

// Len implements heap.Interface.
func (q *queue[T]) Len() int { return len(q.items) }

// Less implements heap.Interface.
func (q *queue[T]) Less(i, j int) bool { return q.less(q.items[i], q.items[j]) }

// Swap implements heap.Interface.
func (q *queue[T]) Swap(i, j int) { q.items[i], q.items[j] = q.items[j], q.items[i] }

// Push implements heap.Interface; use push.
func (q *queue[T]) Push(x any) { q.items = append(q.items, x.(T)) }

// Pop implements heap.Interface; use pop.
func (q *queue[T]) Pop() any {
	n := len(q.items) - 1
	x := q.items[n]
	var zero T
	q.items[n] = zero
	q.items = q.items[:n]
	return x
}

func (q *queue[T]) push(x T) { heap.Push(q, x) }
func (q *queue[T]) pop() T   { return heap.Pop(q).(T) }
func (q *queue[T]) peek() T  { return q.items[0] }
